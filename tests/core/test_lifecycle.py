"""The slot model for protocols with explicit open and close events (docs/protocols.md).

Each test starts from the state the events before it built, then applies one event and
checks what the response became: the rules of routing, snapshots, end classes and final
snapshots, independent of any wire format.
"""

from __future__ import annotations

import pytest

from etf_otel import ABSENT, ErrorCategory, StreamState, Transition
from etf_otel.core._lifecycle import LifecycleSlots
from etf_otel.core._validation import same_arguments
from etf_otel.core._vocabulary import ResponseEnd

E = ErrorCategory


def opened(key: int = 0, id: object = "call-1", name: object = "f") -> LifecycleSlots:
    slots = LifecycleSlots()
    slots.open(key, id, name)
    return slots


def test_a_call_opened_streamed_and_closed_is_proposed() -> None:
    slots = opened()
    slots.snapshot(0, "", placeholder=True)
    slots.delta(0, '{"a":')
    slots.delta(0, "1}")
    slots.close_arguments(0)
    slots.snapshot(0, '{"a": 1}')
    slots.ident(0, "call-1", "f")
    slots.close_slot(0)
    for key in (3, 4):  # events for keys that hold no slot change nothing
        slots.close_arguments(key)
        slots.close_slot(key)
    slots.end()
    assert slots.ended is ResponseEnd.COMPLETE
    result = slots.finish()
    assert result.dispatchable
    (call,) = result.calls
    assert (call.id, call.name, call.arguments, call.choice, call.index) == ("call-1", "f", '{"a":1}', 0, 0)


@pytest.mark.parametrize(
    ("key", "before"),
    [
        (1, lambda slots: None),  # no slot at the key
        (0, lambda slots: slots.close_arguments(0)),  # the argument stream closed
        (0, lambda slots: slots.close_slot(0)),  # the slot closed
    ],
)
def test_a_delta_for_no_open_argument_stream_is_unknown_slot(key: int, before: object) -> None:
    slots = opened(key)
    before(slots)  # type: ignore[operator]
    slots.delta(0, "{}")
    slots.end()
    result = slots.finish()
    assert not result.dispatchable
    assert E.UNKNOWN_SLOT in result.categories
    assert result.diagnostics[-1].category is E.UNKNOWN_SLOT


def test_an_identity_event_for_a_closed_slot_is_unknown_slot_and_changes_nothing() -> None:
    slots = opened()
    slots.delta(0, "{}")
    slots.close_slot(0)
    slots.ident(0, "call-2")
    slots.end()
    result = slots.finish()
    assert result.calls[0].id == "call-1"
    assert result.categories == (E.UNKNOWN_SLOT,)


def test_a_repeated_opening_is_an_identity_fragment_and_reopens_the_slot() -> None:
    slots = opened()
    slots.delta(0, "{}")
    slots.close_slot(0)
    slots.open(0, "call-2", "f")  # another call reusing the key: id_conflict on this slot
    slots.delta(0, "")  # accepted: the slot is open again
    slots.end()
    result = slots.finish()
    assert result.calls[0].categories[0] is E.ID_CONFLICT
    assert E.UNKNOWN_SLOT not in result.categories


def test_an_empty_placeholder_id_is_replaced_by_the_real_one() -> None:
    slots = opened(id="")
    slots.delta(0, "{}")
    slots.ident(0, "call-9")
    slots.end()
    result = slots.finish()
    assert result.calls[0].id == "call-9"
    assert result.diagnostics[-1].transition is Transition.REPLACE_EMPTY


@pytest.mark.parametrize(
    ("deltas", "claims", "placeholder", "arguments", "mismatch"),
    [
        (["{}"], [], None, "{}", False),
        ([], ['{"a":1}'], None, '{"a":1}', False),  # done-only stream
        ([], ['{"a":1}', '{"a": 1}'], None, '{"a":1}', False),
        ([], ['{"a":1}', '{"a":2}'], None, '{"a":1}', True),  # the provider contradicts itself
        (['{"a":', "1}"], ['{"a":2}'], None, '{"a":1}', True),
        ([""], [], "{}", "{}", False),  # Anthropic parameterless tool: only "" on the wire
        ([], [], "{}", "{}", False),
        (['{"b":2}'], [], "{}", '{"b":2}', False),  # a placeholder never joins the deltas
        ([], [], None, "", False),
        ([], ["", '{"a":1}'], "{}", '{"a":1}', False),  # "" is a placeholder wherever it appears
    ],
)
def test_arguments_come_from_deltas_then_claims_then_the_placeholder(
    deltas: list[str], claims: list[str], placeholder: str | None, arguments: str, mismatch: bool
) -> None:
    slots = opened()
    if placeholder is not None:
        slots.snapshot(0, placeholder, placeholder=True)
    for delta in deltas:
        slots.delta(0, delta)
    for claim in claims:
        slots.snapshot(0, claim)
    slots.end()
    call = slots.finish().calls[0]
    assert call.arguments == arguments
    assert (E.SNAPSHOT_MISMATCH in call.categories) is mismatch


