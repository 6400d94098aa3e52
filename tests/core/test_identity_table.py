"""Every row of docs/identity-rules.md, each started from the slot state it names.

A value alone never decides: the same ``null`` keeps an established id and rejects a
slot without one. Each case therefore feeds a prefix that builds the state, then the
incoming id, and checks the transition, the id the slot holds afterwards and the category.
"""

from __future__ import annotations

from typing import Any

import pytest

from etf_otel import CompatibilityRule, ErrorCategory, IdKind, ReferenceAssembler, Transition
from etf_otel.core._identity import DEFAULT_RULES, STRICT_TABLE, IdentityRules, IdState, Incoming
from etf_otel.core._vocabulary import Phase
from etf_otel.testing.chat import MISSING, chunk, fragment

# state name -> fragments (index 0) that build it before the incoming one arrives
STATES: dict[str, list[dict[str, Any]]] = {
    "new slot": [],
    "no id yet (absent so far)": [fragment(0, name="read_page")],
    "only empty so far": [fragment(0, "", "read_page")],
    "established": [fragment(0, "call-1", "read_page")],
}
NO_ID_STATES = ["new slot", "no id yet (absent so far)", "only empty so far"]

ROWS: list[tuple[str, Any, Transition, str | None, ErrorCategory | None]] = [
    *[(state, MISSING, Transition.AWAIT, None, None) for state in NO_ID_STATES],
    *[(state, "", Transition.AWAIT, None, None) for state in NO_ID_STATES],
    ("new slot", "call-9", Transition.ESTABLISH, "call-9", None),
    ("no id yet (absent so far)", "call-9", Transition.ESTABLISH, "call-9", None),
    ("only empty so far", "call-9", Transition.REPLACE_EMPTY, "call-9", None),
    *[(state, None, Transition.REJECT, None, ErrorCategory.INITIAL_NULL) for state in NO_ID_STATES],
    ("established", MISSING, Transition.KEEP_OMITTED, "call-1", None),
    ("established", None, Transition.KEEP_NULL, "call-1", None),
    ("established", "call-1", Transition.KEEP_IDENTICAL, "call-1", None),
    ("established", "call-2", Transition.REJECT, "call-1", ErrorCategory.ID_CONFLICT),
    ("established", "", Transition.REJECT, "call-1", ErrorCategory.EMPTY_AFTER_ESTABLISHED),
    *[
        (
            state,
            value,
            Transition.REJECT,
            "call-1" if state == "established" else None,
            ErrorCategory.UNSUPPORTED_ID_TYPE,
        )
        for state in STATES
        for value in (7, 1.5, True, False, ["call-1"], {"id": "call-1"})
    ],
]


def _run(state: str, incoming: Any, allow: tuple[str, ...] = ()) -> tuple[Any, Any]:
    assembler = ReferenceAssembler(allow)
    for prior in STATES[state]:
        assembler.feed(chunk(prior))
    assembler.feed(chunk(fragment(0, incoming, arguments="{}")))
    assembler.feed(chunk(finish_reason="tool_calls"))
    result = assembler.finish()
    return result, result.calls[0]


@pytest.mark.parametrize(("state", "incoming", "transition", "kept_id", "category"), ROWS)
def test_row(
    state: str, incoming: Any, transition: Transition, kept_id: str | None, category: ErrorCategory | None
) -> None:
    result, call = _run(state, incoming)
    last = result.diagnostics[-1]
    assert last.transition is transition
    assert last.category is category
    assert last.prior_id_present is (state == "established")
    assert last.id_empty is (incoming == "" and isinstance(incoming, str))
    assert call.id == kept_id
    if category is None:  # no identity category; assembly ones (missing_id for an id never set) may follow
        assert not [found for found in call.categories if found.phase is Phase.IDENTITY]
    else:
        assert call.categories[0] is category
        assert not result.dispatchable


@pytest.mark.parametrize(
    ("incoming", "kind"),
    [
        (MISSING, IdKind.ABSENT),
        (None, IdKind.NULL),
        ("", IdKind.STRING),
        ("call-9", IdKind.STRING),
        (3, IdKind.NUMBER),
        (2.5, IdKind.NUMBER),
        (True, IdKind.BOOLEAN),
        ([], IdKind.ARRAY),
        ({}, IdKind.OBJECT),
    ],
)
def test_incoming_kind_is_reported(incoming: Any, kind: IdKind) -> None:
    result, _ = _run("established", incoming)
    assert result.diagnostics[-1].id_kind is kind


# a state -> the fragments that build it; an incoming class -> a value of that class
STATE_PREFIX: dict[IdState, list[dict[str, Any]]] = {
    IdState.NONE: [],
    IdState.EMPTY: [fragment(0, "", "read_page")],
    IdState.ESTABLISHED: [fragment(0, "call-1", "read_page")],
}
VALUE_OF_CLASS: dict[Incoming, Any] = {
    Incoming.ABSENT: MISSING,
    Incoming.NULL: None,
    Incoming.EMPTY: "",
    Incoming.NEW: "call-9",
    Incoming.SAME: "call-1",
    Incoming.DIFFERENT: "call-2",
    Incoming.NUMBER: 7,
    Incoming.BOOLEAN: True,
    Incoming.ARRAY: [],
    Incoming.OBJECT: {},
}


