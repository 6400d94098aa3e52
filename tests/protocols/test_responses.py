"""The OpenAI Responses adapter, one rule of the protocol's contract per test.

Each test builds a stream from the events before the rule it checks (a call opened, streamed,
closed...), then sends the event the rule is about, and checks what the response became. The
same streams are replayed as the ``openai`` SDK's typed events and must assemble identically.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args

import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from etf_otel import AssemblyResult, ErrorCategory, IdentityRules, StreamState, Transition, Verdict
from etf_otel.core._identity import CompatibilityRule
from etf_otel.core._lifecycle import LifecycleSlots
from etf_otel.protocols import PROTOCOLS, RESPONSES, detect, get
from etf_otel.protocols._responses import ResponsesAssembler
from etf_otel.testing.responses import (
    MISSING,
    added,
    arguments_done,
    call,
    completed,
    created,
    delta,
    error,
    failed,
    function_call,
    in_progress,
    incomplete,
    item_done,
    message_item,
    numbered,
    stream,
    text_delta,
    web_search_item,
)

E = ErrorCategory
BUFFER = CompatibilityRule.BUFFER_EARLY_DELTAS
DROP = CompatibilityRule.DROP_POST_DONE_DELTA

_SDK = TypeAdapter(ResponseStreamEvent)
_SDK_CLASSES = {get_args(c.model_fields["type"].annotation)[0]: c for c in get_args(get_args(ResponseStreamEvent)[0])}


def sdk(event: Any) -> Any:
    """The SDK's typed event for ``event``, built as the ``openai`` client builds stream events.

    The client constructs them without validation (``_strict_response_validation`` is off by
    default), so odd values reach the adapter as sent; :func:`validated` is the strict way.
    """
    cls = (
        _SDK_CLASSES.get(event.get("type")) if isinstance(event, dict) and isinstance(event.get("type"), str) else None
    )
    return event if cls is None else cls.construct(**event)


def validated(event: dict[str, Any]) -> Any:
    """The SDK's typed event, validated (``model_validate`` through the event union)."""
    return _SDK.validate_python(event)


def feed(events: Iterable[Any], allow: Iterable[str] = (), **options: Any) -> ResponsesAssembler:
    assembler = ResponsesAssembler(allow, **options)
    for event in events:
        assembler.feed(event)
    return assembler


def run(events: Iterable[Any], allow: Iterable[str] = ()) -> AssemblyResult:
    """Assemble ``events`` as dicts and as SDK objects; both must give the same result."""
    events = list(events)
    result = feed(events, allow).finish()
    assert feed([sdk(event) for event in events], allow).finish() == result
    return result


def calls(result: AssemblyResult) -> list[tuple[int, str | None, str | None, str, tuple[ErrorCategory, ...]]]:
    return [(c.index, c.id, c.name, c.arguments, c.categories) for c in result.calls]


# --- valid streams ----------------------------------------------------------------------------


def test_a_call_streamed_as_the_official_api_does_is_proposed() -> None:
    result = run(stream(call(0, "call_a", "get_weather", ['{"city":', '"Paris"}'], item_id="fc_a")))
    assert result.dispatchable
    assert result.state is StreamState.COMPLETED
    assert calls(result) == [(0, "call_a", "get_weather", '{"city":"Paris"}', ())]
    assert result.calls[0].choice == 0
    assert result.finish_reasons == ()  # response.completed states no reason, and none is invented


def test_interleaved_parallel_calls_are_assembled_by_output_index() -> None:
    events = [
        added(1, call_id="call_a", name="f", id="fc_a"),
        added(2, call_id="call_b", name="g", id="fc_b"),
        delta(2, '{"b":', "fc_b"),
        delta(1, '{"a":', "fc_a"),
        delta(1, "1}", "fc_a"),
        delta(2, "2}", "fc_b"),
        arguments_done(2, '{"b":2}', "fc_b"),
        arguments_done(1, '{"a":1}', "fc_a"),
        item_done(1, call_id="call_a", name="f", arguments='{"a":1}', id="fc_a"),
        item_done(2, call_id="call_b", name="g", arguments='{"b":2}', id="fc_b"),
    ]
    result = run(stream(events))
    assert result.dispatchable
    assert calls(result) == [(1, "call_a", "f", '{"a":1}', ()), (2, "call_b", "g", '{"b":2}', ())]


def test_a_done_only_stream_is_valid() -> None:
    """No delta at all: the first claim (``arguments.done``) is the arguments."""
    events = [
        added(0, call_id="call_a"),
        arguments_done(0, '{"a": 1}'),
        item_done(0, call_id="call_a", arguments='{"a":1}'),
    ]
    result = run(stream(events))
    assert result.dispatchable
    assert result.calls[0].arguments == '{"a": 1}'


def test_complete_arguments_on_the_added_item_are_a_claim() -> None:
    result = run(stream(added(0, call_id="call_a", arguments='{"a":1}')))
    assert result.dispatchable
    assert result.calls[0].arguments == '{"a":1}'


