"""The protocol seam: protocols are found by name or detected from a first event, and the
Chat Completions end rule lives in its adapter, not in the slot model."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from etf_otel import ABSENT, AssemblyResult, ErrorCategory, IdentityRules, ResponseSlots, StreamState
from etf_otel.protocols import CHAT_COMPLETIONS, PROTOCOLS, StreamAssembler, WireProtocol, detect, get
from etf_otel.testing.chat import chunk, fragment

from ..conftest import Captured


def test_protocols_are_found_by_name_and_descriptions_pass_through() -> None:
    assert get("chat_completions") is CHAT_COMPLETIONS
    assert get(CHAT_COMPLETIONS) is CHAT_COMPLETIONS
    assert list(PROTOCOLS) == [
        "chat_completions",
        "responses",
        "anthropic_messages",
        "gemini",
        "bedrock_converse",
        "ollama",
    ]
    assert all(get(name).name == name for name in PROTOCOLS)


def test_an_unknown_protocol_name_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown protocol 'responses_v9'; choose one of: chat_completions"):
        get("responses_v9")


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"object": "chat.completion.chunk", "choices": []}, CHAT_COMPLETIONS),
        ("[DONE]", CHAT_COMPLETIONS),
        ({"type": "chat.completion"}, None),
        ({"foo": 1}, None),
        ([1, 2], None),
        (None, None),
    ],
)
def test_detection_from_the_first_event(event: object, expected: WireProtocol | None) -> None:
    assert detect(event) is expected


def test_the_chat_adapter_is_a_stream_assembler_over_its_own_slots() -> None:
    adapter: StreamAssembler = CHAT_COMPLETIONS.assembler(rules=IdentityRules.for_rules())
    adapter.feed(chunk(fragment(0, "call-1", "f", "{}")))
    assert isinstance(adapter.slots, ResponseSlots)
    assert not adapter.finished
    adapter.feed_done()
    assert adapter.finish().dispatchable
    assert adapter.finished


def test_a_finish_reason_alone_does_not_end_the_slot_model() -> None:
    """The slot model records reasons; only the adapter's rule ends a response."""
    slots = ResponseSlots()
    slots.fragment(0, 0, "call-1", "f", "{}")
    slots.finish_reason(0, "tool_calls")
    result = slots.finish()
    assert result.state is StreamState.TRUNCATED
    assert ErrorCategory.TRUNCATED_STREAM in result.categories
    assert result.finish_reasons == ("tool_calls",)


@pytest.mark.parametrize(
    ("reasons", "done", "state"),
    [
        ({0: "tool_calls", 1: "tool_calls"}, False, StreamState.COMPLETED),
        ({0: "tool_calls"}, False, StreamState.TRUNCATED),  # choice 1 has calls and no reason
        ({}, True, StreamState.COMPLETED),
        ({}, False, StreamState.TRUNCATED),
    ],
)
def test_chat_end_rule_every_choice_with_calls_needs_its_reason_unless_done(
    reasons: dict[int, str], done: bool, state: StreamState
) -> None:
    adapter = CHAT_COMPLETIONS.assembler(rules=IdentityRules.for_rules())
    adapter.feed(chunk(fragment(0, "call-1", "f", "{}"), choice=0))
    adapter.feed(chunk(fragment(0, "call-2", "g", "{}"), choice=1))
    for choice, reason in reasons.items():
        adapter.feed(chunk(finish_reason=reason, choice=choice))
    if done:
        adapter.feed("[DONE]")
    assert adapter.finish().state is state


class _ToyProtocol:
    """A made-up wire protocol, to show that a new protocol is one adapter and nothing more.

    Events: ``{"open": key, "id": ..., "name": ...}``, ``{"delta": key, "text": ...}``,
    ``{"close": key}`` and ``{"end": reason}``.
    """

    def __init__(self, *, rules: IdentityRules, clock: Callable[[], int] | None = None, **_: object) -> None:
        self._slots = ResponseSlots(rules, clock=clock)

    @property
    def slots(self) -> ResponseSlots:
        return self._slots

    @property
    def finished(self) -> bool:
        return self._slots.finished

    def feed(self, event: object) -> None:
        if not isinstance(event, dict):
            return
        if "open" in event:
            self._slots.fragment(0, event["open"], event.get("id", ABSENT), event.get("name", ABSENT))
        elif "delta" in event:
            self._slots.fragment(0, event["delta"], arguments=event["text"])
        elif "close" in event:
            self._slots.close(0, event["close"])
        elif "end" in event:
            self._slots.finish_reason(0, event["end"])
            self._slots.end()

    def feed_done(self) -> None:
        return None

    def finish(self) -> AssemblyResult:
        return self._slots.finish()


TOY = WireProtocol(name="toy", assembler=_ToyProtocol, recognizes=lambda event: False, result_ids=lambda _: None)


def test_a_new_protocol_is_one_adapter_the_instrumentation_drives(captured: Captured) -> None:
    events = [
        {"open": 0, "id": "toy-1", "name": "read_page"},
        {"delta": 0, "text": '{"page":'},
        {"delta": 0, "text": "1}"},
        {"close": 0},
        {"end": "tool_use"},
    ]
    consumed = list(captured.instrumentation().stream(iter(events), protocol=TOY))
    assert consumed == events
    (call_span,) = captured.spans("assemble_tool_call")
    assert call_span.attributes is not None
    assert call_span.attributes["gen_ai.tool.call.id"] == "toy-1"
    assert call_span.attributes["etf.tool_call.verdict"] == "proposed"
    (response_span,) = captured.spans("assemble_response")
    assert response_span.attributes is not None
    assert response_span.attributes["etf.stream.state"] == "completed"


def test_the_observer_takes_a_protocol_by_name(captured: Captured) -> None:
    observer = captured.instrumentation().observer(protocol="chat_completions")
    observer.observe(chunk(fragment(0, "call-1", "f", "{}"), finish_reason="tool_calls"))
    result = observer.finish()
    assert result is not None and result.dispatchable


@pytest.mark.parametrize(
    ("followup", "ids"),
    [
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": []},
                {"role": "tool", "tool_call_id": "call-1"},
                {"role": "tool", "tool_call_id": None},
            ],
            ["call-1", None],
        ),
        ({"model": "m", "messages": [{"role": "tool", "tool_call_id": "call-2"}]}, ["call-2"]),
        ([{"role": "tool", "tool_call_id": "old"}, {"role": "assistant"}, {"role": "user"}], []),
        ({"input": []}, None),
        ([1, 2], None),
        ("messages", None),
    ],
)
def test_chat_results_are_the_tool_messages_after_the_last_assistant_message(
    followup: object, ids: list[object] | None
) -> None:
    assert CHAT_COMPLETIONS.result_ids(followup) == ids