@pytest.mark.parametrize(("allow"), [(), ("empty_continuation",)])
@pytest.mark.parametrize("key", sorted(STRICT_TABLE, key=lambda key: (key[0].value, key[1].value)), ids=str)
def test_the_assembler_takes_exactly_the_table_row(key: tuple[IdState, Incoming], allow: tuple[str, ...]) -> None:
    """The production path decides by the table: the decision object it records is the row itself."""
    state, incoming = key
    assembler = ReferenceAssembler(allow)
    for prior in STATE_PREFIX[state]:
        assembler.feed(chunk(prior))
    assembler.feed(chunk(fragment(0, VALUE_OF_CLASS[incoming], arguments="{}")))
    result = assembler.finish()
    row = IdentityRules.for_rules(allow).table[key]
    assert row in dict(result.decision_counts)
    last = result.diagnostics[-1]
    assert (last.transition, last.category, last.id_kind) == (row.transition, row.category, row.id_kind)


def test_every_state_and_incoming_class_has_a_row() -> None:
    reachable = {(s, i) for s in IdState for i in Incoming}
    impossible = {(s, i) for s in (IdState.NONE, IdState.EMPTY) for i in (Incoming.SAME, Incoming.DIFFERENT)}
    impossible |= {(IdState.ESTABLISHED, Incoming.NEW)}
    assert set(STRICT_TABLE) == reachable - impossible


def test_rejection_leaves_state_and_id_unchanged() -> None:
    for decision in STRICT_TABLE.values():
        if decision.rejected:
            assert not decision.adopts_id
    for (state, _), decision in STRICT_TABLE.items():
        if decision.rejected:
            assert decision.next_state is state


def test_empty_continuation_keeps_established_id_with_its_own_transition() -> None:
    result, call = _run("established", "", allow=("empty_continuation",))
    assert result.diagnostics[-1].transition is Transition.KEEP_EMPTY
    assert result.diagnostics[-1].category is None
    assert call.id == "call-1"
    assert call.transition_count(Transition.KEEP_EMPTY) == 1
    assert result.dispatchable


def test_empty_continuation_changes_no_other_row() -> None:
    relaxed = IdentityRules([CompatibilityRule.EMPTY_CONTINUATION]).table

    def row(decision: Any) -> tuple[Any, ...]:
        return (decision.transition, decision.category, decision.next_state, decision.adopts_id, decision.id_kind)

    changed = {key for key in STRICT_TABLE if row(STRICT_TABLE[key]) != row(relaxed[key])}
    assert changed == {(IdState.ESTABLISHED, Incoming.EMPTY)}


@pytest.mark.parametrize("state", NO_ID_STATES)
def test_empty_continuation_does_not_authorize_null_without_established_id(state: str) -> None:
    result, call = _run(state, None, allow=("empty_continuation",))
    assert result.diagnostics[-1].category is ErrorCategory.INITIAL_NULL
    assert call.id is None


def test_unknown_rule_name_is_refused() -> None:
    with pytest.raises(ValueError):
        IdentityRules(["accept_everything"])


def test_rules_repr_names_enabled_rules() -> None:
    assert repr(IdentityRules(["infer_missing_index"])) == (
        "IdentityRules([absent_arguments_in_body, infer_missing_index])"
    )
    assert repr(IdentityRules(deny=["absent_arguments_in_body"])) == "IdentityRules([])"


def test_absent_arguments_in_body_is_the_one_rule_on_by_default_and_deny_wins() -> None:
    assert DEFAULT_RULES == {CompatibilityRule.ABSENT_ARGUMENTS_IN_BODY}
    assert IdentityRules().rules == DEFAULT_RULES
    assert IdentityRules(["drop_repeated_call"]).rules == DEFAULT_RULES | {CompatibilityRule.DROP_REPEATED_CALL}
    denied = ["absent_arguments_in_body"]
    assert IdentityRules(["absent_arguments_in_body"], deny=denied).rules == frozenset()
    assert IdentityRules(["infer_missing_index"], deny=["infer_missing_index"]).rules == DEFAULT_RULES
    shared = IdentityRules.for_rules(deny=denied)
    assert shared is IdentityRules.for_rules((), deny=[CompatibilityRule.ABSENT_ARGUMENTS_IN_BODY])
    assert shared.rules == frozenset() and not shared.allows(CompatibilityRule.ABSENT_ARGUMENTS_IN_BODY)
    assert IdentityRules.for_rules() is IdentityRules.for_rules(["absent_arguments_in_body"])
    with pytest.raises(ValueError):
        IdentityRules(deny=["accept_everything"])


def test_unset_ids_read_null_and_empty_as_absent_and_keep_their_kind() -> None:
    """A protocol whose null and "" ids mean "not set" (protobuf JSON) changes four rows, nothing else."""
    strict, unset = IdentityRules.for_rules(), IdentityRules.for_rules(unset_ids=True)
    assert unset is IdentityRules.for_rules(unset_ids=True) and unset.unset_ids and not strict.unset_ids
    changed = {key for key in strict.table if strict.table[key].transition is not unset.table[key].transition}
    assert changed == {  # "" before an id was already awaited; the EMPTY state is never reached
        (IdState.NONE, Incoming.NULL),
        (IdState.ESTABLISHED, Incoming.NULL),
        (IdState.ESTABLISHED, Incoming.EMPTY),
    }
    assert unset.decide(IdState.NONE, None, None).category is None
    assert unset.decide(IdState.NONE, None, "").next_state is IdState.NONE  # no placeholder state either
    decision = unset.decide(IdState.ESTABLISHED, "c1", "")
    assert (decision.transition, decision.category, decision.id_empty) == (Transition.KEEP_OMITTED, None, True)
