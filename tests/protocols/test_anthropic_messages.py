"""The Anthropic Messages adapter, rule by rule (docs/protocols.md).

Each test builds a stream from the events before the one under test (a message start,
the blocks so far) and checks what the response became after it. Every stream is also
replayed as the ``anthropic`` SDK's typed events (built by the SDK's own constructor,
the one its stream uses on the wire), and must assemble to the very same result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pydantic
import pytest
from anthropic._models import construct_type
from anthropic.types import RawMessageStreamEvent
from anthropic.types.beta import BetaRawMessageStreamEvent

from etf_otel import ErrorCategory, IdentityRules, StreamState, Transition
from etf_otel.core._lifecycle import LifecycleSlots
from etf_otel.core._results import AssemblyResult
from etf_otel.protocols import ANTHROPIC_MESSAGES, PROTOCOLS, StreamAssembler, detect, get
from etf_otel.protocols._anthropic_messages import AnthropicAssembler, assemble
from etf_otel.testing.anthropic import (
    MISSING,
    block,
    block_start,
    block_stop,
    error,
    json_delta,
    message_delta,
    message_start,
    message_stop,
    ping,
    stream,
    text_block,
    text_delta,
    tool_call,
    tool_start,
    tool_use,
)

from ..conftest import Captured

E = ErrorCategory
WEATHER = ('{"city":', ' "Paris"}')


def typed(event: Any, union: Any = RawMessageStreamEvent) -> Any:
    """``event`` as the SDK's stream yields it: ``construct_type`` over the event union (no validation)."""
    if not isinstance(event, dict):
        return event
    return construct_type(type_=union, value=event)


def run(events: list[Any], *, sdk: bool = True, **kwargs: Any) -> AssemblyResult:
    """Assemble ``events`` as dicts and (unless ``sdk`` is false) as SDK objects: both give the same result.

    ``sdk=False`` is for indexes the SDK's constructor coerces before the adapter sees them
    (``"1"``, ``1.0`` and ``true`` become the integer 1: see the test of that below).
    """
    from_dicts = _assemble(events, **kwargs)
    if sdk:
        assert _assemble([typed(event) for event in events], **kwargs) == from_dicts
    return from_dicts


def _assemble(events: list[Any], **kwargs: Any) -> AssemblyResult:
    assembler = AnthropicAssembler(**kwargs)
    for event in events:
        assembler.feed(event)
    return assembler.finish()


def summary(result: AssemblyResult) -> list[tuple[object, ...]]:
    return [(call.index, call.id, call.name, call.arguments, call.categories) for call in result.calls]


# --- valid streams -----------------------------------------------------------------------


def test_a_single_call_is_proposed_with_its_id_name_and_arguments() -> None:
    result = run(stream(tool_call(0, "toolu_01", "get_weather", *WEATHER)))
    assert result.dispatchable
    assert result.state is StreamState.COMPLETED
    assert result.finish_reasons == ("tool_use",)
    assert summary(result) == [(0, "toolu_01", "get_weather", '{"city": "Paris"}', ())]
    assert result.calls[0].fragments == 4  # the start and three deltas ("" first)


def test_several_calls_in_sequence_after_text_keep_their_block_indexes() -> None:
    events = stream(
        text_block(0),
        tool_call(1, "toolu_01", "get_weather", *WEATHER),
        tool_call(2, "toolu_02", "get_time", '{"tz":"CET"}'),
    )
    result = run(events)
    assert result.dispatchable
    assert [(c.index, c.id, c.arguments) for c in result.calls] == [
        (1, "toolu_01", '{"city": "Paris"}'),
        (2, "toolu_02", '{"tz":"CET"}'),
    ]


def test_a_parameterless_tool_is_the_placeholder_object() -> None:
    """Only ``partial_json: ""`` on the wire: the start's ``{}`` is the arguments (valid here, unlike Chat)."""
    result = run(stream(tool_call(0, "toolu_01", "list_files")))
    assert result.dispatchable
    assert result.calls[0].arguments == "{}"


def test_a_complete_input_at_block_start_without_deltas_is_valid() -> None:
    """Programmatic tool calling: the input arrives whole on the start event."""
    events = stream([tool_start(0, "toolu_01", "get_weather", {"city": "Paris", "days": [1, 2]}), block_stop(0)])
    result = run(events)
    assert result.dispatchable
    assert result.calls[0].arguments == '{"city":"Paris","days":[1,2]}'


