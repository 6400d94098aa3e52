"""What a span recorded of the messages sent to the model: the ids its tool messages answer, and the rounds of
its history (each assistant turn's call ids, and the tool messages after it), from which the checks find the
turn those tool messages answer once the whole input's proposals are known (:func:`scope`).

Read from ``gen_ai.tool.message`` events and from ``gen_ai.input.messages`` in the usual shapes: Chat
(``role: tool`` with ``tool_call_id``; an assistant's ``tool_calls[].id``), the GenAI semantic conventions
(``parts`` of type ``tool_call_response`` / ``tool_call`` with an ``id``) and Anthropic (an assistant's
``content`` blocks of type ``tool_use``). ``sql/audit_findings.sql`` reads the same shapes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "ATTR_INPUT_MESSAGES",
    "EVENT_TOOL_MESSAGE",
    "Round",
    "event_message_ids",
    "input_messages",
    "rounds",
    "scope",
]

EVENT_TOOL_MESSAGE = "gen_ai.tool.message"
"""Read, never emitted by etf-otel (so not in ``attributes``): a tool message recorded as an event."""
ATTR_INPUT_MESSAGES = "gen_ai.input.messages"
"""Read, never emitted by etf-otel (so not in ``attributes``): the messages sent to the model."""


class Round(NamedTuple):
    """An assistant turn of a recorded history and what follows it: the call ids it carries (none for a text
    turn, and for the messages before the first assistant turn) and the ids answered by the tool messages
    after it, up to the next assistant turn."""

    calls: tuple[str, ...]
    answers: tuple[str, ...]


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


def event_message_ids(events: Sequence[tuple[str, Mapping[str, object]]]) -> list[str]:
    """Ids answered by tool messages recorded as ``gen_ai.tool.message`` events (no position: always read)."""
    ids: list[str] = []
    for name, event_attributes in events:
        if name == EVENT_TOOL_MESSAGE:
            value = _string(event_attributes.get("gen_ai.tool.call.id")) or _string(event_attributes.get("id"))
            if value:
                ids.append(value)
    return ids


def rounds(messages: list[Any]) -> tuple[Round, ...]:
    """The rounds of a recorded history (:class:`Round`), the messages before the first assistant turn first;
    ``()`` when it has no tool message."""
    found: list[Round] = []
    calls: tuple[str, ...] = ()
    answers: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "assistant":
            found.append(Round(calls, tuple(answers)))
            calls, answers = tuple(_call_ids(message)), []
        elif role == "tool":
            direct = _string(message.get("tool_call_id"))
            answers += ([direct] if direct else []) + _part_ids(message, "parts", "tool_call_response")
    found.append(Round(calls, tuple(answers)))
    return tuple(found) if any(entry.answers for entry in found) else ()


def _call_ids(message: dict[str, Any]) -> list[str]:
    ids: list[str] = []
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        found = (_string(call.get("id")) for call in calls if isinstance(call, dict))
        ids += [value for value in found if value]
    return ids + _part_ids(message, "parts", "tool_call") + _part_ids(message, "content", "tool_use")


def scope(history: Sequence[Round], proposed: Callable[[str], bool]) -> tuple[tuple[str, ...], list[str]]:
    """The answered turn's call ids and the tool-message ids judged against it (AGENT-STACKS 11.6, as the live
    rule ``etf_otel.core._history.judge_history`` reads a request).

    The answered turn is the last assistant turn carrying a call id that some span ``proposed``: a turn whose
    ids no span proposed (a framework's own round, appended after the answered one) is passed over; when no
    turn carries a proposed id, the last turn with calls. Its answers are the tool messages up to the next
    assistant turn. Of the tool messages after a later assistant turn, those answering a call of a later turn
    belong to that later round (the framework made up the call and answered it: not judged here); the rest
    answer no call of those rounds and are judged against the answered turn. Earlier rounds were judged with
    the responses they answered. With no turn carrying calls, every tool message is judged.
    """
    with_calls = [position for position, entry in enumerate(history) if entry.calls]
    if not with_calls:
        return (), [answer for entry in history for answer in entry.answers]
    answered = next(
        (position for position in reversed(with_calls) if any(proposed(call) for call in history[position].calls)),
        with_calls[-1],
    )
    judged = list(history[answered].answers)
    later: set[str] = set()
    for entry in history[answered + 1 :]:
        later.update(entry.calls)
        judged += [answer for answer in entry.answers if answer not in later]
    return history[answered].calls, judged