def test_placeholder_arguments_alone_are_not_arguments() -> None:
    """``""`` is a placeholder on every snapshot: a call that only ever said ``""`` has no arguments."""
    events = [
        added(0, call_id="call_a", arguments=""),
        arguments_done(0, ""),
        item_done(0, call_id="call_a", arguments=""),
    ]
    result = run(stream(events))
    assert calls(result) == [(0, "call_a", "f", "", (E.INVALID_ARGUMENTS,))]
    assert not result.dispatchable


def test_deltas_never_join_the_placeholder_and_null_deltas_add_nothing() -> None:
    result = run(stream(added(0, call_id="call_a", arguments=""), delta(0, None), delta(0, MISSING), delta(0, "{}")))
    assert result.dispatchable
    assert result.calls[0].arguments == "{}"


def test_a_delta_that_is_not_a_string_makes_the_arguments_invalid() -> None:
    result = run(stream(added(0, call_id="call_a"), delta(0, '{"a":1}'), delta(0, 7)))
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


def test_a_snapshot_that_is_not_a_string_makes_the_arguments_invalid() -> None:
    result = run(stream(added(0, call_id="call_a"), arguments_done(0, {"a": 1})))
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


def test_null_snapshots_state_nothing() -> None:
    events = [added(0, call_id="call_a", arguments=None), delta(0, "{}"), arguments_done(0, None)]
    result = run(stream(*events, item_done(0, call_id="call_a", arguments=MISSING)))
    assert result.dispatchable


def test_unclosed_slots_are_finalized_when_the_response_completes() -> None:
    result = run(stream(added(0, call_id="call_a"), delta(0, "{}")))
    assert result.dispatchable


# --- identity: call_id, never the item id ------------------------------------------------------


@pytest.mark.parametrize(
    ("added_id", "done_id", "final_id", "categories", "transition"),
    [
        ("", "call_real", "call_real", (), Transition.REPLACE_EMPTY),  # "" is a placeholder
        (None, "call_real", "call_real", (E.INITIAL_NULL,), Transition.ESTABLISH),  # the rejection stands
        (42, "call_real", "call_real", (E.UNSUPPORTED_ID_TYPE,), Transition.ESTABLISH),
        ("call_a", "call_b", "call_a", (E.ID_CONFLICT,), Transition.REJECT),
        ("call_a", None, "call_a", (), Transition.KEEP_NULL),
        ("call_a", MISSING, "call_a", (), Transition.KEEP_OMITTED),
        ("call_a", "", "call_a", (E.EMPTY_AFTER_ESTABLISHED,), Transition.REJECT),
        (MISSING, MISSING, None, (E.MISSING_ID,), Transition.AWAIT),
    ],
)
def test_the_identity_table_applies_to_added_and_done(
    added_id: Any, done_id: Any, final_id: str | None, categories: tuple[ErrorCategory, ...], transition: Transition
) -> None:
    events = [added(0, call_id=added_id, id="fc_1"), delta(0, "{}", "fc_1")]
    result = run(stream(events, item_done(0, call_id=done_id, id="fc_1", arguments="{}")))
    (only,) = result.calls
    assert (only.id, only.categories) == (final_id, categories)
    assert result.diagnostics[-1].transition is transition
    assert result.dispatchable is (not categories)


def test_the_item_id_never_stands_in_for_a_missing_call_id() -> None:
    result = run(stream(added(0, call_id=MISSING, id="fc_1"), delta(0, "{}", "fc_1"), item_done(0, call_id=MISSING)))
    assert calls(result) == [(0, None, "f", "{}", (E.MISSING_ID,))]


def test_a_name_on_added_and_a_different_one_on_done_is_a_name_conflict() -> None:
    result = run(stream(added(0, call_id="call_a", name="f"), delta(0, "{}"), item_done(0, call_id="call_a", name="g")))
    assert calls(result) == [(0, "call_a", "f", "{}", (E.NAME_CONFLICT,))]


@pytest.mark.parametrize(("done_name", "name", "categories"), [("f", "f", ()), ("g", "f", (E.NAME_CONFLICT,))])
def test_the_name_on_arguments_done_is_an_identity_update(
    done_name: str, name: str, categories: tuple[ErrorCategory, ...]
) -> None:
    result = run(stream(added(0, call_id="call_a", name="f"), arguments_done(0, "{}", name=done_name)))
    assert calls(result) == [(0, "call_a", name, "{}", categories)]


def test_arguments_done_names_a_call_the_added_event_left_unnamed() -> None:
    result = run(stream(added(0, call_id="call_a", name=""), arguments_done(0, "{}", name="f")))
    assert result.dispatchable
    assert result.calls[0].name == "f"


def test_a_repeated_added_at_the_same_index_is_an_identity_event_that_reopens_the_slot() -> None:
    events = [*call(0, "call_a"), added(0, call_id="call_b"), delta(0, "")]
    result = run(stream(events))
    assert calls(result)[0][4] == (E.ID_CONFLICT,)
    assert E.UNKNOWN_SLOT not in result.categories  # the delta joined the re-opened slot


def test_two_calls_with_one_call_id_are_duplicates() -> None:
    result = run(stream(call(0, "call_a"), call(1, "call_a")))
    assert [c.categories for c in result.calls] == [(E.DUPLICATE_CALL_ID,)] * 2


# --- snapshots and the terminal output ---------------------------------------------------------