def test_a_start_input_that_equals_the_deltas_as_json_is_no_contradiction() -> None:
    events = stream(tool_call(0, "toolu_01", "get_weather", '{ "city" : "Paris" }', input={"city": "Paris"}))
    result = run(events)
    assert result.dispatchable
    assert result.calls[0].arguments == '{ "city" : "Paris" }'  # the deltas are the arguments


def test_non_ascii_input_is_compared_as_json_values() -> None:
    events = stream(tool_call(0, "toolu_01", "say", '{"text":"\\u00e9t\\u00e9"}', input={"text": "été"}))
    assert run(events).dispatchable


def test_a_start_input_that_contradicts_the_deltas_is_a_snapshot_mismatch() -> None:
    events = stream(tool_call(0, "toolu_01", "get_weather", '{"city":"Rome"}', input={"city": "Paris"}))
    result = run(events)
    assert not result.dispatchable
    assert summary(result) == [(0, "toolu_01", "get_weather", '{"city":"Rome"}', (E.SNAPSHOT_MISMATCH,))]


def test_the_placeholder_is_never_joined_with_the_deltas() -> None:
    """LiteLLM once produced ``{}{"location": ...}`` this way (BerriAI/litellm#4537)."""
    result = run(stream(tool_call(0, "toolu_01", "get_weather", '{"location":', '"Paris"}')))
    assert result.calls[0].arguments == '{"location":"Paris"}'
    assert result.dispatchable


# --- how the message ends -------------------------------------------------------------------


def test_max_tokens_with_only_the_empty_delta_is_incomplete_not_a_valid_empty_call() -> None:
    """The parameter cut by max_tokens never reaches the stream (anthropic-sdk-python#794).

    The naive assembly is ``{}``, a valid object; only the stop reason tells it was cut.
    """
    result = run(stream(tool_call(0, "toolu_01", "write_file"), stop_reason="max_tokens"))
    assert result.calls[0].arguments == "{}"
    assert result.calls[0].categories == (E.INCOMPLETE_RESPONSE,)
    assert result.state is StreamState.COMPLETED
    assert result.finish_reasons == ("max_tokens",)
    assert not result.dispatchable


@pytest.mark.parametrize("reason", ["model_context_window_exceeded", "refusal", "pause_turn"])
def test_every_stop_reason_that_says_cut_or_withheld_is_incomplete(reason: str) -> None:
    result = run(stream(tool_call(0, "toolu_01", "get_weather", *WEATHER), stop_reason=reason))
    assert result.categories == (E.INCOMPLETE_RESPONSE,)
    assert not result.dispatchable


@pytest.mark.parametrize("reason", ["end_turn", "stop_sequence", "tool_use", "brand_new_reason", MISSING, None, ""])
def test_other_or_unknown_stop_reasons_and_none_are_complete(reason: Any) -> None:
    result = run(stream(tool_call(0, "toolu_01", "get_weather", *WEATHER), stop_reason=reason))
    assert result.dispatchable


def test_a_stop_reason_without_message_stop_ends_the_message() -> None:
    assert run(stream(tool_call(0, "toolu_01", "f", "{}"), stop=False)).dispatchable


def test_an_incomplete_stop_reason_without_message_stop_is_incomplete() -> None:
    result = run(stream(tool_call(0, "toolu_01", "f", "{}"), stop_reason="max_tokens", stop=False))
    assert result.categories == (E.INCOMPLETE_RESPONSE,)


def test_the_last_stop_reason_wins() -> None:
    events = stream(tool_call(0, "toolu_01", "f", "{}"), stop_reason="max_tokens", stop=False)
    result = run([*events, message_delta("tool_use"), message_stop()])
    assert result.dispatchable
    assert result.finish_reasons == ("tool_use",)


@pytest.mark.parametrize("after", [[], [message_stop()]])
def test_an_error_after_the_stop_reason_fails_the_message(after: list[Any]) -> None:
    events = stream(tool_call(0, "toolu_01", "f", "{}"), stop=False)
    result = run([*events, error(), *after])
    assert result.state is StreamState.FAILED
    assert result.calls[0].categories == (E.TRUNCATED_STREAM,)
    assert not result.dispatchable


def test_an_error_in_the_middle_fails_the_message_and_skips_the_assembly_checks() -> None:
    result = run([message_start(), tool_start(0), json_delta(0, '{"a":'), error("api_error")])
    assert result.state is StreamState.FAILED
    assert result.calls[0].categories == (E.TRUNCATED_STREAM,)  # no invalid_arguments: the call was cut