def test_a_snapshot_that_is_not_a_string_makes_the_arguments_invalid() -> None:
    slots = opened()
    slots.snapshot(0, {"a": 1})
    slots.snapshot(7, "{}")  # no slot there: nothing to state
    slots.end()
    assert slots.finish().calls[0].categories == (E.INVALID_ARGUMENTS,)


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        ('{"a":1,"b":[1,2]}', '{ "b": [1, 2], "a": 1 }', True),
        ('{"a":1}', '{"a":1.0}', True),
        ('{"a":1}', '{"a":true}', False),
        ('{"a":true}', '{"a":true}', True),
        ('{"a":[1]}', '{"a":[1,2]}', False),
        ('{"a":{"b":null}}', '{"a":{"c":null}}', False),
        ('{"a":"x"}', '{"a":"y"}', False),
        ("not json", "not json ", False),
        ("[" * 100_000, "[" * 100_000 + " ", False),
    ],
)
def test_arguments_are_equal_as_json_values(left: str, right: str, same: bool) -> None:
    assert same_arguments(left, right) is same


def test_the_final_snapshot_is_a_cross_check_by_id_name_and_arguments() -> None:
    slots = opened(0, "call-1", "f")
    slots.delta(0, '{"a":1}')
    slots.open(1, "call-2", "g")
    slots.delta(1, "{}")
    slots.open(2, "call-3", "h")
    slots.delta(2, "{}")
    slots.end()
    slots.final_snapshot([("call-1", "f", '{"a": 1}'), ("call-2", "other", "{}"), ("call-x", "h", "{}")])
    result = slots.finish()
    verdicts = {call.id: call.categories for call in result.calls}
    # call-1 agrees with the list, but the response is blocked: it is rejected with the blocking category.
    assert verdicts == dict.fromkeys(("call-1", "call-2", "call-3"), (E.SNAPSHOT_MISMATCH,))
    assert [r.index for r in result.rejections] == [1, 2, None]  # the causes: call-1 blocked no one
    assert any(r.index is None and r.category is E.SNAPSHOT_MISMATCH for r in result.rejections)


def test_no_final_snapshot_is_no_claim_and_an_empty_one_claims_no_calls() -> None:
    without = opened()
    without.delta(0, "{}")
    without.end()
    assert without.finish().dispatchable
    empty = opened()
    empty.delta(0, "{}")
    empty.end()
    empty.final_snapshot([])  # e.g. a final output holding only a message: the streamed call is omitted
    assert empty.finish().calls[0].categories == (E.SNAPSHOT_MISMATCH,)


def test_a_final_snapshot_with_arguments_that_are_not_text_mismatches() -> None:
    slots = opened()
    slots.delta(0, "{}")
    slots.end()
    slots.final_snapshot([("call-1", "f", {})])
    assert slots.finish().calls[0].categories == (E.SNAPSHOT_MISMATCH,)


def test_an_incomplete_end_blocks_every_call_but_still_checks_them() -> None:
    slots = opened()
    slots.delta(0, '{"a":')
    slots.end(ResponseEnd.INCOMPLETE)
    result = slots.finish()
    assert result.state is StreamState.COMPLETED
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS, E.INCOMPLETE_RESPONSE)
    assert not result.dispatchable


def test_an_incomplete_call_is_rejected_in_a_complete_response() -> None:
    slots = opened()
    slots.delta(0, "{}")
    slots.mark_incomplete(0)
    slots.mark_incomplete(5)
    slots.end()
    assert slots.finish().calls[0].categories == (E.INCOMPLETE_RESPONSE,)


@pytest.mark.parametrize(("end", "state"), [(ResponseEnd.FAILED, StreamState.FAILED), (None, StreamState.TRUNCATED)])
def test_a_failed_or_cut_response_skips_the_assembly_checks(end: ResponseEnd | None, state: StreamState) -> None:
    slots = opened(id=ABSENT)
    slots.delta(0, '{"a":')
    if end is not None:
        slots.end(end)
    result = slots.finish()
    assert result.state is state
    assert result.calls[0].categories == (E.TRUNCATED_STREAM,)


