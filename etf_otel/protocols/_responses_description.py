"""The OpenAI Responses protocol as the layers above see it: :data:`RESPONSES`.

Its adapter is :class:`~etf_otel.protocols._responses.ResponsesAssembler`; this module holds
what is read outside a stream: which events are this protocol's, how a next request's
``input`` carries results, what a complete body and a second response look like in a
recording, how a ``function_call`` item reads as a call, and how a slot is named.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from etf_otel.core._history import HistoryCall, HistoryResult, Turn
from etf_otel.core._identity import ABSENT
from etf_otel.core._pairing_model import Answers, PairingRules
from etf_otel.protocols._base import CallFields, WireProtocol, field, typed_starts
from etf_otel.protocols._bodies import responses_body_events
from etf_otel.protocols._responses import NOT_OBJECTS, ResponsesAssembler

__all__ = ["RESPONSES"]

_ENDS: Final = (
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
)  # a tuple: a `type` that is an object or array is compared, never hashed


def _recognizes(event: object) -> bool:
    """An event object whose ``type`` starts with ``response.``. The flat ``error`` event is not claimed:
    Anthropic streams send an ``error`` event too, and a stream that starts with an error holds no call
    to check either way."""
    if event is None or isinstance(event, NOT_OBJECTS):
        return False
    kind = field(event, "type")
    return isinstance(kind, str) and kind.startswith("response.")


def _result_ids(followup: object) -> list[object] | None:
    """``call_id`` of every ``function_call_output`` item of the next request's ``input``, in order.

    ``followup`` is that ``input`` list, or the request object holding it. A text ``input`` is a
    request that answers nothing (``[]``); anything else is not that shape (``None``). Items may
    be SDK objects (``input += response.output`` is the common way to continue).
    """
    items = field(followup, "input") if isinstance(followup, dict) else followup
    if isinstance(items, str):
        return []
    if not isinstance(items, list):
        return None
    ids: list[object] = []
    for item in items:
        if item is not None and not isinstance(item, NOT_OBJECTS) and field(item, "type") == "function_call_output":
            call_id = field(item, "call_id")
            ids.append(None if call_id is ABSENT else call_id)
    return ids


_OUTPUT_TYPES: Final = frozenset({"reasoning", "mcp_list_tools", "mcp_approval_request", "compaction"})
"""Items a response outputs besides assistant messages and ``*_call`` items: part of an assistant turn."""


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _history(request: object) -> list[Turn] | None:
    """The ``input`` of a request as turns: each run of output items (assistant messages, reasoning,
    ``*_call`` items) one assistant turn with its ``function_call`` items; a ``function_call_output``
    item a turn with the result it carries; any other item a turn without results. A text ``input`` is
    one user turn."""
    items = field(request, "input") if isinstance(request, dict) else request
    if isinstance(items, str):
        return [Turn(False)]
    if not isinstance(items, (list, tuple)):
        return None
    turns: list[Turn] = []
    calls: list[HistoryCall] | None = None
    start = 0
    for at, item in enumerate(items):
        if item is None or isinstance(item, NOT_OBJECTS):
            continue
        kind = field(item, "type")
        if field(item, "role") == "assistant" or (
            isinstance(kind, str) and (kind in _OUTPUT_TYPES or kind.endswith("_call"))
        ):
            if calls is None:
                calls, start = [], at
            if kind == "function_call":
                call_id, arguments = _string(field(item, "call_id")), field(item, "arguments")
                calls.append(
                    HistoryCall(
                        call_id,
                        _string(field(item, "name")),
                        None if arguments is ABSENT else arguments,
                        call_id is not None and call_id == field(item, "id"),
                    )
                )
            continue
        if calls is not None:
            turns.append(Turn(True, tuple(calls), at=start))
            calls = None
        if kind == "function_call_output":
            turns.append(Turn(False, results=(HistoryResult(_string(field(item, "call_id"))),), at=at))
        else:
            turns.append(Turn(False, at=at))
    if calls is not None:
        turns.append(Turn(True, tuple(calls), at=start))
    return turns


def _holds_calls(request: object) -> bool | None:
    """A request with a ``previous_response_id`` or a ``conversation`` continues what the API stored: its
    outputs may answer calls it does not carry. A bare ``input`` list cannot tell (``None``)."""
    if not isinstance(request, dict):
        return None
    return any(request.get(key) not in (None, "") for key in ("previous_response_id", "conversation"))


def _complete_body(event: object) -> str | None:
    """``object: "response"`` without a ``type``: every stream event has one."""
    if isinstance(event, dict) and event.get("object") == "response" and event.get("type") is None:
        return "a complete Responses body (object: response)"
    return None


def _later_responses(events: Sequence[object]) -> list[int]:
    """A ``response.created`` after ``response.completed``, ``.incomplete``, ``.failed`` or ``error``."""
    return typed_starts(events, "response.created", lambda event: event.get("type") in _ENDS)


def _slot_label(choice: int, index: int | None) -> str:
    return "no open call" if index is None else f"output_index {index}"


def _call_fields(call: object) -> CallFields | None:
    """A ``function_call`` output item: its ``call_id`` is the call's id, its ``id`` the item's alias."""
    if field(call, "type") != "function_call":
        return None
    return field(call, "call_id"), field(call, "name"), field(call, "arguments")


def _event_slot(event: object) -> int | None:
    key = event.get("output_index") if isinstance(event, dict) else None
    return key if type(key) is int else None


def _states_arguments(event: object) -> bool:
    """``function_call_arguments.done`` carries the whole arguments; ``output_item.done`` the whole item."""
    if not isinstance(event, dict):
        return False
    kind = event.get("type")
    return kind == "response.function_call_arguments.done" or (
        kind == "response.output_item.done" and isinstance(event.get("item"), dict)
    )


RESPONSES: Final = WireProtocol(
    name="responses",
    assembler=ResponsesAssembler,
    recognizes=_recognizes,
    result_ids=_result_ids,
    title="OpenAI Responses",
    finish_reasons=frozenset({"max_output_tokens", "content_filter"}),
    followup_shape="the input list, or the request object holding it",
    history=_history,
    pairing=PairingRules(Answers.ANYWHERE, container="input"),
    holds_calls=_holds_calls,
    complete_body=_complete_body,
    body_events=responses_body_events,
    later_responses=_later_responses,
    slot_label=_slot_label,
    call_fields=_call_fields,
    request_path="/v1/responses",
    event_slot=_event_slot,
    states_arguments=_states_arguments,
)
"""The Responses protocol: slot key ``output_index``, identity ``item.call_id`` (never the item id)."""