@pytest.mark.parametrize(
    "events",
    [
        [message_start(), tool_start(0), json_delta(0, '{"a":')],  # cut inside the arguments
        stream(tool_call(0, "toolu_01", "f", "{}"), stop_reason=MISSING, stop=False),  # cut after the block
        stream(tool_call(0, "toolu_01", "f", "{}"), stop_reason=None, stop=False),  # a null reason ends nothing
    ],
)
def test_a_cut_stream_is_truncated(events: list[Any]) -> None:
    result = run(events)
    assert result.state is StreamState.TRUNCATED
    assert result.categories == (E.TRUNCATED_STREAM,)
    assert not result.dispatchable


def test_a_message_without_tool_calls_ends_without_calls_or_rejections() -> None:
    result = run(stream(text_block(0), stop_reason="end_turn"))
    assert result.calls == () and result.rejections == ()
    assert not result.dispatchable  # nothing to dispatch
    assert run(stream(text_block(0), stop_reason="max_tokens")).categories == (E.INCOMPLETE_RESPONSE,)


# --- routing: slots, blocks and indexes ----------------------------------------------------


def test_a_block_index_reused_by_another_call_is_an_id_conflict() -> None:
    events = stream(tool_call(0, "toolu_01", "f", '{"a":1}'), tool_call(0, "toolu_02", "f"))
    result = run(events)
    assert summary(result) == [(0, "toolu_01", "f", '{"a":1}', (E.ID_CONFLICT,))]
    assert not result.dispatchable


def test_a_repeated_start_with_the_same_id_reopens_the_slot() -> None:
    """The naive-merge view: the repeated start is an identity fragment, and deltas join again."""
    events = stream([tool_start(0, "toolu_01", "f"), block_stop(0), *tool_call(0, "toolu_01", "f", '{"a":1}')])
    result = run(events)
    assert result.dispatchable
    assert result.calls[0].arguments == '{"a":1}'
    assert result.diagnostics[1].transition is Transition.KEEP_IDENTICAL


def test_a_delta_after_content_block_stop_is_unknown_slot() -> None:
    events = stream([*tool_call(0, "toolu_01", "f", "{}"), json_delta(0, '{"late":1}')])
    result = run(events)
    assert result.calls[0].arguments == "{}"  # merged nowhere
    assert result.categories == (E.UNKNOWN_SLOT,)
    assert not result.dispatchable


@pytest.mark.parametrize("index", [3, -1, "0", 1.0, True, None, MISSING])
def test_a_delta_for_no_started_block_or_no_usable_index_is_unknown_slot(index: Any) -> None:
    result = run(stream(tool_call(0, "toolu_01", "f", "{}"), [json_delta(index, '{"a":1}')]), sdk=False)
    assert result.categories == (E.UNKNOWN_SLOT,)
    assert result.calls[0].arguments == "{}"


def test_interleaved_blocks_are_rejected() -> None:
    """A delta for block 0 after block 1 started: Anthropic never interleaves, a translator did."""
    events = stream(
        [
            tool_start(0, "toolu_01", "f"),
            json_delta(0, '{"a":'),
            tool_start(1, "toolu_02", "g"),
            json_delta(1, "{}"),
            json_delta(0, "1}"),  # back to block 0
            block_stop(0),
            block_stop(1),
        ]
    )
    result = run(events)
    assert result.categories == (E.UNKNOWN_SLOT, E.INVALID_ARGUMENTS)  # block 0 stays cut
    assert [call.arguments for call in result.calls] == ['{"a":', "{}"]  # the late piece joined nothing
    assert not result.dispatchable


def test_interleaving_through_a_non_tool_block_is_rejected_too() -> None:
    events = stream([tool_start(0), json_delta(0, '{"a":'), *text_block(1), json_delta(0, "1}"), block_stop(0)])
    assert run(events).categories == (E.UNKNOWN_SLOT, E.INVALID_ARGUMENTS)


def test_overlapping_blocks_whose_deltas_do_not_interleave_are_accepted() -> None:
    """Only a delta routed away from the latest block is illegal; a late stop is harmless."""
    events = stream(
        [
            tool_start(0, "toolu_01", "f"),
            json_delta(0, "{}"),
            tool_start(1, "toolu_02", "g"),
            block_stop(0),
            json_delta(1, "{}"),
            block_stop(1),
        ]
    )
    assert run(events).dispatchable


def test_a_call_left_open_is_finalized_when_the_message_ends() -> None:
    assert run(stream([tool_start(0), json_delta(0, "{}")])).dispatchable


