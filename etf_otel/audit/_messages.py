"""What a span recorded of the messages sent to the model: the ids its tool messages answer, and the call
ids of its last assistant turn (the evidence of which response those tool messages answer).

Read from ``gen_ai.tool.message`` events and from ``gen_ai.input.messages`` in the usual shapes: Chat
(``role: tool`` with ``tool_call_id``; an assistant's ``tool_calls[].id``), the GenAI semantic conventions
(``parts`` of type ``tool_call_response`` / ``tool_call`` with an ``id``) and Anthropic (an assistant's
``content`` blocks of type ``tool_use``). ``sql/audit_findings.sql`` reads the same shapes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ATTR_INPUT_MESSAGES", "EVENT_TOOL_MESSAGE", "assistant_call_ids", "input_messages", "tool_message_ids"]

EVENT_TOOL_MESSAGE = "gen_ai.tool.message"
"""Read, never emitted by etf-otel (so not in ``attributes``): a tool message recorded as an event."""
ATTR_INPUT_MESSAGES = "gen_ai.input.messages"
"""Read, never emitted by etf-otel (so not in ``attributes``): the messages sent to the model."""


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def input_messages(attributes: Mapping[str, object]) -> list[Any]:
    """``gen_ai.input.messages`` as a list (a JSON string is parsed; anything else is no messages)."""
    messages = attributes.get(ATTR_INPUT_MESSAGES)
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except (ValueError, RecursionError):
            messages = None
    return messages if isinstance(messages, list) else []


def _part_ids(message: dict[str, Any], key: str, kind: str) -> list[str]:
    parts = message.get(key)
    if not isinstance(parts, list):
        return []
    found = (_string(part.get("id")) for part in parts if isinstance(part, dict) and part.get("type") == kind)
    return [value for value in found if value]


def tool_message_ids(events: Sequence[tuple[str, Mapping[str, object]]], messages: list[Any]) -> list[str]:
    """Ids answered by ``role: tool`` messages recorded on a span, in the usual shapes.

    Of the messages, only those after the answered turn (:func:`_answered_turn`, the last assistant message
    with calls) are read: a stateless history repeats every earlier round, whose results answered earlier
    responses and were judged with them (AGENT-STACKS 11.6). An assistant message after the answered turn
    carries no calls (else it would be the answered turn), so a tool message after it is still read and judged
    against the answered turn: no other turn has a call it could answer. ``sql/audit_findings.sql`` reads the
    same messages.
    """
    ids: list[str] = []
    for name, event_attributes in events:
        if name == EVENT_TOOL_MESSAGE:
            value = _string(event_attributes.get("gen_ai.tool.call.id")) or _string(event_attributes.get("id"))
            if value:
                ids.append(value)
    for message in messages[_answered_turn(messages) + 1 :]:
        if not isinstance(message, dict) or message.get("role") != "tool":
            continue
        direct = _string(message.get("tool_call_id"))
        ids += ([direct] if direct else []) + _part_ids(message, "parts", "tool_call_response")
    return ids


def _answered_turn(messages: list[Any]) -> int:
    """The position of the last assistant message with calls (docs/protocols.md, "Linkage across turns"): the
    turns before it belong to earlier responses; ``-1`` when there is none (every message is read)."""
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if isinstance(message, dict) and message.get("role") == "assistant" and _call_ids(message):
            return position
    return -1


def _call_ids(message: dict[str, Any]) -> list[str]:
    ids: list[str] = []
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        found = (_string(call.get("id")) for call in calls if isinstance(call, dict))
        ids += [value for value in found if value]
    return ids + _part_ids(message, "parts", "tool_call") + _part_ids(message, "content", "tool_use")


def assistant_call_ids(messages: list[Any]) -> list[str]:
    """The call ids of the last assistant message with calls (Chat ``tool_calls``, semconv ``parts``,
    Anthropic ``content``): the answered turn; none when there is no such message."""
    answered = _answered_turn(messages)
    return _call_ids(messages[answered]) if answered >= 0 else []
