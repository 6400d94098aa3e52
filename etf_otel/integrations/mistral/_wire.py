"""The bytes of one streamed Mistral chat response, read as they pass to the SDK.

The SDK reads its SSE events from ``response.iter_bytes()`` / ``aiter_bytes()``, which draw from the
``httpx.Response``'s byte stream. :class:`TappedStream` and :class:`TappedAsyncStream` stand in for
that one response's byte stream: each chunk of bytes is handed on unchanged, and an incremental SSE
reader (:class:`SseReader`) hands each ``data:`` event to the Chat Completions adapter, the
``[DONE]`` sentinel (which the SDK swallows) included. How the bytes end ends the response: their
end or the sentinel (the SDK closes the response right after it) is the end of the stream, an error
fails it, a close before either abandons it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

from etf_otel.instrumentation._observer import CLOSED, EOF, ERROR, ResponseObserver
from etf_otel.instrumentation._safety import internal_errors_swallowed

__all__ = ["SseReader", "TappedAsyncStream", "TappedStream", "tap_types"]

_DONE: Final = "[DONE]"
_MAX_EVENT: Final = 8 * 1024 * 1024
"""An event longer than this is not parsed (it still passes to the SDK unchanged)."""


class SseReader:
    """Splits SSE bytes into events and feeds each ``data:`` payload to ``observer`` (JSON parsed)."""

    __slots__ = ("_buffer", "_data", "_observer", "done")

    def __init__(self, observer: ResponseObserver) -> None:
        self._observer = observer
        self._buffer = bytearray()
        self._data: list[str] = []
        self.done = False

    def feed(self, chunk: bytes) -> None:
        buffer = self._buffer
        buffer += chunk
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                if len(buffer) > _MAX_EVENT:
                    buffer.clear()
                return
            line = bytes(buffer[:end]).rstrip(b"\r").decode("utf-8", "replace")
            del buffer[: end + 1]
            if not line:
                self._dispatch()
            elif line.startswith("data:"):
                self._data.append(line[5:].removeprefix(" "))

    def _dispatch(self) -> None:
        data, self._data = "\n".join(self._data), []
        if not data:
            return
        if data == _DONE:
            self.done = True
            self._observer.assembler.feed_done()
            return
        try:
            event: Any = json.loads(data)
        except ValueError:
            event = data  # not JSON: the adapter counts it, as replay does
        self._observer.observe(event)


class _Tap:
    __slots__ = ("_ended", "_observer", "_reader", "_stream")

    def __init__(self, stream: Any, observer: ResponseObserver) -> None:
        self._stream = stream
        self._observer = observer
        self._reader = SseReader(observer)
        self._ended = False

    def _read(self, chunk: bytes) -> None:
        with internal_errors_swallowed("reading a Mistral stream"):
            self._reader.feed(chunk)

    def _end(self, how: str) -> None:
        if not self._ended:
            self._ended = True
            if how == CLOSED and self._reader.done:
                how = EOF  # the SDK closes the response at the sentinel
            self._observer.finish(how)


class TappedStream(_Tap):
    """A synchronous ``httpx`` byte stream, read on its way to the SDK."""

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._stream:
                self._read(chunk)
                yield chunk
        except GeneratorExit:
            self._end(CLOSED)
            raise
        except BaseException:
            self._end(ERROR)
            raise
        self._end(EOF)

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._end(CLOSED)


class TappedAsyncStream(_Tap):
    """An asynchronous ``httpx`` byte stream, read on its way to the SDK."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                self._read(chunk)
                yield chunk
        except GeneratorExit:
            self._end(CLOSED)
            raise
        except BaseException:
            self._end(ERROR)
            raise
        self._end(EOF)

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._end(CLOSED)


def tap_types(sync_base: type, async_base: type) -> tuple[type, type]:
    """The tapped streams as subclasses of ``httpx``'s byte stream bases, which ``httpx.Response`` checks
    on close; made when the SDK (and so ``httpx``) is imported, never before."""
    return (
        type("TappedSyncByteStream", (TappedStream, sync_base), {"__slots__": ()}),
        type("TappedAsyncByteStream", (TappedAsyncStream, async_base), {"__slots__": ()}),
    )
