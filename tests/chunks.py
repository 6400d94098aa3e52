"""Builders for Chat Completions chunks as providers stream them (plain dicts)."""

from __future__ import annotations

from typing import Any

MISSING: Any = object()
"""Leave a key out of the fragment entirely (as opposed to sending ``null``)."""


def fragment(index: Any = 0, id: Any = MISSING, name: Any = MISSING, arguments: Any = MISSING) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if index is not MISSING:
        out["index"] = index
    if id is not MISSING:
        out["id"] = id
    function: dict[str, Any] = {}
    if name is not MISSING:
        function["name"] = name
    if arguments is not MISSING:
        function["arguments"] = arguments
    if function:
        out["function"] = function
    return out


def chunk(*fragments: dict[str, Any], finish_reason: str | None = None, choice: int = 0) -> dict[str, Any]:
    delta: dict[str, Any] = {"tool_calls": list(fragments)} if fragments else {}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "etf-test",
        "choices": [{"index": choice, "delta": delta, "finish_reason": finish_reason}],
    }


def finished(*chunks: dict[str, Any]) -> list[Any]:
    """The chunks followed by a proper end: a finish reason and ``[DONE]``."""
    return [*chunks, chunk(finish_reason="tool_calls"), "[DONE]"]


def case_stream(continuation_id: Any) -> list[Any]:
    """The case study's stream; ``continuation_id`` MISSING is the control, ``None`` the target."""
    return finished(
        chunk(fragment(0, "call-a", "read_page", '{"page":')),
        chunk(fragment(0, continuation_id, arguments="1}")),
    )
