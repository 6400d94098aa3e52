"""Property tests of the Bedrock Converse adapter against a model written from BEDROCK.md.

Each generated scenario is a message of text, server-tool and client ``toolUse`` blocks streamed one
after the other at consecutive indexes (text blocks without a start, as Bedrock sends them), each call
with an id that may be a duplicate, ``null``, ``""`` or a number, its input split anywhere (or garbled,
or nothing), and an end (a ``messageStop`` with some reason, an exception frame, nothing). What the
response must become (state, dispatchable, each call's id and arguments) is computed here from the
scenario, without etf_otel. The same events framed as raw event-stream bytes must assemble the same.
A second family feeds arbitrary JSON-shaped events: nothing raises, and a dispatchable response is whole.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etf_otel import StreamState
from etf_otel.protocols._bedrock_converse import COMPLETE_STOP_REASONS, BedrockConverseAssembler
from etf_otel.protocols._bedrock_frames import decode
from etf_otel.testing.bedrock import (
    block_stop,
    exception,
    frames,
    input_delta,
    message_start,
    message_stop,
    text_delta,
    tool_start,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ENDS = ("tool_use", "end_turn", "stop_sequence", "max_tokens", "guardrail_intervened", "brand_new", None, "fail")
ODD_IDS = ("tooluse_0", None, "", 7)


@dataclass
class Call:
    tool_use_id: Any
    arguments: str
    cuts: list[int]


@st.composite
def calls(draw: Any, position: int) -> Call:
    tool_use_id = draw(st.one_of(st.just(f"tooluse_{position}"), st.sampled_from(ODD_IDS)))
    value = draw(
        st.dictionaries(st.text("abc", max_size=3), st.integers(0, 9) | st.text("xyé", max_size=3), max_size=3)
    )
    text = draw(st.sampled_from([json.dumps(value), "", '{"a":', "[1]"]))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
    return Call(tool_use_id, text, cuts)


@st.composite
def scenarios(draw: Any) -> tuple[list[Any], str | None]:
    kinds = draw(st.lists(st.sampled_from(["text", "call", "call", "server"]), max_size=5))
    blocks: list[Any] = [draw(calls(position)) if kind == "call" else kind for position, kind in enumerate(kinds)]
    return blocks, draw(st.sampled_from(ENDS))


def events_of(blocks: list[Any], end: str | None) -> list[Any]:
    events: list[Any] = [message_start()]
    for index, block in enumerate(blocks):
        if block == "text":
            events += [text_delta(index, "hello"), block_stop(index)]
        elif block == "server":
            events += [tool_start(index, f"tooluse_s{index}", "code", type="server_tool_use"), input_delta(index, "{")]
            events.append(block_stop(index))
        else:
            events.append(tool_start(index, block.tool_use_id, "f"))
            bounds = [0, *block.cuts, len(block.arguments)]
            events += [input_delta(index, block.arguments[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
            events.append(block_stop(index))
    if end == "fail":
        events.append(exception())
    elif end is not None:
        events.append(message_stop(end))
    return events


def valid_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def assembled(events: list[Any]) -> Any:
    assembler = BedrockConverseAssembler()
    for event in events:
        assembler.feed(event)
    return assembler.finish()


@SETTINGS
@given(scenarios())
def test_a_generated_stream_becomes_what_the_rules_say(scenario: tuple[list[Any], str | None]) -> None:
    blocks, end = scenario
    events = events_of(blocks, end)
    result = assembled(events)
    assert assembled(decode(frames(events))) == result
    own = [block for block in blocks if isinstance(block, Call)]
    state = {None: StreamState.TRUNCATED, "fail": StreamState.FAILED}.get(end, StreamState.COMPLETED)
    assert result.state is state
    assert [call.index for call in result.calls] == [i for i, block in enumerate(blocks) if isinstance(block, Call)]
    counts = Counter(call.tool_use_id for call in own)
    good_ids = all(isinstance(c.tool_use_id, str) and c.tool_use_id and counts[c.tool_use_id] == 1 for c in own)
    good_args = all(valid_object(c.arguments or "{}") for c in own)
    assert result.dispatchable == (end in COMPLETE_STOP_REASONS and bool(own) and good_ids and good_args)
    for call, block in zip(result.calls, own, strict=True):
        established = block.tool_use_id if isinstance(block.tool_use_id, str) and block.tool_use_id else None
        assert call.id == established
        assert call.arguments == (block.arguments or "{}")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text('{}":ab', max_size=4),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text("ab", max_size=2), children, max_size=3),
    max_leaves=8,
)
KEYS = st.sampled_from(
    ["messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata", "x"]
)
PAYLOADS = st.fixed_dictionaries(
    {},
    optional={
        "contentBlockIndex": st.integers(-1, 3) | JSON,
        "start": st.fixed_dictionaries({}, optional={"toolUse": JSON | st.just({"toolUseId": "tooluse_a"})}) | JSON,
        "delta": st.fixed_dictionaries({}, optional={"toolUse": JSON, "text": JSON}) | JSON,
        "stopReason": JSON | st.sampled_from(sorted(COMPLETE_STOP_REASONS)),
    },
)


@SETTINGS
@given(st.lists(st.one_of(st.dictionaries(KEYS, PAYLOADS, min_size=1, max_size=1), JSON), max_size=12))
def test_arbitrary_events_never_raise_and_a_dispatchable_response_is_whole(events: list[Any]) -> None:
    result = assembled(events)
    if result.dispatchable:
        assert result.calls
        ids = [call.id for call in result.calls]
        assert all(isinstance(call_id, str) and call_id for call_id in ids) and len(set(ids)) == len(ids)
        assert all(call.name and valid_object(call.arguments) for call in result.calls)
        assert any(isinstance(e, dict) and "messageStop" in e for e in events)
