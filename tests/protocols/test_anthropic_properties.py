"""Property tests of the Anthropic Messages adapter against a model written from docs/protocols.md.

Each generated scenario is a message of text, provider-tool and ``tool_use`` blocks streamed
one after the other, some corruptions (a stray delta after a block stop, a delta back to an
earlier block, a delta for a block that never started, a spliced second message, dropped
stops, pings), and an end (``message_stop`` with or without a stop reason, a stop reason
alone, an error, nothing). What the response must become (dispatchable, the ids, the
arguments, the stream state) is computed here from the scenario, without etf_otel: the
placeholder/claim/delta rule of section 2.5, the end classes of 2.3, the dispatchability
conditions of 2.6. A second family feeds arbitrary JSON-shaped events and only checks
that nothing raises and that a dispatchable response is whole.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from anthropic._models import construct_type
from anthropic.types import RawMessageStreamEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etf_otel import AssemblyResult, StreamState
from etf_otel.protocols._anthropic_messages import AnthropicAssembler
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
    text_delta,
    tool_start,
)

INCOMPLETE = {"max_tokens", "model_context_window_exceeded", "refusal", "pause_turn"}
REASONS = (None, "tool_use", "end_turn", "stop_sequence", "max_tokens", "pause_turn", "refusal", "brand_new")
ODD_IDS = ("toolu_0", None, "", 7)
"""Ids a tool block gets now and then instead of its own: a duplicate, null, a placeholder, a number."""
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.text(max_size=6))
objects = st.dictionaries(st.text(max_size=5), scalars, max_size=3)


@dataclass
class Tool:
    """A ``tool_use`` block as generated: what it sends, and so what it must assemble to."""

    id: Any
    name: str
    value: dict[str, Any]
    input: dict[str, Any]  # the start's input: {} (placeholder) or a claim
    parts: list[str]  # the delta texts after the first ""
    drop_stop: bool

    @property
    def deltas(self) -> str:
        return "".join(self.parts)

    @property
    def arguments(self) -> str:
        """Deltas if any, else the claim, else the placeholder (2.5)."""
        if self.deltas:
            return self.deltas
        return canonical(self.input) if self.input else "{}"

    def valid(self) -> bool:
        """A non-empty id, a JSON object that no claim contradicts (2.5, 2.6)."""
        if not isinstance(self.id, str) or not self.id:
            return False
        try:
            parsed = json.loads(self.arguments)
        except ValueError:
            return False
        return isinstance(parsed, dict) and (not self.input or not self.deltas or parsed == self.input)


@dataclass
class Scenario:
    events: list[Any]
    tools: list[Tool]
    end: str  # "complete", "incomplete", "failed" or "none"
    stray: bool = False
    spliced: bool = False
    blocks: list[Any] = field(default_factory=list)

    def expected_dispatchable(self) -> bool:
        ids = Counter(tool.id for tool in self.tools if isinstance(tool.id, str) and tool.id)
        return (
            self.end == "complete"
            and not self.spliced
            and not self.stray
            and bool(self.tools)
            and all(tool.valid() and ids[tool.id] == 1 for tool in self.tools)
        )


def chance(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws (integers would be biased towards their bounds)."""
    return draw(st.sampled_from([False] * (one_in - 1) + [True]))


