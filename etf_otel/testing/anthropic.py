"""Anthropic Messages wire events as plain dicts (the parsed SSE ``data:`` payloads).

The shapes follow the API's, with every field the ``anthropic`` SDK's models require, so that the
same dicts also validate into the SDK's typed events. :data:`MISSING` leaves a key out entirely
(as opposed to sending ``null``). Serve them with ``Script(events=..., named=True)``: the API
names each event with an ``event:`` line.

A typical stream::

    stream(tool_call(0, "toolu_1", "get_weather", '{"city":', '"Paris"}'))
"""

from __future__ import annotations

from typing import Any, Final

from etf_otel.testing._wire import MISSING, flatten, without_missing

__all__ = [
    "MESSAGE_ID",
    "MISSING",
    "MODEL",
    "PLACEHOLDER",
    "block",
    "block_start",
    "block_stop",
    "error",
    "json_delta",
    "message_delta",
    "message_start",
    "message_stop",
    "ping",
    "stream",
    "text_block",
    "text_delta",
    "tool_call",
    "tool_start",
    "tool_use",
]

PLACEHOLDER: Final[Any] = object()
"""The default ``input`` of a tool block: the ``{}`` placeholder the API sends on ``content_block_start``."""

MESSAGE_ID = "msg_01"
MODEL = "claude-test"


def message_start(
    id: Any = MESSAGE_ID, content: Any = (), stop_reason: Any = None, model: str = MODEL
) -> dict[str, Any]:  # the wire field is called id
    message = without_missing(
        {
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": list(content) if isinstance(content, (list, tuple)) else content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
    )
    return {"type": "message_start", "message": message}


def tool_use(id: Any = "toolu_01", name: Any = "get_weather", input: Any = PLACEHOLDER) -> dict[str, Any]:
    """A ``tool_use`` content block; ``input`` defaults to the ``{}`` placeholder."""
    return without_missing({"type": "tool_use", "id": id, "name": name, "input": {} if input is PLACEHOLDER else input})


def block(type: str, **fields: Any) -> dict[str, Any]:
    """Any other content block: ``block("text", text="")``, ``block("server_tool_use", id=..., ...)``."""
    return {"type": type, **fields}


def block_start(index: Any, content_block: Any) -> dict[str, Any]:
    return without_missing({"type": "content_block_start", "index": index, "content_block": content_block})


def tool_start(
    index: Any = 0, id: Any = "toolu_01", name: Any = "get_weather", input: Any = PLACEHOLDER
) -> dict[str, Any]:
    return block_start(index, tool_use(id, name, input))


def json_delta(index: Any, partial_json: Any) -> dict[str, Any]:
    delta = without_missing({"type": "input_json_delta", "partial_json": partial_json})
    return without_missing({"type": "content_block_delta", "index": index, "delta": delta})


def text_delta(index: Any, text: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}


def block_stop(index: Any) -> dict[str, Any]:
    return without_missing({"type": "content_block_stop", "index": index})


def message_delta(stop_reason: Any = "tool_use") -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": 20},
    }


def message_stop() -> dict[str, Any]:
    return {"type": "message_stop"}


def ping() -> dict[str, Any]:
    return {"type": "ping"}


def error(kind: str = "overloaded_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": "Overloaded"}}


def tool_call(
    index: int, id: Any = "toolu_01", name: Any = "get_weather", *parts: Any, input: Any = PLACEHOLDER
) -> list[dict[str, Any]]:
    """One ``tool_use`` block as the API streams it: start, the first ``""`` delta, ``parts``, stop."""
    deltas = [json_delta(index, part) for part in ("", *parts)]
    return [tool_start(index, id, name, input), *deltas, block_stop(index)]


def text_block(index: int, text: str = "Let me check.") -> list[dict[str, Any]]:
    return [block_start(index, block("text", text="")), text_delta(index, text), block_stop(index)]


def stream(
    *blocks: list[dict[str, Any]] | dict[str, Any],
    stop_reason: Any = "tool_use",
    stop: bool = True,
    message_id: Any = MESSAGE_ID,
    model: str = MODEL,
) -> list[dict[str, Any]]:
    """A whole message: ``message_start``, the blocks' events (lists are spliced in), ``message_delta``
    (unless ``stop_reason`` is ``MISSING``) and ``message_stop`` (unless ``stop`` is false)."""
    events = [message_start(message_id, model=model), *flatten(blocks)]
    if stop_reason is not MISSING:
        events.append(message_delta(stop_reason))
    if stop:
        events.append(message_stop())
    return events