def test_contradictory_done_events_are_a_snapshot_mismatch() -> None:
    """LM Studio: no deltas, then ``arguments.done`` and ``output_item.done`` disagree."""
    events = [
        added(0, call_id="call_a"),
        arguments_done(0, '{"a":1}'),
        item_done(0, call_id="call_a", arguments='{"a":2}'),
    ]
    result = run(stream(events))
    assert calls(result) == [(0, "call_a", "f", '{"a":1}', (E.SNAPSHOT_MISMATCH,))]


def test_deltas_that_disagree_with_arguments_done_are_a_snapshot_mismatch() -> None:
    result = run(stream(added(0, call_id="call_a"), delta(0, '{"a":1}'), arguments_done(0, '{"a":2}')))
    assert result.calls[0].categories == (E.SNAPSHOT_MISMATCH,)


def test_a_terminal_output_that_agrees_as_json_is_no_problem() -> None:
    output = [message_item(), function_call("call_a", "f", '{ "a" : 1 }', id="fc_a", status="completed")]
    result = run(stream(call(0, "call_a", item_id="fc_a"), end=completed(output)))
    assert result.dispatchable


def test_a_call_id_changed_in_the_terminal_output_is_a_snapshot_mismatch() -> None:
    """vLLM: the streamed call and the terminal output name different call ids."""
    output = [function_call("call_other", "f", '{"a":1}', id="fc_a", status="completed")]
    result = run(stream(call(0, "call_a", item_id="fc_a"), end=completed(output)))
    assert calls(result) == [(0, "call_a", "f", '{"a":1}', (E.SNAPSHOT_MISMATCH,))]
    assert any(r.index is None and r.category is E.SNAPSHOT_MISMATCH for r in result.rejections)
    assert not result.dispatchable


def test_a_terminal_output_listing_a_call_never_streamed_is_a_snapshot_mismatch() -> None:
    output = [function_call("call_a", "f", '{"a":1}'), function_call("call_ghost", "g", "{}")]
    result = run(stream(call(0, "call_a"), end=completed(output)))
    assert [(r.index, r.category) for r in result.rejections] == [(None, E.SNAPSHOT_MISMATCH)]
    # call_a agrees with the list, but the response is blocked: rejected with the blocking category.
    assert result.calls[0].verdict is Verdict.REJECTED
    assert result.calls[0].categories == (E.SNAPSHOT_MISMATCH,)


@pytest.mark.parametrize("output", [[], None, "junk"], ids=["empty", "null", "string"])
def test_an_empty_terminal_output_is_no_claim(output: Any) -> None:
    """``[]`` after streaming the call (Codex backend, CLIProxyAPI) carries no claim."""
    result = run(stream(call(0, "call_a"), end=completed(output)))
    assert result.dispatchable


def test_a_terminal_output_that_omits_a_streamed_call_is_a_snapshot_mismatch() -> None:
    """A non-empty output is a claim: one holding only a message says the streamed call was not made."""
    result = run(stream(call(0, "call_a"), end=completed([message_item()])))
    assert result.calls[0].categories == (E.SNAPSHOT_MISMATCH,)
    assert not result.dispatchable


def test_the_terminal_output_is_a_cross_check_never_a_source() -> None:
    """A call only the terminal output lists is not proposed: no slot, no proposal."""
    result = run(stream(end=completed([function_call("call_a", "f", "{}")])))
    assert result.calls == ()
    assert not result.dispatchable


# --- routing: output_index, item_id aliases, unknown_slot --------------------------------------


def test_a_delta_before_output_item_added_is_unknown_slot() -> None:
    result = run(stream(delta(0, '{"a":', "fc_a"), call(0, "call_a", pieces=["1}"], item_id="fc_a")))
    assert E.UNKNOWN_SLOT in result.categories
    assert not result.dispatchable


def test_a_stray_delta_after_arguments_done_is_unknown_slot() -> None:
    events = [added(0, call_id="call_a"), delta(0, '{"a":1}'), arguments_done(0, '{"a":1}'), delta(0, "}")]
    result = run(stream(events))
    assert result.calls[0].arguments == '{"a":1}'  # merged nowhere
    assert [(r.index, r.category) for r in result.rejections] == [(None, E.UNKNOWN_SLOT)]


@pytest.mark.parametrize(
    "late",
    [
        [item_done(0, call_id="call_a")],  # the slot is closed
        [arguments_done(0, '{"a":1}')],  # an argument statement for a closed slot
        [delta(0, "")],
    ],
    ids=["item-done-twice", "arguments-done-after-close", "delta-after-close"],
)
def test_events_for_a_closed_slot_are_unknown_slot(late: list[Any]) -> None:
    result = run(stream(call(0, "call_a"), *late))
    assert [(r.index, r.category) for r in result.rejections] == [(None, E.UNKNOWN_SLOT)]
    assert not result.dispatchable
    assert result.calls[0].verdict is Verdict.REJECTED and result.calls[0].categories == (E.UNKNOWN_SLOT,)


