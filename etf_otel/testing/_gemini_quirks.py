"""Named Gemini streams, one per quirk seen from the Developer API, Vertex AI and the bridges in front of them.

The rows of the Gemini quirks table (docs/quirks.md). Ids are in the shapes seen on the wire:
none at all on Gemini 2.x and Vertex AI, eight lowercase alphanumerics on the Developer API's
newer models.
"""

from __future__ import annotations

from typing import Any, Final

from etf_otel.testing.gemini import call, chunk, leaf, stream, text

__all__ = ["GEMINI_QUIRK_STREAMS"]


def _streamed(
    name: str, path: str, pieces: list[str], *, close: bool = True, terminate: bool = True
) -> list[dict[str, Any]]:
    """A Vertex ``streamFunctionCallArguments`` call: a head, one string leaf in ``pieces``, a terminator.

    ``close`` false leaves the string open (and sends no terminator); ``terminate`` false drops the terminator.
    """
    chunks = [chunk(call(name, will_continue=True))]
    for position, piece in enumerate(pieces):
        last = position == len(pieces) - 1
        entry = leaf(path, string=piece) if last and close else leaf(path, string=piece, will_continue=True)
        chunks.append(chunk(call(partial_args=[entry], will_continue=True)))
    if close and terminate:
        chunks.append(chunk(call()))
    return chunks


GEMINI_QUIRK_STREAMS: Final[dict[str, list[Any]]] = {
    "parallel calls in one chunk (Gemini 2.x, no ids)": stream(chunk(call("get_a", {"a": 1}), call("get_b", {"b": 2}))),
    "parallel calls one per chunk, each as parts[0]": stream(
        chunk(call("get_a", {"a": 1})), chunk(call("get_b", {"b": 2}))
    ),
    "ids on every call (Developer API, newer models)": stream(
        chunk(call("get_a", {"a": 1}, id="k3xq9ab2"), call("get_b", {"b": 2}, id="p0w7d4mz"))
    ),
    "id null or empty (SDK dumps without exclude_none)": stream(
        chunk(call("get_a", {"a": 1}, id=None), call("get_b", {"b": 2}, id=""))
    ),
    "one call with an id, its sibling without": stream(
        chunk(call("get_a", {"a": 1}, id="k3xq9ab2"), call("get_b", {}))
    ),
    "the same call written twice (proxy double write)": stream(
        chunk(call("get_a", {"a": 1}, id="k3xq9ab2")), chunk(call("get_a", {"a": 1}, id="k3xq9ab2"))
    ),
    "partialArgs streamed call (Vertex)": stream(_streamed("get_a", "$.city", ["Par", "is", ""])),
    "partialArgs call cut before its string closed": _streamed("get_a", "$.city", ["Par"], close=False),
    "terminator lost between two streamed calls": stream(
        _streamed("get_a", "$.city", ["Paris"], terminate=False), _streamed("get_b", "$.city", ["Rome"])
    ),
    "args sent as a JSON string": stream(chunk(call("get_a", '{"a": 1}'))),
    "STOP on every chunk (older endpoints)": [
        chunk(call("get_a", {"a": 1}), finish_reason="STOP"),
        chunk(text(""), finish_reason="STOP"),
    ],
    "finish reason on a trailing empty chunk": [chunk(call("get_a", {"a": 1})), chunk(text(""), finish_reason="STOP")],
    "STOP, then MAX_TOKENS on a later chunk": [
        chunk(call("get_a", {"a": 1}), finish_reason="STOP"),
        chunk(finish_reason="MAX_TOKENS"),
    ],
    "MALFORMED_FUNCTION_CALL with a parsed call": [
        chunk(call("get_a", {"a": 1}), finish_reason="MALFORMED_FUNCTION_CALL")
    ],
    "no finishReason before the end of the stream": [chunk(call("get_a", {"a": 1}))],
    "a second responseId (spliced)": [
        chunk(call("get_a", {"a": 1})),
        chunk(call("get_b", {"b": 2}), response_id="resp-gemini-2", finish_reason="STOP"),
    ],
}
"""Named Gemini streams, one per quirk (the rows of the Gemini quirks table)."""
