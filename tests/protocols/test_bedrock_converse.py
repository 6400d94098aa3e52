"""The Amazon Bedrock Converse adapter, rule by rule (BEDROCK.md, SPEC section 13).

Every stream that can be framed is also encoded as ``application/vnd.amazon.eventstream`` bytes,
decoded again by :mod:`etf_otel.protocols._bedrock_frames` and assembled: the raw bytes and the dict
form botocore yields must give the very same result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from etf_otel import ErrorCategory, IdentityRules, StreamState
from etf_otel.core._results import AssemblyResult
from etf_otel.protocols import BEDROCK_CONVERSE, StreamAssembler, detect
from etf_otel.protocols._bedrock_converse import BedrockConverseAssembler, assemble
from etf_otel.protocols._bedrock_frames import decode
from etf_otel.protocols._bodies import judge_body
from etf_otel.testing.bedrock import (
    MISSING,
    block_start,
    block_stop,
    body,
    exception,
    frames,
    input_delta,
    message_start,
    message_stop,
    metadata,
    stream,
    text_delta,
    tool_call,
    tool_start,
    tool_use,
)

E = ErrorCategory
WEATHER = ("", '{"city":', ' "Paris"}')


def framable(event: object) -> bool:
    return (
        isinstance(event, dict)
        and len(event) == 1
        and isinstance(next(iter(event)), str)
        and isinstance(next(iter(event.values())), Mapping)
    )


def run(events: list[Any], **kwargs: Any) -> AssemblyResult:
    """Assemble ``events``; when all can be framed, their event-stream bytes must assemble the same."""
    result = _assemble(events, **kwargs)
    if all(framable(event) for event in events):
        decoded = decode(frames(events))
        assert [{k: {m: v for m, v in p.items() if m != "p"}} for e in decoded for k, p in e.items()] == events
        assert _assemble(list(decoded), **kwargs) == result
    return result


def _assemble(events: list[Any], **kwargs: Any) -> AssemblyResult:
    assembler = BedrockConverseAssembler(**kwargs)
    for event in events:
        assembler.feed(event)
    return assembler.finish()


def summary(result: AssemblyResult) -> list[tuple[object, ...]]:
    return [(call.index, call.id, call.name, call.arguments, call.categories) for call in result.calls]


def categories(result: AssemblyResult) -> set[ErrorCategory]:
    return {rejection.category for rejection in result.rejections}


# --- valid streams ---------------------------------------------------------------------------------------------------


def test_a_call_after_text_is_proposed_at_its_block_index() -> None:
    result = run(stream(tool_call(1, "tooluse_AbCdEfGhIjKlMnOpQrStUv", "get_weather", *WEATHER)))
    assert result.dispatchable
    assert result.state is StreamState.COMPLETED
    assert result.finish_reasons == ("tool_use",)
    assert summary(result) == [(1, "tooluse_AbCdEfGhIjKlMnOpQrStUv", "get_weather", '{"city": "Paris"}', ())]
    assert result.calls[0].choice == 0
    assert result.calls[0].fragments == 4  # the start and three pieces ("" first, as Anthropic models send)


def test_several_calls_keep_their_block_indexes() -> None:
    result = run(stream(tool_call(1, "tooluse_a", "get_weather", '{"city":"Paris"}'), tool_call(2, "tooluse_b", "t")))
    assert result.dispatchable
    assert [(c.index, c.id, c.arguments) for c in result.calls] == [
        (1, "tooluse_a", '{"city":"Paris"}'),
        (2, "tooluse_b", "{}"),
    ]


@pytest.mark.parametrize(
    "pieces", [(), ("",), ("", ""), (MISSING,), (None,)], ids=["none", "empty", "two", "no-input", "null"]
)
def test_a_parameterless_call_is_the_implicit_placeholder(pieces: tuple[Any, ...]) -> None:
    """Nova streams one ``input: ""`` or nothing for a tool without parameters: ``{}``, dispatchable."""
    result = run(stream(tool_call(1, "tooluse_a", "list_files", *pieces)))
    assert result.dispatchable
    assert result.calls[0].arguments == "{}"


@pytest.mark.parametrize("reason", ["end_turn", "tool_use", "stop_sequence"])
def test_end_turn_with_calls_is_complete(reason: str) -> None:
    result = run(stream(tool_call(1, "tooluse_a", "f", "{}"), stop_reason=reason))
    assert result.dispatchable
    assert result.finish_reasons == (reason,)


def test_tool_use_without_calls_is_complete_with_nothing_to_dispatch() -> None:
    result = run(stream(stop_reason="tool_use"))
    assert (result.dispatchable, result.state, result.calls, result.rejections) == (
        False,
        StreamState.COMPLETED,
        (),
        (),
    )


def test_ids_of_other_families_pass_through() -> None:
    result = run(stream(tool_call(0, "functions.get_temperature:0", "get_temperature", '{"c":1}'), text=None))
    assert result.dispatchable
    assert result.calls[0].id == "functions.get_temperature:0"


def test_type_tool_use_is_a_client_call_and_server_tools_are_no_slot() -> None:
    events = stream(
        [tool_start(1, "tooluse_srv", "nova_code_interpreter", type="server_tool_use"), input_delta(1, '{"code"')],
        block_stop(1),
        block_start(2, {"toolResult": {"toolUseId": "tooluse_srv", "type": "nova_code_interpreter_result"}}),
        block_stop(2),
        [tool_start(3, "tooluse_a", "f", type="tool_use"), input_delta(3, '{"x":1}'), block_stop(3)],
    )
    result = run(events)
    assert result.dispatchable
    assert summary(result) == [(3, "tooluse_a", "f", '{"x":1}', ())]


def test_metadata_is_not_required_and_a_stream_without_message_start_assembles() -> None:
    events = stream(tool_call(1, "tooluse_a", "f", "{}"))
    result = run([event for event in events if "metadata" not in event and "messageStart" not in event])
    assert result.dispatchable


def test_the_ignored_events_are_counted() -> None:
    assembler = BedrockConverseAssembler()
    for event in [message_start(), metadata(), "text", {"a": 1, "b": 2}, {1: {}}, {"newEvent": {}}, {}]:
        assembler.feed(event)
    assert assembler.ignored_events == 6
    assert not assembler.finished
    assembler.feed(message_stop("end_turn"))
    first = assembler.finish()
    assert assembler.finished
    assert assembler.finish() is first  # idempotent


def test_the_adapter_is_a_stream_assembler() -> None:
    assembler: StreamAssembler = BedrockConverseAssembler()
    assembler.feed_done()  # no sentinel: nothing changes
    assert isinstance(assembler.slots.finished, bool)
    assert assemble(stream(tool_call(1, "tooluse_a", "f", "{}"))).dispatchable


# --- the end ---------------------------------------------------------------------------------------------------------


def test_a_stream_without_message_stop_is_truncated_and_skips_assembly_checks() -> None:
    result = run(stream(tool_call(1, "tooluse_a", "f", '{"cut'), stop_reason=MISSING))
    assert result.state is StreamState.TRUNCATED
    assert not result.dispatchable
    assert result.calls[0].categories == (E.TRUNCATED_STREAM,)  # no invalid_arguments: the call is cut anyway


@pytest.mark.parametrize(
    "reason",
    [
        "max_tokens",
        "model_context_window_exceeded",
        "guardrail_intervened",
        "content_filtered",
        "malformed_model_output",
        "malformed_tool_use",
        "brand_new_reason",
        MISSING,
        "",
        None,
        7,
        ["tool_use"],
        {"reason": "tool_use"},
    ],
)
def test_every_other_stop_reason_is_incomplete(reason: Any) -> None:
    result = run([message_start(), *tool_call(1, "tooluse_a", "f", '{"a":1}'), message_stop(reason)])
    assert result.state is StreamState.COMPLETED
    assert not result.dispatchable
    assert result.calls[0].categories == (E.INCOMPLETE_RESPONSE,)
    assert result.finish_reasons == ((reason,) if isinstance(reason, str) and reason else ())


def test_a_message_stop_that_is_not_an_object_is_incomplete() -> None:
    result = run([*tool_call(0, "tooluse_a", "f", "{}"), {"messageStop": "tool_use"}])
    assert result.calls[0].categories == (E.INCOMPLETE_RESPONSE,)


@pytest.mark.parametrize("order", [("tool_use", "max_tokens"), ("max_tokens", "tool_use")])
def test_the_worst_stop_reason_wins(order: tuple[str, str]) -> None:
    result = run([*tool_call(0, "tooluse_a", "f", "{}"), message_stop(order[0]), message_stop(order[1])])
    assert result.calls[0].categories == (E.INCOMPLETE_RESPONSE,)
    assert result.finish_reasons == ("max_tokens",)


def test_the_last_of_two_complete_reasons_is_kept() -> None:
    result = run([*tool_call(0, "tooluse_a", "f", "{}"), message_stop("tool_use"), message_stop("end_turn")])
    assert result.dispatchable
    assert result.finish_reasons == ("end_turn",)


@pytest.mark.parametrize(
    "failure",
    [exception(), exception("throttlingException"), {"error": {"code": "InternalFailure", "message": "x"}}],
    ids=["model-stream-error", "throttling", "error-frame"],
)
@pytest.mark.parametrize("where", ["mid-stream", "after-stop"])
def test_a_failure_frame_anywhere_fails_the_response(failure: dict[str, Any], where: str) -> None:
    call = tool_call(1, "tooluse_a", "f", '{"a":1}')
    events = [message_start(), *call, failure] if where == "mid-stream" else [*stream(call), failure]
    result = run(events)
    assert result.state is StreamState.FAILED
    assert not result.dispatchable
    assert categories(result) == {E.TRUNCATED_STREAM}


def test_a_second_message_start_splices_and_everything_after_is_ignored() -> None:
    for first in (stream(tool_call(1, "tooluse_a", "f", "{}")), [message_start(), *tool_call(1, "tooluse_a", "f")]):
        assembler = BedrockConverseAssembler()
        for event in [*first, message_start(), *tool_call(1, "tooluse_b", "g", "{}"), message_stop()]:
            assembler.feed(event)
        result = assembler.finish()
        assert result.state is StreamState.TRUNCATED
        assert not result.dispatchable
        assert [call.id for call in result.calls] == ["tooluse_a"]
        assert assembler.ignored_events >= 4


# --- identity --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool_use_id", "category"),
    [(None, E.INITIAL_NULL), (MISSING, E.MISSING_ID), ("", E.MISSING_ID), (7, E.UNSUPPORTED_ID_TYPE)],
)
def test_a_call_start_without_a_usable_id_is_rejected(tool_use_id: Any, category: ErrorCategory) -> None:
    result = run(stream(tool_call(1, tool_use_id, "f", "{}")))
    assert not result.dispatchable
    assert result.calls[0].categories[0] is category
    assert result.calls[0].id is None


def test_a_repeated_start_replaces_a_placeholder_id_and_keeps_the_same_one() -> None:
    events = stream([tool_start(1, "", "f"), tool_start(1, "tooluse_a", "f"), input_delta(1, "{}"), block_stop(1)])
    result = run(events)
    assert result.dispatchable
    assert result.calls[0].id == "tooluse_a"
    same = run(stream([tool_start(1, "tooluse_a", "f"), tool_start(1, "tooluse_a", MISSING), block_stop(1)]))
    assert same.dispatchable


@pytest.mark.parametrize(
    ("again", "category"),
    [("tooluse_b", E.ID_CONFLICT), ("", E.EMPTY_AFTER_ESTABLISHED), (["x"], E.UNSUPPORTED_ID_TYPE)],
)
def test_a_repeated_start_that_contradicts_the_id_is_rejected(again: Any, category: ErrorCategory) -> None:
    events = stream([tool_start(1, "tooluse_a", "f"), tool_start(1, again, "f"), block_stop(1)])
    result = run(events)
    assert not result.dispatchable
    assert result.calls[0].id == "tooluse_a"
    assert category in result.calls[0].categories


def test_names_follow_the_spec() -> None:
    conflict = run(stream([tool_start(1, "tooluse_a", "f"), tool_start(1, "tooluse_a", "g"), block_stop(1)]))
    assert E.NAME_CONFLICT in conflict.calls[0].categories
    for name in (7, MISSING, None):
        assert E.MISSING_NAME in run(stream(tool_call(1, "tooluse_a", name, "{}"))).calls[0].categories


def test_two_calls_with_one_id_are_both_duplicates() -> None:
    result = run(stream(tool_call(1, "tooluse_a", "f", "{}"), tool_call(2, "tooluse_a", "f", "{}")))
    assert not result.dispatchable
    assert [call.categories for call in result.calls] == [(E.DUPLICATE_CALL_ID,), (E.DUPLICATE_CALL_ID,)]


# --- routing ---------------------------------------------------------------------------------------------------------


def unknown(events: list[Any]) -> AssemblyResult:
    result = run(events)
    assert not result.dispatchable
    assert E.UNKNOWN_SLOT in categories(result)
    return result


def test_a_delta_before_its_start_is_unknown_slot() -> None:
    result = unknown(stream([input_delta(1, "{}"), *tool_call(1, "tooluse_a", "f")]))
    assert result.calls[0].arguments == "{}"  # merged nowhere


@pytest.mark.parametrize("index", ["1", True, -1, 1.0, MISSING, None])
def test_an_unusable_index_is_unknown_slot(index: Any) -> None:
    unknown(stream([tool_start(1, "tooluse_a", "f"), input_delta(index, "{}"), block_stop(1)]))
    result = unknown(stream([tool_start(index, "tooluse_a", "f"), input_delta(1, "{}"), block_stop(index)]))
    assert result.calls == ()  # nothing opened
    # a block that is not a call at an unusable index starts nothing: the call stays current
    other = block_start(index, {"toolResult": {"toolUseId": "x"}})
    assert run(stream([tool_start(1, "tooluse_a", "f"), other, input_delta(1, "{}"), block_stop(1)])).dispatchable
    # a stop at an unusable index changes nothing
    assert run(stream([tool_start(1, "tooluse_a", "f"), block_stop(index), block_stop(1)])).dispatchable


def test_interleaved_calls_are_unknown_slot() -> None:
    events = [tool_start(1, "tooluse_a", "f"), tool_start(2, "tooluse_b", "g"), input_delta(1, '{"a":1}')]
    result = unknown(stream(events, block_stop(1), block_stop(2)))
    assert [call.arguments for call in result.calls] == ["{}", "{}"]


def test_a_piece_after_its_stop_is_unknown_slot() -> None:
    unknown(stream([*tool_call(1, "tooluse_a", "f", "{}"), input_delta(1, "{}")]))
    # also after messageStop: the end is decided when the input is over
    unknown([*stream(tool_call(1, "tooluse_a", "f", "{}")), input_delta(1, "x")])


def test_a_new_text_block_makes_the_call_no_longer_current() -> None:
    events = stream([tool_start(1, "tooluse_a", "f"), text_delta(2), input_delta(1, "{}"), block_stop(1)], text=None)
    unknown(events)


def test_a_tool_piece_at_a_text_block_is_unknown_slot() -> None:
    unknown(stream([input_delta(0, "{}")], text="hello"))


def test_one_index_holds_one_kind_of_block() -> None:
    unknown(stream(tool_call(0, "tooluse_a", "f", "{}")))  # a call started at the text block's index
    result = unknown(stream([*tool_call(1, "tooluse_a", "f", "{}"), text_delta(1)]))
    assert result.calls[0].id == "tooluse_a"
    unknown(stream([tool_start(1, "tooluse_a", "f"), block_start(1, {"toolResult": {"toolUseId": "x"}})]))
    unknown(stream([tool_start(1, "tooluse_s", "s", type="server_tool_use"), tool_start(1, "tooluse_a", "f")]))


def test_other_deltas_are_ignored_where_they_belong() -> None:
    odd = {"contentBlockDelta": {"contentBlockIndex": 1, "delta": "text"}}
    events = stream(
        [text_delta(0, " more"), {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": {}}}}],
        tool_call(1, "tooluse_a", "f", "{}"),
        [text_delta("x"), odd, {"contentBlockDelta": {"contentBlockIndex": 1, "delta": {}}}],
        {"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"SDK_UNKNOWN_MEMBER": {"name": "new"}}}},
    )
    result = run(events)
    assert result.dispatchable
    assert result.calls[0].arguments == "{}"


def test_a_stop_that_names_no_call_changes_nothing_and_a_late_stop_is_harmless() -> None:
    events = stream(
        [tool_start(1, "tooluse_a", "f"), block_stop(7), block_stop(0), input_delta(1, "{}")],
        [block_stop(1), tool_call(2, "tooluse_b", "g", "{}"), block_stop(1)],
    )
    assert run(events).dispatchable


def test_a_repeated_start_reopens_the_call_and_makes_it_current() -> None:
    events = stream(
        [tool_start(1, "tooluse_a", "f"), input_delta(1, '{"a":'), block_stop(1)],
        [tool_start(2, "tooluse_b", "g"), block_stop(2)],
        [tool_start(1, "tooluse_a", "f"), input_delta(1, "1}"), block_stop(1)],
    )
    result = run(events)
    assert result.dispatchable
    assert result.calls[0].arguments == '{"a":1}'


def test_events_that_are_mappings_but_not_dicts_take_the_generic_path() -> None:
    events: list[Any] = [MappingProxyType(event) for event in stream(tool_call(1, "tooluse_a", "f", '{"a":', "2}"))]
    result = _assemble(events)
    assert result.dispatchable
    assert result.calls[0].arguments == '{"a":2}'


# --- arguments -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("piece", [{"a": 1}, 7, ["{}"]])
def test_a_piece_that_is_not_a_string_is_invalid_arguments(piece: Any) -> None:
    result = run(stream(tool_call(1, "tooluse_a", "f", '{"a":1}', piece, "")))
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


@pytest.mark.parametrize("tool", ["{}", 7])
def test_a_tool_delta_that_is_not_an_object_is_invalid_arguments(tool: Any) -> None:
    odd = {"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": tool}}}
    result = run(stream([tool_start(1, "tooluse_a", "f"), odd, block_stop(1)]))
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)
    null = {"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": None}}}
    assert run(stream([tool_start(1, "tooluse_a", "f"), null, block_stop(1)])).dispatchable


@pytest.mark.parametrize("pieces", [('{"a":1}', "{}"), ("  ",), ('{"a":1',), ("[1]",), ('"{}"',)])
def test_joined_pieces_must_be_one_json_object(pieces: tuple[str, ...]) -> None:
    result = run(stream(tool_call(1, "tooluse_a", "f", *pieces)))
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


def test_the_argument_cap_applies() -> None:
    result = run(stream(tool_call(1, "tooluse_a", "f", '{"a":"', "x" * 40, '"}')), max_argument_chars=32)
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


# --- complete bodies -------------------------------------------------------------------------------------------------


def judged(document: dict[str, Any]) -> AssemblyResult:
    result = judge_body(BEDROCK_CONVERSE, document, IdentityRules.for_rules())
    assert result is not None
    return result


def test_a_body_proposes_its_calls_at_their_content_positions() -> None:
    document = body(tool_use("tooluse_a", "get_weather", {"city": "Zürich"}), tool_use("tooluse_b", "list", {}))
    result = judged(document)
    assert result.dispatchable
    assert summary(result) == [
        (1, "tooluse_a", "get_weather", '{"city":"Zürich"}', ()),
        (2, "tooluse_b", "list", "{}", ()),
    ]
    assert result.fragments == 0
    assert result.finish_reasons == ("tool_use",)


@pytest.mark.parametrize("value", ["{}", '{"a":1}', [1], 7, True, None, MISSING, {"x": math.nan}])
def test_a_body_input_that_is_not_an_object_is_invalid_arguments(value: Any) -> None:
    result = judged(body(tool_use("tooluse_a", "f", value)))
    assert not result.dispatchable
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


def test_a_body_ends_by_its_stop_reason() -> None:
    assert judged(body(tool_use("tooluse_a", "f", {}), stop_reason=MISSING)).state is StreamState.TRUNCATED
    incomplete = judged(body(tool_use("tooluse_a", "f", {}), stop_reason="max_tokens"))
    assert incomplete.calls[0].categories == (E.INCOMPLETE_RESPONSE,)
    assert judged(body(tool_use("tooluse_a", "f", {}), stop_reason="end_turn")).dispatchable


@pytest.mark.parametrize(
    "document",
    [{"output": {}, "stopReason": "end_turn"}, {"output": {"message": {}}}, {"output": {"message": {"content": 3}}}],
)
def test_a_body_without_content_has_no_call(document: dict[str, Any]) -> None:
    assert judged(document).calls == ()


def test_a_body_keeps_server_tools_out_and_null_ids_reject() -> None:
    server = {
        "toolUse": {"toolUseId": "tooluse_s", "name": "nova_code_interpreter", "input": {}, "type": "server_tool_use"}
    }
    result = judged(body(server, "text block", tool_use(None, "f", {})))
    assert [(call.index, call.categories[0]) for call in result.calls] == [(3, E.INITIAL_NULL)]


def test_a_body_after_a_stream_start_splices() -> None:
    result = _assemble([message_start(), body(tool_use("tooluse_a", "f", {}))])
    assert result.state is StreamState.TRUNCATED
    assert result.calls == ()


# --- detection -------------------------------------------------------------------------------------------------------


def test_each_event_type_is_detected_as_bedrock() -> None:
    events = stream(tool_call(1, "tooluse_a", "f", "{}"))
    assert {detect(event) for event in events} == {BEDROCK_CONVERSE}
    for other in ({"type": "message_start"}, {"messageStart": {}, "type": "x"}, {"choices": []}, [message_start()]):
        assert detect(other) is not BEDROCK_CONVERSE