@pytest.mark.parametrize(
    "event",
    [
        added(-1, call_id="call_a"),
        added(MISSING, call_id="call_a"),
        added("0", call_id="call_a"),
        added(True, call_id="call_a"),
        item_done(5, call_id="call_x"),
        arguments_done(5, "{}"),
    ],
    ids=["negative", "missing", "string", "boolean", "item-done-no-slot", "arguments-done-no-slot"],
)
def test_function_call_events_that_name_no_slot_are_unknown_slot(event: Any) -> None:
    result = run(stream(call(0, "call_a"), event))
    assert [(r.index, r.category) for r in result.rejections] == [(None, E.UNKNOWN_SLOT)]
    # call_a's own checks passed, but the response is blocked: rejected with the blocking category.
    assert result.calls[0].verdict is Verdict.REJECTED and result.calls[0].categories == (E.UNKNOWN_SLOT,)


def test_an_item_id_that_is_the_alias_of_another_slot_makes_the_event_unattributable() -> None:
    events = [added(0, call_id="call_a", id="fc_a"), added(1, call_id="call_b", id="fc_b"), delta(0, "{}", "fc_b")]
    result = run(stream(events, delta(1, "{}", "fc_b")))
    assert calls(result)[0][3] == ""  # the contradicting delta was merged nowhere
    assert E.UNKNOWN_SLOT in result.categories


@pytest.mark.parametrize(
    "item_id",
    ["fc_rotated", None, MISSING, "__fake_id__", 5],
    ids=["rotated", "null", "absent", "shared", "not-a-string"],
)
def test_an_item_id_that_names_no_single_other_slot_is_tolerated(item_id: Any) -> None:
    """GitHub Copilot rotates item ids; the Agents SDK shares ``__fake_id__``; vLLM sends null."""
    events = [added(0, call_id="call_a", id="__fake_id__"), added(1, call_id="call_b", id="__fake_id__")]
    events += [delta(0, '{"a":', item_id), delta(1, "{}", item_id), delta(0, "1}", item_id)]
    events += [arguments_done(0, '{"a":1}', item_id), item_done(0, call_id="call_a", arguments='{"a":1}', id=item_id)]
    result = run(stream(events))
    assert result.dispatchable
    assert [c.arguments for c in result.calls] == ['{"a":1}', "{}"]


@pytest.mark.parametrize(
    "index", [MISSING, None, -1, "1", 1.0, True], ids=["absent", "null", "neg", "str", "flt", "bool"]
)
def test_without_a_valid_output_index_an_event_goes_to_the_slot_its_item_id_names(index: Any) -> None:
    events = [added(0, call_id="call_a", id="fc_a"), added(1, call_id="call_b", id="fc_b")]
    events += [delta(index, '{"b":2}', "fc_b"), arguments_done(index, '{"b":2}', "fc_b")]
    events += [item_done(index, call_id="call_b", arguments='{"b":2}', id="fc_b"), delta(0, "{}", "fc_a")]
    result = run(stream(events))
    assert result.dispatchable
    assert calls(result) == [(0, "call_a", "f", "{}", ()), (1, "call_b", "f", '{"b":2}', ())]


@pytest.mark.parametrize("item_id", ["fc_unknown", "__fake_id__", None, MISSING])
def test_without_an_output_index_an_item_id_that_is_no_unique_alias_routes_nowhere(item_id: Any) -> None:
    events = [added(0, call_id="call_a", id="__fake_id__"), added(1, call_id="call_b", id="__fake_id__")]
    result = run(stream(events, delta(0, "{}"), delta(1, "{}"), delta(MISSING, "{}", item_id)))
    assert [(r.index, r.category) for r in result.rejections] == [(None, E.UNKNOWN_SLOT)]


# --- items that are not slots ------------------------------------------------------------------


def test_message_text_and_built_in_tool_items_are_not_slots() -> None:
    events = [
        added(0, item=message_item("msg_1")),
        text_delta(0, "Let me look.", "msg_1"),
        item_done(0, item=message_item("msg_1", "Let me look.")),
        added(1, item=web_search_item("ws_1")),
        item_done(1, item=web_search_item("ws_1")),
        call(2, "call_a", item_id="fc_a"),
    ]
    output = [message_item("msg_1", "Let me look."), web_search_item("ws_1"), function_call("call_a", "f", '{"a":1}')]
    result = run(stream(*events, end=completed(output)))
    assert result.dispatchable
    assert [c.index for c in result.calls] == [2]


def test_function_call_events_addressed_to_another_item_are_ignored() -> None:
    events = [added(0, item=message_item("msg_1")), delta(0, "x", "msg_1"), arguments_done(0, "x", "msg_1")]
    events += [delta(MISSING, "x", "msg_1"), added(MISSING, item=message_item("msg_2")), call(1, "call_a")]
    result = run(stream(events))
    assert result.dispatchable


def test_a_function_call_at_the_index_of_another_item_opens_a_slot_there() -> None:
    """A bridge (kitty-bridge KBR-240) gives a text item and a call one ``output_index``."""
    events = [added(0, item=message_item("msg_1")), call(0, "call_a", item_id="fc_a"), added(0, item=message_item())]
    result = run(stream(events))
    assert result.dispatchable
    assert calls(result) == [(0, "call_a", "f", '{"a":1}', ())]