@pytest.mark.parametrize(("end", "category"), [(ResponseEnd.INCOMPLETE, E.INCOMPLETE_RESPONSE), (None, None)])
def test_a_response_without_calls_names_how_it_ended(end: ResponseEnd | None, category: ErrorCategory | None) -> None:
    slots = LifecycleSlots()
    if end is not None:
        slots.end(end)
    expected = category or E.TRUNCATED_STREAM
    assert slots.finish().categories == (expected,)


def test_a_spliced_response_is_truncated_whatever_came_after() -> None:
    slots = opened()
    slots.delta(0, "{}")
    slots.splice()
    slots.end()
    result = slots.finish()
    assert result.state is StreamState.TRUNCATED
    assert not result.dispatchable


def test_compatibility_admissions_are_counted_on_their_slot() -> None:
    slots = opened()
    slots.admitted(0, Transition.BUFFER_EARLY, applied_next=True)
    slots.delta(0, "{}")
    slots.admitted(0, Transition.DROP_LATE)
    slots.end()
    result = slots.finish()
    call = result.calls[0]
    assert (result.fragments, call.fragments) == (3, 2)  # the dropped one counts on the response only
    assert call.transition_count(Transition.BUFFER_EARLY) == 1
    assert call.transition_count(Transition.DROP_LATE) == 1
    assert call.proposed


def test_a_claim_past_the_argument_cap_makes_the_arguments_invalid() -> None:
    slots = LifecycleSlots(max_argument_chars=32)
    slots.open(0, "call-1", "f")
    slots.snapshot(0, '{"a":"' + "x" * 1000 + '"}')
    slots.end()
    result = slots.finish()
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


def test_repeated_snapshots_keep_bounded_memory_and_many_different_ones_contradict() -> None:
    slots = opened()
    for _ in range(10_000):
        slots.snapshot(0, '{"a":1}')
    state = slots.slot(0)
    assert state is not None and state.claims == ['{"a":1}']
    for value in range(100):
        slots.snapshot(0, f'{{"a":{value + 2}}}')
    assert state.claims is not None and len(state.claims) == 8
    slots.end()
    assert slots.finish().calls[0].categories == (E.SNAPSHOT_MISMATCH,)


def test_a_reopened_slot_ends_at_its_last_close() -> None:
    ticks = iter(range(100))
    slots = LifecycleSlots(clock=lambda: next(ticks))
    slots.open(0, "call-1", "f")  # opened at 0
    slots.delta(0, "{}")
    slots.close_slot(0)  # 1
    slots.open(0, "call-1", "f")
    slots.close_slot(0)  # 2
    slots.end()
    call = slots.finish().calls[0]
    assert (call.opened_ns, call.closed_ns) == (0, 2)


@pytest.mark.parametrize(
    ("ends", "state", "dispatchable"),
    [
        ([ResponseEnd.FAILED, ResponseEnd.COMPLETE], StreamState.FAILED, False),
        ([ResponseEnd.INCOMPLETE, ResponseEnd.COMPLETE], StreamState.COMPLETED, False),
        ([ResponseEnd.COMPLETE, ResponseEnd.INCOMPLETE], StreamState.COMPLETED, False),
        ([ResponseEnd.COMPLETE, ResponseEnd.COMPLETE], StreamState.COMPLETED, True),
    ],
)
def test_of_several_terminal_events_the_most_severe_wins(
    ends: list[ResponseEnd], state: StreamState, dispatchable: bool
) -> None:
    """A provider that said it failed and then that it completed is not trusted with the better news."""
    slots = opened()
    slots.delta(0, "{}")
    for end in ends:
        slots.end(end)
    result = slots.finish()
    assert (result.state, result.dispatchable) == (state, dispatchable)


def test_many_small_deltas_are_compacted_and_each_keeps_its_diagnostic() -> None:
    """An established slot takes a thousand one-character deltas: pieces are joined as they come
    (memory per slot does not grow by an object per delta), the arguments are whole, and every
    delta is a ``keep_omitted`` fragment of that slot."""
    slots = opened()
    text = '{"q":"' + "x" * 990 + '"}'
    most_pieces = 0
    for character in text:
        slots.delta(0, character)
        most_pieces = max(most_pieces, len(slots.slot(0).arguments))  # type: ignore[union-attr]
    assert most_pieces <= 260
    slots.end()
    result = slots.finish()
    (call,) = result.calls
    assert call.arguments == text and call.proposed
    assert call.fragments == result.fragments == len(text) + 1  # the opening, then each delta
    kept_omitted = [d for d in result.diagnostics if d.transition is Transition.KEEP_OMITTED]
    assert [d.fragment for d in kept_omitted] == list(range(2, len(text) + 2))
    assert {(d.choice, d.index, d.category) for d in kept_omitted} == {(0, 0, None)}


