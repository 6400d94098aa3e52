"""The protocol seam: protocols are found by name or detected from a first event, and the
Chat Completions end rule lives in its adapter, not in the slot model."""

from __future__ import annotations

import pytest

from etf_otel import ErrorCategory, IdentityRules, ResponseSlots, StreamState
from etf_otel.protocols import CHAT_COMPLETIONS, PROTOCOLS, StreamAssembler, WireProtocol, detect, get

from .chunks import chunk, fragment


def test_protocols_are_found_by_name_and_descriptions_pass_through() -> None:
    assert get("chat_completions") is CHAT_COMPLETIONS
    assert get(CHAT_COMPLETIONS) is CHAT_COMPLETIONS
    assert PROTOCOLS == {"chat_completions": CHAT_COMPLETIONS}


def test_an_unknown_protocol_name_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown protocol 'responses_v9'; choose one of: chat_completions"):
        get("responses_v9")


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"object": "chat.completion.chunk", "choices": []}, CHAT_COMPLETIONS),
        ("[DONE]", CHAT_COMPLETIONS),
        ({"type": "response.created"}, None),
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