def test_an_item_done_that_is_a_function_call_at_another_items_index_is_unknown_slot() -> None:
    result = run(stream(added(0, item=message_item("msg_1")), item_done(0, call_id="call_a"), call(1, "call_b")))
    assert E.UNKNOWN_SLOT in result.categories


def test_an_alias_of_another_item_that_is_no_slot_does_not_contradict_the_index() -> None:
    result = run(stream(added(0, item=message_item("msg_1")), call(1, "call_a", item_id="msg_1")))
    assert result.dispatchable


# --- ends --------------------------------------------------------------------------------------


def test_an_incomplete_response_is_not_dispatchable_and_keeps_its_reason() -> None:
    output = [function_call("call_a", "f", '{"a":1}')]
    result = run(stream(call(0, "call_a"), end=incomplete("max_output_tokens", output)))
    assert result.state is StreamState.COMPLETED
    assert result.calls[0].categories == (E.INCOMPLETE_RESPONSE,)
    assert result.finish_reasons == ("max_output_tokens",)
    assert not result.dispatchable


def test_an_incomplete_response_still_runs_the_assembly_checks() -> None:
    result = run(stream(added(0, call_id="call_a"), delta(0, '{"a":'), end=incomplete(MISSING, [])))
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS, E.INCOMPLETE_RESPONSE)
    assert result.finish_reasons == ()


def test_an_incomplete_response_without_calls_says_so() -> None:
    result = run(stream(end=incomplete("content_filter")))
    assert result.categories == (E.INCOMPLETE_RESPONSE,)


def test_an_item_with_status_incomplete_blocks_the_response() -> None:
    events = [call(0, "call_a"), added(1, call_id="call_b"), delta(1, '{"b":1}')]
    events += [item_done(1, call_id="call_b", arguments='{"b":1}', status="incomplete")]
    result = run(stream(*events))
    assert [c.categories for c in result.calls] == [(E.INCOMPLETE_RESPONSE,), (E.INCOMPLETE_RESPONSE,)]
    assert [(r.index, r.category) for r in result.rejections] == [(1, E.INCOMPLETE_RESPONSE)]  # the cause
    assert not result.dispatchable


@pytest.mark.parametrize("end", [failed(), error()], ids=["response.failed", "error"])
def test_a_failed_response_skips_the_assembly_checks(end: Any) -> None:
    result = run(stream(added(0, call_id=MISSING), delta(0, '{"a":'), end=end))
    assert result.state is StreamState.FAILED
    assert result.calls[0].categories == (E.TRUNCATED_STREAM,)


def test_an_error_after_completed_fails_the_response() -> None:
    result = run(stream(call(0, "call_a"), completed(), end=error()))
    assert result.state is StreamState.FAILED


def test_a_stream_that_ends_without_a_terminal_event_is_truncated() -> None:
    events = stream(call(0, "call_a"))[:-1]
    result = run(events)
    assert result.state is StreamState.TRUNCATED
    assert result.calls[0].categories == (E.TRUNCATED_STREAM,)


def test_done_is_no_end_in_responses() -> None:
    assembler = feed(stream(call(0, "call_a"))[:-1])
    assembler.feed_done()
    assembler.feed("[DONE]")
    assert assembler.finish().state is StreamState.TRUNCATED


# --- response scope ----------------------------------------------------------------------------


def test_a_second_response_created_with_another_id_splices_the_stream() -> None:
    assembler = feed([created("resp_1"), *call(0, "call_a"), created("resp_2"), *call(1, "call_b"), completed()])
    result = assembler.finish()
    assert result.state is StreamState.TRUNCATED
    assert not result.dispatchable
    assert [c.id for c in result.calls] == ["call_a"]  # the second response is none of this one's
    assert assembler.ignored_events == 6  # call_b's five events and completed
    assert run(numbered([created(), created("resp_2"), *call(0), completed()])).state is StreamState.TRUNCATED


@pytest.mark.parametrize(("first", "second"), [(MISSING, MISSING), (None, None), ("", "")])
def test_two_starts_whose_ids_cannot_be_compared_are_a_splice(first: Any, second: Any) -> None:
    result = run([created(first), *call(0, "call_a"), created(second), completed()])
    assert result.state is StreamState.TRUNCATED


def test_the_same_response_created_again_and_in_progress_are_ignored() -> None:
    events = [created("resp_1"), in_progress("resp_other"), *call(0, "call_a"), created("resp_1"), completed()]
    assembler = feed(events)
    assert assembler.finish().dispatchable
    assert assembler.ignored_events == 2  # in_progress, and the repeated start


def test_a_stream_without_response_created_still_assembles() -> None:
    result = run([*call(0, "call_a"), completed()])
    assert result.dispatchable


# --- events that are not Responses events ------------------------------------------------------


def test_unknown_and_non_object_events_are_ignored_and_counted() -> None:
    odd: list[Any] = [{"type": "response.future_event"}, {"type": 7}, {"type": ["x"]}, {}, {"choices": []}]
    odd += ["[DONE]", b"{}", 3, 2.5, True, None, [], ["response.created"], (), text_delta()]
    odd += [type("Sdk", (), {"type": "response.mystery"})(), object()]
    assembler = feed([created(), *call(0, "call_a"), *odd, completed()])
    assert assembler.ignored_events == len(odd)
    assert assembler.finish().dispatchable


