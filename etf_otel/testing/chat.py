"""Chat Completions wire events: ``chat.completion.chunk`` objects as providers stream them (plain dicts).

Each builder returns the parsed JSON of one SSE ``data:`` payload, with the fields the ``openai`` SDK
requires, so the same dict feeds an assembler directly, validates into the SDK's typed chunk, or
goes on the wire through :class:`~etf_otel.testing.LocalChatServer`. Fragments are sent verbatim,
without validation: a test can send exactly what a misbehaving provider sends (``"id": None``, no
``index``, ``arguments`` not a string). :data:`MISSING` leaves a key out entirely.

A typical stream::

    finished(chunk(fragment(0, "call_1", "get_weather", '{"city":')), chunk(fragment(0, arguments='"Paris"}')))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from etf_otel.protocols._chat_completions import DONE
from etf_otel.testing._wire import MISSING

__all__ = ["DONE", "MISSING", "case_stream", "chunk", "finished", "fragment"]

_CREATED = 1_700_000_000
"""A fixed ``created`` timestamp: chunks are reproducible byte for byte across runs."""


def fragment(
    index: Any = 0,
    id: Any = MISSING,  # the wire field is called id
    name: Any = MISSING,
    arguments: Any = MISSING,
    **extra: Any,
) -> dict[str, Any]:
    """One entry of ``delta.tool_calls``; ``extra`` adds other keys as given (``type="function"``)."""
    out: dict[str, Any] = {} if index is MISSING else {"index": index}
    if id is not MISSING:
        out["id"] = id
    function = {key: value for key, value in (("name", name), ("arguments", arguments)) if value is not MISSING}
    if function:
        out["function"] = function
    out.update(extra)
    return out


def chunk(
    *fragments: dict[str, Any],
    tool_calls: Sequence[Any] | None = None,
    content: str | None = None,
    finish_reason: str | None = None,
    choice: int = 0,
    id: str = "chatcmpl-1",  # the response id; tool-call ids belong in the fragments
    model: str = "etf-demo",
    created: int = _CREATED,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with a single choice.

    The ``fragments`` (or ``tool_calls``, placed verbatim) go to ``delta.tool_calls``; without
    either, and without ``content``, the delta is empty (the finishing chunk's shape).
    """
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if fragments:
        delta["tool_calls"] = list(fragments)
    elif tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": choice, "delta": delta, "finish_reason": finish_reason}],
    }


def finished(*chunks: dict[str, Any], finish_reason: str = "tool_calls", **fields: Any) -> list[Any]:
    """The chunks followed by a proper end: a chunk with ``finish_reason``, then ``[DONE]``.

    ``fields`` (``id``, ``model``, ``created``) shape the finishing chunk like the others.
    """
    return [*chunks, chunk(finish_reason=finish_reason, **fields), DONE]


def case_stream(continuation_id: Any) -> list[Any]:
    """The case study's stream: ``continuation_id`` :data:`MISSING` is the control, ``None`` the target."""
    return finished(
        chunk(fragment(0, "call-a", "read_page", '{"page":')),
        chunk(fragment(0, continuation_id, arguments="1}")),
    )
