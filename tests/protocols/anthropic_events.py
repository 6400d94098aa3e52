"""Builders for Anthropic Messages stream events as plain dicts (the parsed SSE ``data:`` payloads).

The shapes follow the API's, with every field the ``anthropic`` SDK's models require, so
that the same dicts also validate into the SDK's typed events. ``MISSING`` leaves a key
out entirely (as opposed to sending ``null``).

A typical stream::

    stream(tool_call(0, "toolu_1", "get_weather", '{"city":', '"Paris"}'))
"""

from __future__ import annotations

from typing import Any

MISSING: Any = object()
"""Leave a key out of the event entirely (as opposed to sending ``null``)."""

PLACEHOLDER: Any = object()
"""The default ``input`` of a tool block: the ``{}`` placeholder the API sends on ``content_block_start``."""

MESSAGE_ID = "msg_01"


def _without_missing(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not MISSING}


def message_start(id: Any = MESSAGE_ID, content: Any = (), stop_reason: Any = None) -> dict[str, Any]:
    message = _without_missing(
        {
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": list(content) if isinstance(content, (list, tuple)) else content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
    )
    return {"type": "message_start", "message": message}


def tool_use(id: Any = "toolu_01", name: Any = "get_weather", input: Any = PLACEHOLDER) -> dict[str, Any]:
    """A ``tool_use`` content block; ``input`` defaults to the ``{}`` placeholder."""
    return _without_missing(
        {"type": "tool_use", "id": id, "name": name, "input": {} if input is PLACEHOLDER else input}
    )


def block(type: str, **fields: Any) -> dict[str, Any]:
    """Any other content block: ``block("text", text="")``, ``block("server_tool_use", id=..., ...)``."""
    return {"type": type, **fields}


def block_start(index: Any, content_block: Any) -> dict[str, Any]:
    return _without_missing({"type": "content_block_start", "index": index, "content_block": content_block})


def tool_start(
    index: Any = 0, id: Any = "toolu_01", name: Any = "get_weather", input: Any = PLACEHOLDER
) -> dict[str, Any]:
    return block_start(index, tool_use(id, name, input))


def json_delta(index: Any, partial_json: Any) -> dict[str, Any]:
    delta = _without_missing({"type": "input_json_delta", "partial_json": partial_json})
    return _without_missing({"type": "content_block_delta", "index": index, "delta": delta})


def text_delta(index: Any, text: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}


def block_stop(index: Any) -> dict[str, Any]:
    return _without_missing({"type": "content_block_stop", "index": index})


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
    *blocks: list[dict[str, Any]], stop_reason: Any = "tool_use", stop: bool = True, message_id: Any = MESSAGE_ID
) -> list[dict[str, Any]]:
    """A whole message: ``message_start``, the blocks' events, ``message_delta`` (unless
    ``stop_reason`` is ``MISSING``) and ``message_stop`` (unless ``stop`` is false)."""
    events = [message_start(message_id)]
    for events_of_block in blocks:
        events.extend(events_of_block)
    if stop_reason is not MISSING:
        events.append(message_delta(stop_reason))
    if stop:
        events.append(message_stop())
    return events