def test_huge_and_hostile_values_are_judged_not_raised() -> None:
    deep = "[" * 200_000  # deeper than any JSON parser recurses
    events = [added(0, call_id="call_\ud800\x00", name="\x00"), delta(0, deep), arguments_done(0, deep), delta(0, "]")]
    events += [added(1, call_id="call_b"), delta(1, "x" * 50_000), delta(1, "y")]
    assembler = feed(stream(events, end=completed([function_call("call_\ud800\x00", "\x00", deep + " ")])), [DROP])
    assembler.feed({"type": "response.function_call_arguments.delta", "output_index": 2**80, "delta": "{}"})
    result = assembler.finish()
    assert [c.categories[0] for c in result.calls] == [E.INVALID_ARGUMENTS, E.INVALID_ARGUMENTS]
    assert result.calls[0].transition_count(Transition.DROP_LATE) == 1  # identical texts, though neither parses
    assert E.UNKNOWN_SLOT in result.categories  # the index no slot has
    assert assembler.ignored_events == 0
    capped = feed(stream(added(0, call_id="call_a"), delta(0, "x" * 100)), max_argument_chars=64).finish()
    assert capped.calls[0].categories == (E.INVALID_ARGUMENTS,)


def test_events_after_finish_change_nothing() -> None:
    assembler = feed(stream(call(0, "call_a")))
    result = assembler.finish()
    assembler.feed(delta(0, "}"))
    assembler.feed(added(3, call_id="call_z"))
    assert assembler.finish() is result
    assert assembler.finished
    assert assembler.ignored_events == 2


# --- compatibility rules -----------------------------------------------------------------------


def test_buffer_early_deltas_admits_deltas_sent_before_added() -> None:
    """GitHub Copilot: deltas (and ``arguments.done``) arrive before ``output_item.added``."""
    early = [delta(0, '{"a":', "fc_x"), delta(0, "1}", MISSING), arguments_done(0, '{"a":1}', "fc_x", name="f")]
    events = [*early, added(0, call_id="call_a", id="fc_a"), item_done(0, call_id="call_a", arguments='{"a":1}')]
    result = run(stream(events), allow=[BUFFER])
    assert result.dispatchable
    (only,) = result.calls
    assert (only.id, only.arguments, only.transition_count(Transition.BUFFER_EARLY)) == ("call_a", '{"a":1}', 3)
    assert not run(stream(events)).dispatchable  # off by default: unknown_slot


def test_buffered_events_keep_their_order_against_the_argument_stream() -> None:
    """A delta buffered after a buffered ``arguments.done`` is late when it is applied."""
    events = [arguments_done(0, "{}"), delta(0, "}"), added(0, call_id="call_a")]
    result = run(stream(events), allow=[BUFFER])
    assert result.calls[0].arguments == "{}"
    assert [(r.index, r.category) for r in result.rejections] == [(None, E.UNKNOWN_SLOT)]


def test_buffered_events_whose_item_id_names_another_slot_stay_unknown_slot() -> None:
    events = [added(1, call_id="call_b", id="fc_b"), delta(0, "{}", "fc_b"), delta(0, "{}", "fc_a")]
    events += [added(0, call_id="call_a", id="fc_a"), delta(1, "{}")]
    result = run(stream(events), allow=[BUFFER])
    assert [c.arguments for c in result.calls] == ["{}", "{}"]
    assert [(r.index, r.category) for r in result.rejections] == [(None, E.UNKNOWN_SLOT)]


def test_buffered_events_contradicted_by_an_alias_registered_later_stay_unknown_slot() -> None:
    events = [delta(0, "{}", "fc_b"), added(1, call_id="call_b", id="fc_b"), added(0, call_id="call_a", id="fc_a")]
    result = run(stream(events, delta(1, "{}"), delta(0, "{}")), allow=[BUFFER])
    assert [(r.index, r.category) for r in result.rejections] == [(None, E.UNKNOWN_SLOT)]
    assert result.calls[0].transition_count(Transition.BUFFER_EARLY) == 0


@pytest.mark.parametrize(
    "then",
    [[], [added(0, item=message_item())], [added(1, call_id="call_b"), delta(1, "{}")]],
    ids=["nothing", "a-message-item", "another-index"],
)
def test_buffered_events_no_slot_ever_opened_are_unknown_slot_at_finish(then: list[Any]) -> None:
    result = run(stream(call(2, "call_c"), delta(0, "{}"), arguments_done(0, "{}"), *then), allow=[BUFFER])
    assert [(r.index, r.category) for r in result.rejections] == [(None, E.UNKNOWN_SLOT)]
    assert [d.category for d in result.diagnostics[-2:]] == [E.UNKNOWN_SLOT] * 2  # one per buffered event
    assert not result.dispatchable


def test_buffering_is_bounded_like_the_arguments() -> None:
    assembler = feed(
        stream(delta(0, "x" * 10), delta(0, "y" * 10), added(0, call_id="call_a")), [BUFFER], max_argument_chars=15
    )
    result = assembler.finish()
    assert result.calls[0].arguments == "x" * 10
    assert [(r.index, r.category) for r in result.rejections][0] == (None, E.UNKNOWN_SLOT)


