"""OpenAI Responses wire events as the API streams them (plain dicts).

Every builder returns the event as parsed JSON, with the fields the ``openai`` SDK requires, so
that the same dict also validates into the SDK's typed event. :data:`MISSING` leaves a key out
entirely (as opposed to sending ``null``). :func:`call` and :func:`stream` build the usual
sequences; :func:`numbered` sets ``sequence_number`` in order. Serve them with
``Script(events=..., named=True)``: the API names each event with an ``event:`` line.

A typical stream::

    stream(call(0, "call_1", "get_weather", ['{"city":', '"Paris"}'], item_id="fc_1"))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from etf_otel.testing._wire import MISSING, flatten, without_missing

__all__ = [
    "MISSING",
    "added",
    "arguments_done",
    "call",
    "completed",
    "created",
    "delta",
    "error",
    "failed",
    "flatten",
    "function_call",
    "in_progress",
    "incomplete",
    "item_done",
    "message_item",
    "numbered",
    "response",
    "stream",
    "text_delta",
    "web_search_item",
]

_Event = dict[str, Any]


def response(
    id: Any = "resp_1", status: str = "in_progress", output: Any = MISSING, model: str = "etf-test", **extra: Any
) -> _Event:  # the wire field is called id
    """The ``response`` object of the lifecycle events (the SDK's required fields included)."""
    return without_missing(
        id=id,
        object="response",
        created_at=0,
        model=model,
        status=status,
        output=[] if output is MISSING else output,
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
        **extra,
    )


def created(id: Any = "resp_1") -> _Event:  # the wire field is called id
    return {"type": "response.created", "sequence_number": 0, "response": response(id)}


def in_progress(id: Any = "resp_1") -> _Event:  # the wire field is called id
    return {"type": "response.in_progress", "sequence_number": 0, "response": response(id)}


def function_call(
    call_id: Any = "call_1",
    name: Any = "f",
    arguments: Any = "",
    id: Any = MISSING,  # the wire field is called id
    status: Any = MISSING,
) -> _Event:
    """A ``function_call`` output item; ``id`` (``fc_...``) defaults to absent, ``call_id`` is identity."""
    return without_missing(type="function_call", id=id, call_id=call_id, name=name, arguments=arguments, status=status)


def message_item(id: Any = "msg_1", text: str = "") -> _Event:  # the wire field is called id
    """An assistant ``message`` output item (not a slot)."""
    content = [{"type": "output_text", "text": text, "annotations": []}] if text else []
    return {"type": "message", "id": id, "role": "assistant", "status": "in_progress", "content": content}


def web_search_item(id: Any = "ws_1") -> _Event:  # the wire field is called id
    """A built-in ``web_search_call`` item: the provider runs it, it is not a slot."""
    return {"type": "web_search_call", "id": id, "status": "in_progress", "action": {"type": "search", "query": "q"}}


def added(index: Any = 0, item: Any = MISSING, **function_fields: Any) -> _Event:
    """``response.output_item.added``; without ``item``, a function_call built from ``function_fields``."""
    return without_missing(
        type="response.output_item.added",
        sequence_number=0,
        output_index=index,
        item=function_call(**function_fields) if item is MISSING else item,
    )


def item_done(index: Any = 0, item: Any = MISSING, **function_fields: Any) -> _Event:
    """``response.output_item.done``; without ``item``, a completed function_call from ``function_fields``."""
    if item is MISSING:
        item = function_call(**{"status": "completed", **function_fields})
    return without_missing(type="response.output_item.done", sequence_number=0, output_index=index, item=item)


def delta(index: Any = 0, text: Any = "", item_id: Any = MISSING) -> _Event:
    return without_missing(
        type="response.function_call_arguments.delta",
        sequence_number=0,
        output_index=index,
        item_id=item_id,
        delta=text,
    )


def arguments_done(index: Any = 0, arguments: Any = "{}", item_id: Any = MISSING, name: Any = MISSING) -> _Event:
    """``response.function_call_arguments.done`` (``name`` is carried by the newer API only)."""
    return without_missing(
        type="response.function_call_arguments.done",
        sequence_number=0,
        output_index=index,
        item_id=item_id,
        arguments=arguments,
        name=name,
    )


def text_delta(index: int = 0, text: str = "hi", item_id: str = "msg_1") -> _Event:
    return {
        "type": "response.output_text.delta",
        "sequence_number": 0,
        "output_index": index,
        "content_index": 0,
        "item_id": item_id,
        "delta": text,
        "logprobs": [],
    }


def completed(output: Any = MISSING, id: Any = "resp_1") -> _Event:  # the wire field is called id
    return {"type": "response.completed", "sequence_number": 0, "response": response(id, "completed", output)}


def incomplete(reason: Any = "max_output_tokens", output: Any = MISSING, id: Any = "resp_1") -> _Event:
    details = None if reason is MISSING else {"reason": reason}
    body = response(id, "incomplete", output, incomplete_details=details)
    return {"type": "response.incomplete", "sequence_number": 0, "response": body}


def failed(id: Any = "resp_1") -> _Event:  # the wire field is called id
    body = response(id, "failed", error={"code": "server_error", "message": "boom"})
    return {"type": "response.failed", "sequence_number": 0, "response": body}


def error(code: Any = "server_error", message: str = "boom") -> _Event:
    """The flat ``error`` event (no ``response`` in it)."""
    return {"type": "error", "sequence_number": 0, "code": code, "message": message, "param": None}


def call(
    index: int = 0,
    call_id: Any = "call_1",
    name: Any = "f",
    pieces: Iterable[Any] = ('{"a":', "1}"),
    item_id: Any = MISSING,
    *,
    added_call_id: Any = MISSING,
) -> list[_Event]:
    """One call streamed the way the official API does: added (``""``), deltas, both done events.

    ``added_call_id``, if given, is the ``call_id`` of the added item only (a provider that changes it).
    """
    pieces = list(pieces)
    whole = "".join(piece for piece in pieces if isinstance(piece, str))
    first_id = call_id if added_call_id is MISSING else added_call_id
    return [
        added(index, call_id=first_id, name=name, arguments="", id=item_id),
        *(delta(index, piece, item_id) for piece in pieces),
        arguments_done(index, whole, item_id),
        item_done(index, call_id=call_id, name=name, arguments=whole, id=item_id),
    ]


def stream(*events: Any, end: _Event | None = MISSING, id: Any = "resp_1") -> list[_Event]:
    """``response.created``, the events (lists, nested too, are spliced in), then ``end``: by default
    ``completed``, ``None`` for none (a stream cut before its terminal event)."""
    last = [completed(id=id)] if end is MISSING else [] if end is None else [end]
    return numbered([created(id), *flatten(events), *last])


def numbered(events: Iterable[_Event]) -> list[_Event]:
    """The events with ``sequence_number`` 0, 1, 2, ... (objects only; others pass through)."""
    out = []
    for number, event in enumerate(events):
        out.append({**event, "sequence_number": number} if isinstance(event, dict) else event)
    return out
