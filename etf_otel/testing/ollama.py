"""Ollama wire events: ``/api/chat`` chunks as the server writes them, one JSON object a line (plain dicts).

The shapes follow the server's own output and the ``ollama`` client's test recordings: every
chunk carries ``model``, ``created_at``, ``message`` and ``done``; a tool call arrives whole in
``message.tool_calls`` with ``function.arguments`` an object; the last chunk has ``done: true``,
``done_reason`` and the timing counters. Values are sent verbatim, so a test can send what a
misbehaving server or proxy sends (every call on ``index`` 0, no ``id``, arguments as a string).
:data:`MISSING` leaves a key out entirely. A complete non-streamed body is :func:`body`.

A typical stream (two calls of a newer server, each in its own chunk)::

    stream(chunk(call("get_a", {"a": 1}, id="call_1", index=0)), chunk(call("get_b", {"b": 2}, id="call_2", index=1)))
"""

from __future__ import annotations

from typing import Any, Final

from etf_otel.testing._wire import MISSING, flatten, without_missing

__all__ = ["CREATED_AT", "MISSING", "MODEL", "body", "call", "chunk", "done", "error", "stream"]

MODEL: Final = "llama3.2"
CREATED_AT: Final = "2025-06-02T10:14:07.123456Z"


def call(name: Any = MISSING, arguments: Any = MISSING, *, id: Any = MISSING, index: Any = MISSING) -> dict[str, Any]:
    """One tool call: ``{"id"?, "function": {"index"?, "name", "arguments"}}``."""
    return without_missing(id=id, function=without_missing(index=index, name=name, arguments=arguments))


def chunk(*calls: dict[str, Any], content: str = "", model: str = MODEL) -> dict[str, Any]:
    """One chunk that is not the last (``done: false``), its message holding ``calls`` when given."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return {"model": model, "created_at": CREATED_AT, "message": message, "done": False}


def done(reason: Any = "stop", *calls: dict[str, Any], model: str = MODEL) -> dict[str, Any]:
    """The last chunk: ``done: true``, ``done_reason`` (:data:`MISSING`: none, as servers before it) and counters."""
    last = chunk(*calls, model=model)
    last.update(
        without_missing(done=True, done_reason=reason),
        total_duration=812_000_000,
        load_duration=21_000_000,
        prompt_eval_count=162,
        prompt_eval_duration=95_000_000,
        eval_count=24,
        eval_duration=640_000_000,
    )
    return last


def body(*calls: dict[str, Any], reason: Any = "stop", content: str = "") -> dict[str, Any]:
    """A complete ``"stream": false`` body: one object with the whole message and ``done: true``."""
    whole = done(reason, *calls)
    whole["message"]["content"] = content
    return whole


def error(message: str = "an error was encountered while running the model") -> dict[str, Any]:
    """The in-band error line a stream may end with (the client raises ``ResponseError`` on it)."""
    return {"error": message}


def stream(*chunks: Any, reason: Any = "stop") -> list[dict[str, Any]]:
    """The chunks (lists spliced in), then the last chunk with ``reason``: a proper end."""
    return [*flatten(chunks), done(reason)]