def test_buffering_needs_an_output_index() -> None:
    result = run(stream(delta(MISSING, "{}", "fc_a"), added(0, call_id="call_a", id="fc_a")), allow=[BUFFER])
    assert E.UNKNOWN_SLOT in result.categories


def test_drop_post_done_delta_drops_a_stray_delta_after_equal_done_arguments() -> None:
    """pydantic-ai #5757: a gateway repeats a delta after ``arguments.done``."""
    events = [
        added(0, call_id="call_a"),
        delta(0, '{"a":'),
        delta(0, "1}"),
        arguments_done(0, '{"a": 1}'),
        delta(0, "1}"),
    ]
    events += [item_done(0, call_id="call_a", arguments='{"a":1}'), delta(0, "1}")]
    result = run(stream(events), allow=[DROP])
    assert result.dispatchable
    (only,) = result.calls
    assert (only.arguments, only.transition_count(Transition.DROP_LATE)) == ('{"a":1}', 2)
    assert not run(stream(events)).dispatchable  # off by default: unknown_slot


def test_drop_post_done_delta_applies_to_a_done_only_call() -> None:
    events = [added(0, call_id="call_a"), arguments_done(0, '{"a":1}'), delta(0, '{"a":1}')]
    assert run(stream(events), allow=[DROP]).dispatchable


@pytest.mark.parametrize(
    "events",
    [
        [added(0, call_id="call_a"), delta(0, '{"a":1}'), arguments_done(0, '{"a":2}'), delta(0, "}")],  # not equal
        [added(0, call_id="call_a"), delta(0, "{}"), arguments_done(0, "{}"), delta(0, "")],  # changes nothing
        [added(0, call_id="call_a"), delta(0, "{}"), arguments_done(0, "{}"), delta(0, 5)],  # not text
        [
            added(0, call_id="call_a"),
            delta(0, "{}"),
            item_done(0, call_id="call_a"),
            delta(0, "}"),
        ],  # no arguments.done
        [added(0, call_id="call_a"), delta(0, "{}"), arguments_done(0, None), delta(0, "}")],  # done stated nothing
        [
            added(0, call_id="call_a"),
            delta(0, "{}"),
            arguments_done(0, "{}"),
            added(0, call_id="call_a"),  # re-opened: its earlier arguments.done no longer counts
            item_done(0, call_id="call_a"),
            delta(0, "}"),
        ],
    ],
    ids=["unequal", "empty", "not-text", "no-arguments-done", "null-done", "reopened"],
)
def test_any_other_late_delta_stays_unknown_slot_with_drop_post_done_delta(events: list[Any]) -> None:
    result = run(stream(events), allow=[DROP])
    assert E.UNKNOWN_SLOT in result.categories
    assert result.calls[0].transition_count(Transition.DROP_LATE) == 0


def test_the_rules_are_read_from_the_identity_rules_given_to_the_factory() -> None:
    rules = IdentityRules.for_rules([BUFFER, DROP])
    ticks = iter(range(100, 200))
    assembler = RESPONSES.assembler(rules=rules, clock=lambda: next(ticks), max_argument_chars=1000)
    for event in stream(delta(0, "{}"), added(0, call_id="call_a"), arguments_done(0, "{}"), delta(0, "x")):
        assembler.feed(event)
    assert isinstance(assembler.slots, LifecycleSlots)
    assert not assembler.finished
    result = assembler.finish()
    assert result.dispatchable
    assert result.calls[0].opened_ns is not None


# --- the SDK's typed events --------------------------------------------------------------------


SCENARIOS = {
    "valid": stream(call(0, "call_a", item_id="fc_a"), call(1, "call_b", pieces=["{}"])),
    "absent-ids": stream(added(0, call_id=MISSING, id=MISSING), delta(0, "{}"), item_done(0, call_id=MISSING)),
    "null-ids": stream(added(0, call_id=None, id=None), delta(0, "{}", None), item_done(0, call_id=None, id=None)),
    "null-on-done": stream(call(0, "call_a"), item_done(0, call_id=None)),
    "name-on-done": stream(added(0, call_id="call_a", name=""), arguments_done(0, "{}", name="g")),
    "incomplete": stream(call(0, "call_a"), end=incomplete("max_output_tokens", [function_call("call_a")])),
    "mismatch": stream(call(0, "call_a"), end=completed([function_call("call_x", "f", '{"a":1}')])),
    "failed": stream(call(0, "call_a"), end=failed()),
    "error": stream(call(0, "call_a"), end=error()),
    "routing": stream(added(0, call_id="call_a", id="fc_a"), delta(MISSING, "{}", "fc_a"), delta(0, "}", "fc_z")),
    "other-items": stream(added(0, item=message_item()), text_delta(0), added(1, item=web_search_item()), call(2)),
    "bad-types": stream(added(0, call_id=3, name=4, arguments=5, id=6), delta(0, 7, 8), item_done(0, item="junk")),
}


