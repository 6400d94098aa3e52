"""Named Ollama ``/api/chat`` streams, one per quirk seen from Ollama servers and the models behind them.

The rows of the Ollama quirks table (docs/quirks.md). Chunks follow the server's NDJSON lines; ids
in the ``call_`` and eight characters shape newer servers mint. Reported in the open: calls without
any ``id`` (every server before ids, and models whose template gives none), several calls sharing
``function.index`` 0, and proxies that send ``arguments`` as a JSON string.
"""

from __future__ import annotations

from typing import Any, Final

from etf_otel.testing.ollama import MISSING, body, call, chunk, done, error, stream

__all__ = ["OLLAMA_QUIRK_STREAMS"]

_A: Final = "call_k3xq9ab2"
_B: Final = "call_p0w7d4mz"


def _a(**more: Any) -> dict[str, Any]:
    return call("get_a", {"a": 1}, **more)


def _b(**more: Any) -> dict[str, Any]:
    return call("get_b", {"b": 2}, **more)


OLLAMA_QUIRK_STREAMS: Final[dict[str, list[Any]]] = {
    "clean two-call stream (ids, one call a chunk)": stream(chunk(_a(id=_A, index=0)), chunk(_b(id=_B, index=1))),
    "calls without ids (older servers)": stream(chunk(_a()), chunk(_b())),
    "several calls on index 0, with ids": stream(chunk(_a(id=_A, index=0)), chunk(_b(id=_B, index=0))),
    "several calls on index 0, no ids": stream(chunk(_a(index=0), _b(index=0))),
    "parallel calls in one chunk": stream(chunk(_a(id=_A, index=0), _b(id=_B, index=1))),
    "one call with an id, its sibling without": stream(chunk(_a(id=_A, index=0), _b(index=1))),
    'id "" or null (a proxy)': stream(chunk(_a(id=""), _b(id=None))),
    "one id on two calls": stream(chunk(_a(id=_A, index=0)), chunk(_a(id=_A, index=1))),
    "arguments as a JSON string": stream(chunk(call("get_a", '{"a":1}', id=_A))),
    "no arguments (parameterless tool)": stream(chunk(call("list_files", {}, id=_A), call("now", id=_B))),
    "done_reason length": stream(chunk(_a(id=_A)), reason="length"),
    "no done_reason (servers before it)": stream(chunk(_a()), reason=MISSING),
    "calls on the done chunk": [chunk(), done("stop", _a(id=_A))],
    "no done chunk": [chunk(_a(id=_A)), chunk(content="...")],
    "error line mid-stream": [chunk(_a(id=_A)), error()],
    "calls after done (spliced)": [*stream(chunk(_a(id=_A))), chunk(_b(id=_B)), done()],
    "complete body (stream false)": [body(_a(id=_A, index=0), _b(id=_B, index=1))],
}
"""Named recorded Ollama streams, one per quirk (the rows of the Ollama quirks table)."""