@pytest.mark.parametrize(
    "kind", ["server_tool_use", "mcp_tool_use", "text", "thinking", "web_search_tool_result", "mcp_tool_result"]
)
def test_deltas_of_non_tool_blocks_are_ignored_even_input_json(kind: str) -> None:
    events = stream(
        [
            block_start(0, block(kind, id="srvtoolu_01", name="web_search", input={})),
            json_delta(0, ""),
            json_delta(0, '{"query":"x"}'),
            text_delta(0, "text"),
            block_stop(0),
            json_delta(0, "stray"),  # after its stop too
        ],
        tool_call(1, "toolu_01", "f", "{}"),
    )
    result = run(events)
    assert result.dispatchable
    assert summary(result) == [(1, "toolu_01", "f", "{}", ())]


def test_mcp_tool_use_as_the_beta_sdk_types_it_is_no_slot() -> None:
    events = stream(
        [block_start(0, block("mcp_tool_use", id="mcptoolu_01", name="n", server_name="s", input={}))],
        [json_delta(0, '{"a":1}'), block_stop(0)],
        tool_call(1, "toolu_01", "f", "{}"),
    )
    result = _assemble([typed(event, BetaRawMessageStreamEvent) for event in events])
    assert result == _assemble(events)
    assert result.dispatchable and len(result.calls) == 1


@pytest.mark.parametrize(
    "events",
    [
        [*text_block(0), *tool_call(0, "toolu_01", "f", "{}")],  # a tool block at a text block's index
        [*tool_call(0, "toolu_01", "f", "{}"), *text_block(0)],  # a text block at a tool block's index
    ],
)
def test_an_index_shared_by_a_tool_block_and_another_block_is_unknown_slot(events: list[Any]) -> None:
    """Consumers that place blocks by position would send the deltas to different blocks."""
    result = run(stream(events))
    assert E.UNKNOWN_SLOT in result.categories
    assert not result.dispatchable


@pytest.mark.parametrize("index", [-1, "1", None, MISSING, 2.5, True])
def test_a_tool_block_start_without_a_usable_index_is_unknown_slot_and_opens_nothing(index: Any) -> None:
    events = stream([tool_start(index, "toolu_01", "f"), json_delta(index, "{}"), block_stop(index)])
    result = run(events, sdk=False)
    assert result.calls == ()
    assert result.categories[0] is E.UNKNOWN_SLOT
    assert not result.dispatchable


def test_the_sdk_coerces_numeric_looking_indexes_before_the_adapter_sees_them() -> None:
    """The SDK's stream builds events with ``construct_type``, which turns ``"1"`` into 1.

    The adapter judges what it is given: through the SDK such a stream is a valid one.
    """
    events = stream([tool_start("1", "toolu_01", "f"), json_delta(1.0, "{}"), block_stop(True)])
    assert not run(events, sdk=False).dispatchable
    assert _assemble([typed(event) for event in events]).dispatchable


def test_a_non_tool_block_or_a_stop_without_a_usable_index_changes_nothing() -> None:
    events = stream(
        [block_start(None, block("text", text="")), block_stop("0"), block_stop(None)], tool_call(0, "t", "f", "{}")
    )
    assert run(events).dispatchable


# --- identity on the block start -------------------------------------------------------------


@pytest.mark.parametrize(
    ("id_", "category"),
    [
        (None, E.INITIAL_NULL),
        (7, E.UNSUPPORTED_ID_TYPE),
        (["toolu_01"], E.UNSUPPORTED_ID_TYPE),
        (MISSING, E.MISSING_ID),
    ],
)
def test_the_identity_table_applies_to_the_block_start(id_: Any, category: ErrorCategory) -> None:
    result = run(stream(tool_call(0, id_, "f", "{}")))
    assert result.calls[0].id is None
    assert result.calls[0].categories[0] is category


def test_an_empty_id_on_the_start_is_a_placeholder_the_repeated_start_establishes() -> None:
    events = stream([tool_start(0, "", "f"), json_delta(0, "{}"), tool_start(0, "toolu_01", "f"), block_stop(0)])
    result = run(events)
    assert result.dispatchable
    assert result.calls[0].id == "toolu_01"


def test_a_different_name_on_a_repeated_start_is_a_name_conflict() -> None:
    events = stream([tool_start(0, "toolu_01", "f"), tool_start(0, "toolu_01", "g"), json_delta(0, "{}")])
    assert run(events).calls[0].categories == (E.NAME_CONFLICT,)


def test_two_calls_with_one_id_are_duplicate_call_ids() -> None:
    result = run(stream(tool_call(0, "toolu_01", "f", "{}"), tool_call(1, "toolu_01", "g", "{}")))
    assert [call.categories for call in result.calls] == [(E.DUPLICATE_CALL_ID,), (E.DUPLICATE_CALL_ID,)]


