"""Amazon Bedrock Converse as the layers above see it: :data:`BEDROCK_CONVERSE`.

Its adapter is :class:`~etf_otel.protocols._bedrock_converse.BedrockConverseAssembler`; this module
holds what is read outside a stream: which events are Converse's, how the next request's
``messages`` carry ``toolResult`` blocks, what a complete body and a second response look like in
a recording, how a ``toolUse`` block reads as a call, and how a slot is named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from etf_otel.core._history import HistoryCall, HistoryResult, Turn
from etf_otel.core._identity import ABSENT
from etf_otel.core._pairing_model import Answers, PairingRules
from etf_otel.protocols._base import CallFields, FollowUp, WireProtocol, field, last_position
from etf_otel.protocols._bedrock_converse import (
    EVENT_TYPES,
    SERVER_TOOL,
    STOP_REASONS,
    BedrockConverseAssembler,
    failure,
    is_body,
)
from etf_otel.protocols._bedrock_frames import decode, is_event_stream

__all__ = ["BEDROCK_CONVERSE"]

_ASSISTANT: Final = "assistant"


def _recognizes(event: object) -> bool:
    """An object with exactly one key, one of the stream's own event types."""
    return isinstance(event, dict) and len(event) == 1 and next(iter(event)) in EVENT_TYPES


def _messages(followup: object) -> object:
    return field(followup, "messages") if isinstance(followup, Mapping) else followup


def _blocks(message: object, kind: str) -> list[object]:
    """The members ``kind`` (``toolUse``, ``toolResult``) of a message's content blocks, in order."""
    content = field(message, "content")
    found: list[object] = []
    for block in content if isinstance(content, (list, tuple)) else ():
        value = field(block, kind)
        if value is not ABSENT and value is not None:
            found.append(value)
    return found


def _result_ids(followup: object) -> list[object] | None:
    """The ``toolUseId`` of each ``toolResult`` block after the last assistant message, in order.

    Only the first message after it, a ``role: "user"`` one, may answer the calls (Converse refuses
    results split over messages): a result in any other message is reported as ``None``, which
    linkage counts as ``orphaned_result`` (as it does an id that is not a string). ``followup`` is the
    next request's ``messages`` list, or the request (the kwargs of ``converse``) holding it.
    """
    messages = _messages(followup)
    if not isinstance(messages, (list, tuple)) or not all(isinstance(message, Mapping) for message in messages):
        return None
    last = last_position(messages, _ASSISTANT)
    after = 0 if last is None else last + 1
    ids: list[object] = []
    for position in range(after, len(messages)):
        message = messages[position]
        answers = position == after and field(message, "role") == "user"
        for result in _blocks(message, "toolResult"):
            call_id = field(result, "toolUseId")
            ids.append(call_id if answers and isinstance(call_id, str) else None)
    return ids


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _history(request: object) -> list[Turn] | None:
    """The ``messages`` of a request as turns: an assistant message with its client ``toolUse`` blocks,
    any other message with its ``toolResult`` blocks (``status: "error"`` marks an error). Only the
    message right after an assistant message may answer its calls (``answers_adjacent``)."""
    messages = _messages(request)
    if not isinstance(messages, (list, tuple)):
        return None
    turns: list[Turn] = []
    for at, message in enumerate(messages):
        if field(message, "role") == _ASSISTANT:
            calls = tuple(
                HistoryCall(_string(field(call, "toolUseId")), _string(field(call, "name")), _input(call))
                for call in _blocks(message, "toolUse")
                if field(call, "type") != SERVER_TOOL
            )
            turns.append(Turn(True, calls, at=at))
        else:
            results = tuple(
                HistoryResult(_string(field(result, "toolUseId")), error=field(result, "status") == "error")
                for result in _blocks(message, "toolResult")
            )
            turns.append(Turn(False, results=results, at=at))
    return turns


def _input(call: object) -> object:
    value = field(call, "input")
    return None if value is ABSENT else value


def _follow_up(messages: Sequence[object]) -> FollowUp | None:
    """``(position of the last assistant message, the ids its results answer)``; ``None`` without one,
    or when the messages are not of Converse's shape."""
    last = last_position(messages, _ASSISTANT)
    ids = None if last is None else _result_ids(list(messages))
    if last is None or ids is None:
        return None
    return last, [call_id if isinstance(call_id, str) else None for call_id in ids]


def _complete_body(event: object) -> str | None:
    """An object with ``output`` and ``stopReason``: what ``converse`` returns, not a stream event."""
    if isinstance(event, dict) and "output" in event and "stopReason" in event:
        return "a complete Converse body (output, stopReason)"
    return None


def _body_events(body: object) -> list[object] | None:
    """A complete body is judged as the one event it is (the adapter opens each call whole)."""
    return [body] if is_body(body) else None


def _ends(event: object) -> bool:
    if not isinstance(event, dict) or len(event) != 1:
        return False
    kind = next(iter(event))
    return kind == "messageStop" or (isinstance(kind, str) and failure(kind))


def _later_responses(events: Sequence[object]) -> list[int]:
    """A ``messageStart`` after a ``messageStop`` or a failure: another response, one after the other.

    Before that, a second ``messageStart`` is a splice inside one stream, which the adapter judges."""
    starts: list[int] = []
    ended = False
    for position, event in enumerate(events):
        if ended and isinstance(event, dict) and len(event) == 1 and "messageStart" in event:
            starts.append(position)
            ended = False
        elif _ends(event):
            ended = True
    return starts


def _binary_events(data: bytes) -> list[object] | None:
    """Raw ``application/vnd.amazon.eventstream`` bytes (a valid prelude first) in botocore's dict form."""
    return list(decode(data)) if is_event_stream(data) else None


def _slot_label(choice: int, index: int | None) -> str:
    return "no open call" if index is None else f"content block {index}"


def _event_slot(event: object) -> int | None:
    """The ``contentBlockIndex`` a block event names."""
    if not isinstance(event, dict) or len(event) != 1:
        return None
    (payload,) = event.values()
    key = payload.get("contentBlockIndex") if isinstance(payload, dict) else None
    return key if type(key) is int else None


def _call_fields(call: object) -> CallFields | None:
    """A ``toolUse`` block (``toolUseId``, ``name``, ``input``: the parsed value), or one wrapped in ``toolUse``."""
    tool = field(call, "toolUse")
    if tool is not ABSENT and tool is not None:
        call = tool
    call_id = field(call, "toolUseId")
    if call_id is ABSENT:
        return None
    return call_id, field(call, "name"), field(call, "input")


BEDROCK_CONVERSE: Final = WireProtocol(
    name="bedrock_converse",
    assembler=BedrockConverseAssembler,
    recognizes=_recognizes,
    result_ids=_result_ids,
    title="Amazon Bedrock Converse",
    finish_reasons=STOP_REASONS,
    followup_shape="the messages list, or the request object holding it",
    follow_up=_follow_up,
    history=_history,
    answers_adjacent=True,
    pairing=PairingRules(Answers.NEXT_TURN),  # toolResult blocks in the user message right after the toolUse
    complete_body=_complete_body,
    body_events=_body_events,
    later_responses=_later_responses,
    slot_label=_slot_label,
    call_fields=_call_fields,
    binary_events=_binary_events,
    request_path="/converse-stream",
    event_slot=_event_slot,
)
"""Amazon Bedrock Converse: slot key the ``contentBlockIndex``, identity the ``toolUseId`` of a block start."""
