"""The Anthropic Messages protocol as the layers above see it: :data:`ANTHROPIC_MESSAGES`.

Its adapter is :class:`~etf_otel.protocols._anthropic_messages.AnthropicAssembler`; this module
holds what is read outside a stream: which events are this protocol's, how the next request's
``messages`` carry ``tool_result`` blocks, what a complete body and a second message look
like in a recording, how a ``tool_use`` block reads as a call, and how a slot is named.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from etf_otel.core._history import HistoryCall, HistoryResult, Turn
from etf_otel.core._identity import ABSENT
from etf_otel.core._pairing_model import Answers, PairingRules, UniqueIds
from etf_otel.protocols._anthropic_messages import EVENT_TYPES, AnthropicAssembler
from etf_otel.protocols._base import CallFields, FollowUp, WireProtocol, field, last_position, typed_starts
from etf_otel.protocols._bodies import anthropic_body_events

__all__ = ["ANTHROPIC_MESSAGES"]


def _recognizes(event: object) -> bool:
    """An event object whose ``type`` is one of the stream's own (not ``error``, which is ambiguous)."""
    kind = field(event, "type")
    return isinstance(kind, str) and kind in EVENT_TYPES


def _result_ids(followup: object) -> list[object] | None:
    """The ``tool_use_id`` of each ``tool_result`` block after the last assistant message, in order.

    Only the first user message after it may answer the calls: a result in any later
    message is reported as ``None``, which linkage counts as ``orphaned_result`` (as it does
    an id that is not a string). ``followup`` is the next request's ``messages`` list, or
    the request object holding it.
    """
    messages = followup.get("messages") if isinstance(followup, dict) else followup
    if not isinstance(messages, list) or not all(isinstance(message, dict) for message in messages):
        return None
    last_assistant = max((at for at, message in enumerate(messages) if message.get("role") == "assistant"), default=-1)
    after = messages[last_assistant + 1 :]
    first_user = next((message for message in after if message.get("role") == "user"), None)
    ids: list[object] = []
    for message in after:
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    tool_use_id = block.get("tool_use_id")
                    ids.append(tool_use_id if message is first_user and isinstance(tool_use_id, str) else None)
    return ids


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _history(request: object) -> list[Turn] | None:
    """The ``messages`` of a request as turns: an assistant message with its ``tool_use`` blocks, any other
    message with its ``tool_result`` blocks (``is_error: true`` marks an error). Only the message right after
    an assistant message may answer its calls (:attr:`~etf_otel.protocols.WireProtocol.answers_adjacent`)."""
    messages = field(request, "messages") if isinstance(request, dict) else request
    if not isinstance(messages, (list, tuple)):
        return None
    turns: list[Turn] = []
    for at, message in enumerate(messages):
        content = field(message, "content")
        blocks = content if isinstance(content, (list, tuple)) else ()
        if field(message, "role") == "assistant":
            calls = tuple(
                HistoryCall(_string(field(block, "id")), _string(field(block, "name")), _input(block))
                for block in blocks
                if field(block, "type") == "tool_use"
            )
            turns.append(Turn(True, calls, at=at))
        else:
            results = tuple(
                HistoryResult(_string(field(block, "tool_use_id")), error=field(block, "is_error") is True)
                for block in blocks
                if field(block, "type") == "tool_result"
            )
            turns.append(Turn(False, results=results, at=at))
    return turns


def _input(block: object) -> object:
    value = field(block, "input")
    return None if value is ABSENT else value


def _plain(value: object) -> object:
    """A dict as it is; an SDK object as the fields it was given (``model_dump(exclude_unset=True)``)."""
    if type(value) is dict:
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(exclude_unset=True, warnings=False)
    return value


def _follow_up(messages: Sequence[object]) -> FollowUp | None:
    """``(position of the last assistant message, the results the request gives its calls)``.

    ``None`` when the request has no assistant message (it starts a conversation) or when its
    messages are not of the Messages API's shape. The results are those of :func:`_result_ids`.
    """
    last_assistant = last_position(messages, "assistant")
    if last_assistant is None:
        return None
    ids = _result_ids([_plain(message) for message in messages])
    if ids is None:
        return None
    return last_assistant, [call_id if isinstance(call_id, str) else None for call_id in ids]


def _complete_body(event: object) -> str | None:
    """``type: "message"``: stream events are ``message_start``, ``content_block_delta``, ..."""
    if isinstance(event, dict) and event.get("type") == "message":
        return "a complete Messages body (type: message)"
    return None


def _ended(event: dict[str, object]) -> bool:
    kind = event.get("type")
    if kind in ("message_stop", "error"):
        return True
    delta = event.get("delta")
    return kind == "message_delta" and isinstance(delta, dict) and delta.get("stop_reason") is not None


def _later_responses(events: Sequence[object]) -> list[int]:
    """A ``message_start`` after ``message_stop``, ``error`` or a ``message_delta`` with a ``stop_reason``."""
    return typed_starts(events, "message_start", _ended)


def _slot_label(choice: int, index: int | None) -> str:
    return "no open call" if index is None else f"content block {index}"


def _event_slot(event: object) -> int | None:
    """A content block's ``index``: the block events name their slot with it."""
    key = event.get("index") if isinstance(event, dict) else None
    return key if type(key) is int else None


def _call_fields(call: object) -> CallFields | None:
    """A ``tool_use`` block, or any call with an ``input`` and no ``arguments``: the parsed value.

    The registry asks the Chat Completions and Responses shapes first.
    """
    if field(call, "arguments") is not ABSENT:
        return None
    arguments = field(call, "input")
    if arguments is ABSENT:
        return None
    return field(call, "id"), field(call, "name"), arguments


ANTHROPIC_MESSAGES: Final = WireProtocol(
    name="anthropic_messages",
    assembler=AnthropicAssembler,
    recognizes=_recognizes,
    result_ids=_result_ids,
    title="Anthropic Messages",
    finish_reasons=frozenset(
        {
            "end_turn",
            "tool_use",
            "stop_sequence",
            "max_tokens",
            "model_context_window_exceeded",
            "refusal",
            "pause_turn",
        }
    ),
    followup_shape="the messages list, or the request object holding it",
    follow_up=_follow_up,
    history=_history,
    answers_adjacent=True,
    pairing=PairingRules(Answers.NEXT_TURN, unique_call_ids=UniqueIds.REQUEST),
    complete_body=_complete_body,
    body_events=anthropic_body_events,
    later_responses=_later_responses,
    slot_label=_slot_label,
    call_fields=_call_fields,
    request_path="/v1/messages",
    event_slot=_event_slot,
)
"""The Anthropic Messages protocol: slot key the content-block ``index``, identity the ``tool_use`` id."""