# --- inputs and argument deltas of odd shapes --------------------------------------------------


@pytest.mark.parametrize("input_", ['{"city":"Paris"}', ["city"], 3, True, "", {"x": float("nan")}])
def test_an_input_that_is_not_a_json_object_makes_the_arguments_invalid(input_: Any) -> None:
    """Even when the deltas are a valid object: the provider stated something that is not one."""
    result = _assemble(stream(tool_call(0, "toolu_01", "f", '{"city":"Paris"}', input=input_)))
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


@pytest.mark.parametrize("input_", [None, MISSING])
def test_a_null_or_missing_input_states_nothing(input_: Any) -> None:
    with_deltas = run(stream(tool_call(0, "toolu_01", "f", '{"a":1}', input=input_)))
    assert with_deltas.dispatchable and with_deltas.calls[0].arguments == '{"a":1}'
    without = run(stream(tool_call(0, "toolu_01", "f", input=input_)))
    assert without.calls[0].categories == (E.INVALID_ARGUMENTS,)  # "" is not an object


def test_an_input_that_does_not_serialize_makes_the_arguments_invalid() -> None:
    """Only a hand-built SDK object can hold these; parsed JSON always serializes."""
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100_000):
        node["a"] = node = {}
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    for input_ in ({"s": {1, 2}}, deep, cyclic, {(1, 2): "tuple key"}):
        result = _assemble(stream(tool_call(0, "toolu_01", "f", input=input_)))
        assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


@pytest.mark.parametrize(("piece", "valid"), [(None, True), (MISSING, True), (5, False), (["{}"], False)])
def test_a_partial_json_that_is_not_a_string_makes_the_arguments_invalid(piece: Any, valid: bool) -> None:
    events = stream([tool_start(0, "toolu_01", "f"), json_delta(0, piece), json_delta(0, '{"a":1}'), block_stop(0)])
    assert run(events).dispatchable is valid


@pytest.mark.parametrize("text", ['{"s":"\ud800"}', '{"s":"\x00"}', '{"s":"' + "x" * 1_000_000 + '"}'])
def test_lone_surrogates_nul_and_huge_arguments_pass_through_unchanged(text: str) -> None:
    result = run(stream(tool_call(0, "toolu_01", "f", text[:7], text[7:])))
    assert result.calls[0].arguments == text


def test_arguments_past_the_cap_are_invalid() -> None:
    result = run(stream(tool_call(0, "toolu_01", "f", '{"a":"', "x" * 64, '"}')), max_argument_chars=32)
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


# --- response scope: message_start ----------------------------------------------------------------


def test_a_second_message_start_with_another_id_splices_and_the_rest_is_ignored() -> None:
    events = stream(tool_call(0, "toolu_01", "f", "{}"), stop=False, stop_reason=MISSING)
    second = stream(tool_call(0, "toolu_02", "g", "{}"), message_id="msg_02")
    adapter = AnthropicAssembler()
    for event in [*events, *second]:
        adapter.feed(event)
    result = adapter.finish()
    assert result.state is StreamState.TRUNCATED
    assert not result.dispatchable
    assert summary(result) == [(0, "toolu_01", "f", "{}", (E.TRUNCATED_STREAM,))]  # nothing of the second
    assert adapter.ignored_events == len(second) - 1  # every event after the splicing start
    assert run([*events, *second]) == result


@pytest.mark.parametrize("first_id", ["msg_01", MISSING, None, ""])
def test_a_message_start_after_message_stop_splices_too(first_id: Any) -> None:
    """One stream carries one message; without an id to compare, the second start is another message."""
    events = stream(tool_call(0, "toolu_01", "f", "{}"), message_id=first_id)
    result = run([*events, message_start("msg_02"), message_stop()])
    assert result.state is StreamState.TRUNCATED
    assert not result.dispatchable


def test_a_repeated_message_start_with_the_same_id_is_ignored() -> None:
    events = stream([tool_start(0, "toolu_01", "f"), json_delta(0, '{"a":'), message_start(), json_delta(0, "1}")])
    events.append(message_start())  # after message_stop, too
    adapter = AnthropicAssembler()
    for event in events:
        adapter.feed(event)
    result = adapter.finish()
    assert result.dispatchable  # the repeat reset nothing: the block stayed live
    assert result.calls[0].arguments == '{"a":1}'
    assert adapter.ignored_events == 2
    assert run(events) == result