def canonical(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@st.composite
def tools(draw: st.DrawFn, index: int) -> Tool:
    value = draw(objects)
    mode = draw(st.sampled_from(["deltas", "deltas", "deltas", "claim", "both", "mismatch", "cut"]))
    text = json.dumps(value, separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    input_ = value if mode in ("claim", "both", "mismatch") else {}
    if mode == "claim":
        text = ""
    elif mode == "mismatch":
        text = json.dumps({**value, "__other": 1})
    elif mode == "cut":
        text = text[:-1]
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
    parts = [text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True) if text[start:end]]
    id_ = draw(st.sampled_from(ODD_IDS)) if chance(draw, 6) else f"toolu_{index}"
    return Tool(id_, draw(st.sampled_from(["f", "g"])), value, input_, parts, chance(draw, 4))


def tool_events(index: int, tool: Tool) -> list[Any]:
    events = [tool_start(index, tool.id, tool.name, tool.input), json_delta(index, "")]
    events += [json_delta(index, part) for part in tool.parts]
    return events if tool.drop_stop else [*events, block_stop(index)]


def other_events(index: int, kind: str) -> list[Any]:
    if kind == "text":
        return [block_start(index, block("text", text="")), text_delta(index, "hi"), block_stop(index)]
    start = block_start(index, block(kind, id="srvtoolu_01", name="web_search", input={}))
    return [start, json_delta(index, '{"query":'), json_delta(index, '"x"}'), block_stop(index)]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    kinds = draw(
        st.lists(st.sampled_from(["tool"] * 4 + ["text", "server_tool_use", "mcp_tool_use"]), min_size=1, max_size=5)
    )
    blocks: list[Any] = [draw(tools(index)) if kind == "tool" else kind for index, kind in enumerate(kinds)]
    per_block = [tool_events(i, b) if isinstance(b, Tool) else other_events(i, b) for i, b in enumerate(blocks)]
    events: list[Any] = [message_start()]
    starts: list[int] = []  # position of each block's start event
    stops: dict[int, int] = {}  # block index -> position of its stop event
    for index, block_events in enumerate(per_block):
        starts.append(len(events))
        if block_events[-1]["type"] == "content_block_stop":
            stops[index] = len(events) + len(block_events) - 1
        events.extend(block_events)
    tool_indexes = [i for i, b in enumerate(blocks) if isinstance(b, Tool)]
    scenario = Scenario(events, [b for b in blocks if isinstance(b, Tool)], "none", blocks=blocks)
    insertions: list[tuple[int, Any]] = []  # (position, event), applied from the end
    stopped = [index for index in tool_indexes if index in stops]
    if stopped and chance(draw, 4):  # a delta after the block's stop
        index = draw(st.sampled_from(stopped))
        insertions.append((stops[index] + 1, json_delta(index, "1")))
        scenario.stray = True
    earlier = [index for index in tool_indexes if index + 1 < len(blocks)]
    if earlier and chance(draw, 4):  # a delta back to an earlier tool block once a later block started
        index = draw(st.sampled_from(earlier))
        later = draw(st.integers(index + 1, len(blocks) - 1))
        insertions.append((starts[later] + 1, json_delta(index, "1")))
        scenario.stray = True
    if chance(draw, 10):  # a delta for a block that never started
        insertions.append((draw(st.integers(1, len(events))), json_delta(99, "{}")))
        scenario.stray = True
    for _ in range(draw(st.integers(0, 2))):
        insertions.append((draw(st.integers(0, len(events))), ping()))
    for position, event in sorted(insertions, key=lambda item: item[0], reverse=True):
        events.insert(position, event)
    end_kind = draw(st.sampled_from(["stop"] * 4 + ["reason_only"] * 2 + ["error_end", "error_mid", "eof"]))
    reason = draw(st.sampled_from(REASONS + ("tool_use",) * 4))
    if end_kind in ("stop", "error_end") or (end_kind == "reason_only" and reason is not None):
        if reason is not None:
            events.append(message_delta(reason))
        if end_kind != "reason_only":
            events.append(message_stop())
        scenario.end = "incomplete" if reason in INCOMPLETE else "complete"
    if end_kind == "error_end":
        events.append(error())
    if end_kind == "error_mid":
        events.insert(draw(st.integers(0, len(events))), error())
    if end_kind.startswith("error"):
        scenario.end = "failed"
    if chance(draw, 10):  # a second message spliced in, with a call of its own
        second = [message_start("msg_02"), *tool_events(0, Tool("toolu_z", "f", {}, {}, ["{}"], False))]
        events[draw(st.integers(1, len(events))) : 0] = second
        scenario.spliced = True
    return scenario


def assemble(events: list[Any], sdk: bool) -> AssemblyResult:
    adapter = AnthropicAssembler()
    for event in events:
        adapter.feed(construct_type(type_=RawMessageStreamEvent, value=event) if sdk else event)
    return adapter.finish()


STATE = {
    "complete": StreamState.COMPLETED,
    "incomplete": StreamState.COMPLETED,
    "failed": StreamState.FAILED,
    "none": StreamState.TRUNCATED,
}


@SETTINGS
@given(scenarios(), st.booleans())
def test_the_adapter_agrees_with_the_model(scenario: Scenario, sdk: bool) -> None:
    result = assemble(scenario.events, sdk)
    assert result.dispatchable is scenario.expected_dispatchable()
    if scenario.spliced:
        assert result.state is StreamState.TRUNCATED
        return
    assert result.state is STATE[scenario.end]
    expected = [(tool.id if isinstance(tool.id, str) and tool.id else None, tool.arguments) for tool in scenario.tools]
    assert [(call.id, call.arguments) for call in result.calls] == expected
    indexes = [index for index, b in enumerate(scenario.blocks) if isinstance(b, Tool)]
    assert [call.index for call in result.calls] == indexes


json_values = st.recursive(
    scalars | st.floats(allow_nan=False),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)
indexes = st.sampled_from([0, 1, 2, -1, "0", None, True, 1.5, MISSING])
event_types = st.sampled_from(
    [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
        "input_json",
    ]
)
content_blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["tool_use", "text", "server_tool_use"]) | json_values},
    optional={
        "id": st.sampled_from(["toolu_a", "toolu_b", ""]) | json_values,
        "name": json_values,
        "input": json_values,
    },
)
odd_events = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"type": event_types},
        optional={
            "index": indexes,
            "content_block": content_blocks | json_values,
            "delta": st.fixed_dictionaries(
                {"type": st.sampled_from(["input_json_delta", "text_delta"]) | json_values},
                optional={"partial_json": st.sampled_from(["{", "}", '"a":1', "", "\ud800\x00"]) | json_values},
            )
            | st.fixed_dictionaries({"stop_reason": st.sampled_from(REASONS) | json_values})
            | json_values,
            "message": st.fixed_dictionaries(
                {},
                optional={"id": json_values, "content": st.lists(content_blocks | json_values, max_size=3)},
            )
            | json_values,
        },
    ),
)


@SETTINGS
@given(st.lists(odd_events, max_size=25))
def test_arbitrary_json_shaped_events_never_raise_and_a_dispatchable_response_is_whole(events: list[Any]) -> None:
    adapter = AnthropicAssembler()
    for event in events:
        adapter.feed(event)
    result = adapter.finish()
    if result.dispatchable:
        assert result.state is StreamState.COMPLETED
        ids = [call.id for call in result.calls]
        assert all(isinstance(id_, str) and id_ for id_ in ids) and len(set(ids)) == len(ids)
        assert all(call.proposed and isinstance(call.name, str) for call in result.calls)
        assert all(isinstance(json.loads(call.arguments), dict) for call in result.calls)
    else:
        assert not any(call.proposed for call in result.calls)