# --- scopes, assembled arguments and positional identity (the seams Gemini needs) ----------------


def test_slots_live_in_scopes_and_take_arguments_an_adapter_assembled() -> None:
    slots = LifecycleSlots(max_argument_chars=12)
    slots.open(0, ABSENT, "f", scope=1)
    slots.open(1, ABSENT, "g", scope=1)
    slots.open(2, ABSENT, "h", scope=1)
    assert slots.slot(0) is None and slots.slot(0, scope=1) is not None
    slots.assembled(0, '{"a":1}', scope=1)
    slots.assembled(1, '{"a":"long!"}', scope=1)  # past the cap: invalid, never cut
    slots.assembled(2, object(), scope=1)  # no text: invalid
    slots.assembled(0, "{}")  # no slot in scope 0: nothing happens
    for key in range(3):
        slots.positional(key, scope=1)
        slots.close_slot(key, scope=1)
    slots.end()
    result = slots.finish()
    assert [(c.choice, c.index, c.arguments, c.categories) for c in result.calls] == [
        (1, 0, '{"a":1}', (E.INVALID_ARGUMENTS,)),  # valid itself: its siblings block the response
        (1, 1, "", (E.INVALID_ARGUMENTS,)),
        (1, 2, "", (E.INVALID_ARGUMENTS,)),
    ]
    assert [r.index for r in result.rejections] == [1, 2]  # the causes
    assert result.fragments == 3  # neither assembled arguments nor positional identity is a fragment


def test_a_positional_slot_needs_no_id_and_counts_its_transition_once() -> None:
    slots = LifecycleSlots()
    slots.open(0, ABSENT, "f")
    slots.open(1, ABSENT, "g")
    slots.positional(0)
    slots.positional(0)  # once per slot
    slots.positional(7)  # no slot: nothing
    slots.assembled(0, "{}")
    slots.assembled(1, "{}")
    slots.end()
    result = slots.finish()
    # The key is the first one's identity; it is rejected only because its sibling blocks the response.
    assert [c.categories for c in result.calls] == [(E.MISSING_ID,), (E.MISSING_ID,)]
    assert [r.index for r in result.rejections] == [1]
    assert [c.transition_count(Transition.POSITIONAL) for c in result.calls] == [1, 0]
    assert (
        sum(
            count
            for (transition, _), count in result.transition_counts().items()
            if transition is Transition.POSITIONAL
        )
        == 1
    )


@pytest.mark.parametrize(
    "pieces",
    [
        ['{"a":', " 1", "}", "", None],  # more deltas than diagnostics are kept
        ['{"a":', 7, "1}"],  # a piece that is not text makes the arguments invalid
        ['{"a": "', "x" * 40, '"}'],  # past the argument cap
    ],
)
@pytest.mark.parametrize("id", ["call-1", "", None, ABSENT])
def test_a_delta_does_what_an_id_less_fragment_does(pieces: list[object], id: object) -> None:
    """``delta`` inlines ``fragment`` for its hot path: both give the same result, diagnostics included."""
    results = []
    for inlined in (True, False):
        slots = LifecycleSlots(max_argument_chars=32, max_diagnostics=3)
        slots.open(0, id, "f")
        for piece in pieces:
            if inlined:
                slots.delta(0, piece)
            else:
                slots.fragment(0, 0, ABSENT, ABSENT, piece)
        slots.close_slot(0)
        slots.end()
        results.append(slots.finish())
    assert results[0] == results[1]
    assert results[0].fragments == 1 + len(pieces)


def test_no_rule_set_rejects_an_absent_id() -> None:
    """What lets ``delta`` skip the rejection path: the absent column of every table row has no category."""
    import itertools

    from etf_otel.core._identity import CompatibilityRule, IdentityRules

    for size in range(len(CompatibilityRule) + 1):
        for rules in itertools.combinations(CompatibilityRule, size):
            for unset_ids in (False, True):
                table = IdentityRules.for_rules(rules, unset_ids=unset_ids)
                for row in table.rows.values():
                    assert row["absent"].category is None
                    assert not row["absent"].adopts_id