def test_prepopulated_tool_use_in_message_start_is_a_closed_call() -> None:
    content = [
        block("text", text="Checking."),
        tool_use("toolu_01", "get_weather", {"city": "Paris"}),
        tool_use("toolu_02", "list_files"),
    ]
    events = [message_start(content=content), message_delta("tool_use"), message_stop()]
    adapter = AnthropicAssembler()
    adapter.feed(events[0])
    assert not adapter.slots.is_open(1) and not adapter.slots.is_open(2)  # whole blocks: closed at once
    result = run(events)
    assert result.dispatchable
    assert summary(result) == [
        (1, "toolu_01", "get_weather", '{"city":"Paris"}', ()),
        (2, "toolu_02", "list_files", "{}", ()),
    ]


def test_a_delta_for_prepopulated_content_is_unknown_slot_or_ignored() -> None:
    content = [block("text", text=""), tool_use("toolu_01", "f", {"a": 1})]
    events = [message_start(content=content), json_delta(0, "x"), message_stop()]
    assert run(events).dispatchable  # a text block's delta
    events[1] = json_delta(1, '{"a":2}')
    assert run(events).categories == (E.UNKNOWN_SLOT,)  # the call is closed


def test_the_stop_reason_of_message_start_is_the_pending_end_reason() -> None:
    content = [tool_use("toolu_01", "f", {"a": 1})]
    events = [message_start(content=content, stop_reason="max_tokens"), message_stop()]
    result = run(events)
    assert result.finish_reasons == ("max_tokens",)
    assert result.categories == (E.INCOMPLETE_RESPONSE,)


def test_prepopulated_content_and_message_start_of_odd_shapes_are_tolerated() -> None:
    events = stream(tool_call(0, "toolu_01", "f", "{}"))
    for odd in ({"type": "message_start"}, {"type": "message_start", "message": "m"}, message_start(content="text")):
        assert run([odd, *events[1:]]).dispatchable
    content = [None, 3, ["x"], {"type": "tool_use", "id": "toolu_01", "name": "f", "input": {}}]
    result = run([message_start(content=content), message_stop()])
    assert summary(result) == [(3, "toolu_01", "f", "{}", ())]


def test_a_stream_without_message_start_is_judged_by_its_end() -> None:
    """message_start only scopes the response; the end decides (a block streamed before it stays live)."""
    events = stream(tool_call(0, "toolu_01", "f", "{}"))
    assert run(events[1:]).dispatchable
    late_start = [tool_start(0, "toolu_01", "f"), message_start(), json_delta(0, "{}"), message_stop()]
    assert run(late_start).dispatchable


def test_blocks_streamed_before_a_message_start_with_content_are_no_longer_live() -> None:
    content = [block("text", text="")]
    events = [tool_start(1, "toolu_01", "f"), message_start(content=content), json_delta(1, "{}"), message_stop()]
    assert run(events).categories == (E.UNKNOWN_SLOT,)


# --- events that mean nothing here -----------------------------------------------------------------


def test_ping_and_unknown_events_are_ignored_and_counted() -> None:
    events = stream(tool_call(0, "toolu_01", "f", *WEATHER))
    noisy = [ping(), *events[:3], ping(), {"type": "content_block_flush"}, *events[3:], {"type": "input_json"}]
    adapter = AnthropicAssembler()
    for event in noisy:
        adapter.feed(event)
    assert adapter.ignored_events == 4
    assert adapter.finish() == assemble(events)
    assert run(noisy) == assemble(events)


@pytest.mark.parametrize(
    "odd", [None, 0, 1.5, True, "message_stop", "[DONE]", b"data", [message_stop()], {}, {"type": None}, {"type": [1]}]
)
def test_events_that_are_not_event_objects_are_ignored_and_counted(odd: Any) -> None:
    events = stream(tool_call(0, "toolu_01", "f", "{}"), stop=False, stop_reason=MISSING)
    adapter = AnthropicAssembler()
    for event in [*events, odd]:
        adapter.feed(event)
    adapter.feed_done()  # no sentinel in this protocol: nothing happens
    assert adapter.ignored_events == 1
    assert adapter.finish().state is StreamState.TRUNCATED


@pytest.mark.parametrize(
    "odd",
    [
        {"type": "content_block_delta"},
        {"type": "content_block_delta", "index": 0, "delta": None},
        {"type": "content_block_delta", "index": 0, "delta": {"type": ["input_json_delta"]}},
        {"type": "content_block_start", "index": 0},
        {"type": "content_block_start", "index": 0, "content_block": "tool_use"},
        {"type": "content_block_stop"},
        {"type": "message_delta"},
        {"type": "message_delta", "delta": {"stop_reason": 3}},
        {"type": "message_delta", "delta": ["end_turn"]},
    ],
)
def test_known_events_of_odd_shapes_change_nothing(odd: Any) -> None:
    events = stream([*text_block(1), odd], tool_call(2, "toolu_01", "f", "{}"), stop_reason=MISSING)
    assert run(events).dispatchable