@pytest.mark.parametrize("events", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_sdk_events_assemble_exactly_like_their_dicts(events: list[Any]) -> None:
    typed = [sdk(event) for event in events]
    assert all(not isinstance(event, dict) for event in typed)
    assert feed(typed).finish() == feed(events).finish()


VALID = {  # every event complete enough for the SDK's validation (item_id is required there)
    "valid": stream(call(0, "call_a", item_id="fc_a"), call(1, "call_b", pieces=["{}"], item_id="fc_b")),
    "name-on-done": stream(added(0, call_id="call_a", name="", id="fc_a"), arguments_done(0, "{}", "fc_a", name="g")),
    "incomplete": stream(call(0, "call_a", item_id="fc_a"), end=incomplete("max_output_tokens", [function_call()])),
    "mismatch": stream(call(0, "call_a", item_id="fc_a"), end=completed([function_call("call_x", "f", "{}")])),
    "failed": stream(call(0, "call_a", item_id="fc_a"), end=failed()),
    "error": stream(call(0, "call_a", item_id="fc_a"), end=error()),
    "other-items": stream(
        added(0, item=message_item()), text_delta(0), added(1, item=web_search_item()), call(2, item_id="fc")
    ),
}


@pytest.mark.parametrize("events", VALID.values(), ids=VALID.keys())
def test_validated_sdk_events_assemble_exactly_like_their_dicts(events: list[Any]) -> None:
    typed = [validated(event) for event in events]
    assert feed(typed).finish() == feed(events).finish()


def test_sdk_events_tell_an_absent_call_id_from_null() -> None:
    absent = feed([sdk(e) for e in SCENARIOS["absent-ids"]]).finish()
    null = feed([sdk(e) for e in SCENARIOS["null-ids"]]).finish()
    assert absent.calls[0].categories == (E.MISSING_ID,)
    assert null.calls[0].categories == (E.INITIAL_NULL, E.MISSING_ID)


# --- the protocol description ------------------------------------------------------------------


def test_responses_is_registered_by_name() -> None:
    assert get("responses") is RESPONSES
    assert PROTOCOLS["responses"] is RESPONSES


@pytest.mark.parametrize(
    ("event", "recognized"),
    [
        (created(), True),
        (delta(), True),
        ({"type": "response.future_event"}, True),
        (sdk(created()), True),
        (error(), False),  # Anthropic sends an error event too
        ({"type": "message_start"}, False),
        ({"type": 3}, False),
        ({"object": "chat.completion.chunk", "choices": []}, False),
        ("[DONE]", False),
        (None, False),
        ([created()], False),
    ],
)
def test_recognizes_response_events(event: Any, recognized: bool) -> None:
    assert RESPONSES.recognizes(event) is recognized
    if recognized:
        assert detect(event) is RESPONSES


def _output(call_id: Any = MISSING) -> dict[str, Any]:
    out = {"type": "function_call_output", "output": "ok"}
    return out if call_id is MISSING else {**out, "call_id": call_id}


@pytest.mark.parametrize(
    ("followup", "ids"),
    [
        ([_output("call_a"), {"role": "user", "content": "next"}, _output("call_b")], ["call_a", "call_b"]),
        ({"model": "m", "input": [_output("call_a"), _output("call_a")]}, ["call_a", "call_a"]),
        ({"input": [function_call("call_a", id="fc_a"), _output("fc_a")]}, ["fc_a"]),  # the item id by mistake
        ([_output(), _output(None), _output(5)], [None, None, 5]),
        ([sdk(completed([function_call("call_a")])).response.output[0], _output("call_a")], ["call_a"]),
        ([None, "text", 3, [], {"type": "message"}], []),
        ({"input": "hello"}, []),  # a text input answers no call
        ("hello", []),
        ({"messages": []}, None),
        ({"input": {"type": "function_call_output"}}, None),
        (None, None),
        (3, None),
    ],
)
def test_result_ids_are_the_call_ids_of_function_call_outputs(followup: Any, ids: list[Any] | None) -> None:
    assert RESPONSES.result_ids(followup) == ids


@pytest.mark.parametrize(
    ("first", "state"), [(error(), StreamState.FAILED), (failed(), StreamState.FAILED), (incomplete(), None)]
)
def test_a_completed_after_a_worse_end_does_not_make_the_response_dispatchable(first: Any, state: Any) -> None:
    """Of several terminal events the most severe decides: a later ``response.completed`` is not believed."""
    result = run(stream(call(0, "call_a"), first, end=completed()))
    assert not result.dispatchable
    assert result.state is (state or StreamState.COMPLETED)


def test_an_sdk_delta_event_missing_a_field_or_not_pydantic_takes_the_generic_path() -> None:
    """The inlined SDK path reads only events with all its fields set; the others give the dict path's result."""
    added = {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": ""},
    }
    delta = {"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc_1", "delta": "{}"}
    no_delta = {key: value for key, value in delta.items() if key != "delta"}  # construct leaves the attribute None
    unset = sdk(delta)
    object.__setattr__(unset, "__pydantic_fields_set__", None)  # not a set: the generic path reads attributes
    for odd, as_dict in ((sdk(no_delta), no_delta), (unset, delta)):
        expected = feed([added, as_dict]).finish()
        assert feed([sdk(added), odd]).finish() == expected