def test_finish_is_idempotent_and_the_adapter_reports_it() -> None:
    adapter: StreamAssembler = ANTHROPIC_MESSAGES.assembler(rules=IdentityRules.for_rules(), clock=lambda: 5)
    for event in stream(tool_call(0, "toolu_01", "f", "{}")):
        adapter.feed(event)
    assert isinstance(adapter.slots, LifecycleSlots)
    assert not adapter.finished
    first = adapter.finish()
    assert adapter.finished and adapter.finish() is first
    assert first.calls[0].opened_ns == 5


# --- the protocol description ---------------------------------------------------------------------


def test_the_protocol_is_registered_by_name() -> None:
    assert get("anthropic_messages") is ANTHROPIC_MESSAGES
    assert PROTOCOLS["anthropic_messages"] is ANTHROPIC_MESSAGES


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (message_start(), True),
        (ping(), True),
        (json_delta(0, ""), True),
        (message_stop(), True),
        (typed(message_stop()), True),
        (error(), False),  # ambiguous: Responses has an error event too
        ({"type": "response.created"}, False),
        ({"type": ["message_start"]}, False),
        ({"choices": []}, False),
        ("message_start", False),
        (None, False),
    ],
)
def test_recognizes_the_stream_event_types_only(event: Any, expected: bool) -> None:
    assert ANTHROPIC_MESSAGES.recognizes(event) is expected
    if expected:
        assert detect(event) is ANTHROPIC_MESSAGES


def _user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def _result(tool_use_id: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": "ok"}


ASSISTANT = {"role": "assistant", "content": [tool_use("toolu_01", "f", {})]}


@pytest.mark.parametrize(
    ("followup", "ids"),
    [
        (
            [_user({"type": "text", "text": "hi"}), ASSISTANT, _user(_result("toolu_01"), _result("toolu_02"))],
            ["toolu_01", "toolu_02"],
        ),
        (
            {"model": "m", "messages": [ASSISTANT, _user(_result("toolu_01"), {"type": "text", "text": "go"})]},
            ["toolu_01"],
        ),
        ([ASSISTANT, _user(_result("toolu_01")), _user(_result("toolu_02"))], ["toolu_01", None]),  # later: orphaned
        ([ASSISTANT, _user(_result("toolu_01"), _result("toolu_01"))], ["toolu_01", "toolu_01"]),  # duplicates stay
        ([ASSISTANT, _user(_result(7), _result(None), "text", _result(["toolu_01"]))], [None, None, None]),
        ([_user(_result("old")), ASSISTANT, {"role": "user", "content": "plain text"}], []),  # history is not read
        ([ASSISTANT], []),
        ([_user(_result("toolu_01"))], ["toolu_01"]),  # no assistant message: the first user message
        (
            [ASSISTANT, {"role": "system", "content": [_result("toolu_01")]}, _user(_result("toolu_02"))],
            [None, "toolu_02"],
        ),
        ({"input": []}, None),
        ([1, 2], None),
        ("messages", None),
    ],
)
def test_results_are_the_tool_results_of_the_first_user_message_after_the_assistant(
    followup: object, ids: list[object] | None
) -> None:
    assert ANTHROPIC_MESSAGES.result_ids(followup) == ids


def test_a_result_outside_the_first_user_message_is_an_orphaned_result_for_linkage() -> None:
    from etf_otel.core._linkage import Conversation

    conversation = Conversation()
    conversation.proposed(["toolu_01", "toolu_02"])
    ids = ANTHROPIC_MESSAGES.result_ids([ASSISTANT, _user(_result("toolu_01")), _user(_result("toolu_02"))])
    findings = conversation.next_request(ids)  # type: ignore[arg-type]
    assert [(f.category, f.call_id) for f in findings] == [
        (E.ORPHANED_RESULT, None),
        (E.UNANSWERED_CALL, "toolu_02"),
    ]


# --- through the instrumentation ---------------------------------------------------------------------


def test_the_instrumentation_observes_an_anthropic_stream_by_protocol_name(captured: Captured) -> None:
    events = stream(text_block(0), tool_call(1, "toolu_01", "get_weather", *WEATHER))
    consumed = list(captured.instrumentation().stream(iter(events), protocol="anthropic_messages"))
    assert consumed == events
    (call_span,) = captured.spans("assemble_tool_call")
    assert call_span.attributes is not None
    assert call_span.attributes["gen_ai.tool.call.id"] == "toolu_01"
    assert call_span.attributes["etf.tool_call.index"] == 1
    assert call_span.attributes["etf.tool_call.verdict"] == "proposed"


def test_sdk_events_validated_strictly_assemble_the_same() -> None:
    """``model_validate`` (not only the stream's lenient constructor) gives the same result."""
    events = stream(text_block(0), tool_call(1, "toolu_01", "get_weather", *WEATHER))
    strict = [_validate(event) for event in events]
    assert _assemble(strict) == _assemble(events)


def _validate(event: dict[str, Any]) -> Any:
    import anthropic.types as types

    model: Callable[[Any], Any] = {
        "message_start": types.RawMessageStartEvent.model_validate,
        "content_block_start": types.RawContentBlockStartEvent.model_validate,
        "content_block_delta": types.RawContentBlockDeltaEvent.model_validate,
        "content_block_stop": types.RawContentBlockStopEvent.model_validate,
        "message_delta": types.RawMessageDeltaEvent.model_validate,
        "message_stop": types.RawMessageStopEvent.model_validate,
    }[event["type"]]
    return model(event)


def test_canonical_json_of_the_start_input_keeps_non_ascii_text() -> None:
    events = stream([tool_start(0, "toolu_01", "say", {"text": "été ☃"}), block_stop(0)])
    assert run(events).calls[0].arguments == json.dumps({"text": "été ☃"}, separators=(",", ":"), ensure_ascii=False)


def test_an_sdk_delta_event_missing_a_field_takes_the_generic_path() -> None:
    """The inlined SDK path reads only events with all their fields set; the others give the dict path's result."""
    start = {"type": "message_start", "message": {"id": "m"}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "f"}}
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta"}}
    events = [start, block, delta]
    expected = assemble(events)
    assert assemble([typed(event) for event in events]) == expected


class _DeltaWithDefaults(pydantic.BaseModel):
    """An SDK-like delta event class that declares defaults the payload may not have carried."""

    type: str
    index: int = 0
    delta: Any = None


class _JsonDeltaWithDefault(pydantic.BaseModel):
    type: str
    partial_json: str = '{"injected": true}'


class _UnknownFields:
    """Declares ``model_fields`` that are not pydantic's: nothing can be learned from them."""

    model_fields = {"type": object(), "index": object(), "delta": object()}

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def test_an_sdk_class_with_defaults_is_read_for_what_the_payload_carried_not_its_defaults() -> None:
    """A default is a value the payload did not carry: an index-less delta must not join slot 0, a delta without
    ``partial_json`` adds no text, as for the same events as dicts."""
    start = {"type": "message_start", "message": {"id": "m"}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "f"}}
    no_index = {"type": "content_block_delta", "delta": {"type": "input_json_delta", "partial_json": '{"a":'}}
    no_text = {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta"}}
    whole = {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}}
    events = [start, block, no_index, no_text, whole, {"type": "content_block_stop", "index": 0}]

    def as_objects(event: dict[str, Any]) -> Any:
        if event["type"] != "content_block_delta":
            return event
        fields = {key: value for key, value in event.items() if key != "delta"}
        return _DeltaWithDefaults(**fields, delta=_JsonDeltaWithDefault(**event["delta"]))

    expected = assemble(events)
    assert expected.calls[0].arguments == "{}"
    assert ErrorCategory.UNKNOWN_SLOT in {rejection.category for rejection in expected.rejections}
    assert assemble([as_objects(event) for event in events]) == expected
    unknown = [
        _UnknownFields(**{**event, "delta": _UnknownFields(**event["delta"])}) if "delta" in event else event
        for event in events
    ]
    assert assemble(unknown) == expected


def test_an_sdk_event_around_another_kind_of_delta_or_a_delta_class_with_defaults_gives_the_dict_result() -> None:
    import anthropic.types as types

    start = {"type": "message_start", "message": {"id": "m"}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "f"}}
    text = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}
    no_text = {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta"}}
    events = [start, block, text, no_text, {"type": "content_block_stop", "index": 0}]
    objects = [
        start,
        block,
        typed(text),
        types.RawContentBlockDeltaEvent.model_construct(
            type="content_block_delta", index=0, delta=_JsonDeltaWithDefault(type="input_json_delta")
        ),
        events[-1],
    ]
    expected = assemble(events)
    assert (expected.calls[0].fragments, expected.calls[0].arguments) == (2, "")  # the text delta is not one
    assert assemble(objects) == expected
