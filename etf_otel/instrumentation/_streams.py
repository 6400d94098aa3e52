"""Stream wrappers: a sync or async iterable of chunks, observed (docs/telemetry.md).

Each wrapper is a transparent proxy (``wrapt``): ``isinstance`` checks, attributes and
every chunk are the wrapped stream's own; only iteration and closing are watched. The
response ends, and is reported once, by exhaustion, by an error, by ``close()``/``break``/
leaving ``with``, or when an abandoned stream is garbage collected. :func:`observer_of` gives
the observer behind a wrapper (the proxies forward every other attribute to the stream).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import wrapt

from etf_otel.instrumentation._observer import CLOSED, EOF, ERROR, ResponseObserver, observe_failed

__all__ = ["ObservedAsyncStream", "ObservedStream", "observer_of"]

if TYPE_CHECKING:  # wrapt < 2.5 proxies are not subscriptable at run time
    _ObjectProxy = wrapt.ObjectProxy[Any]
else:
    _ObjectProxy = wrapt.ObjectProxy


class ObservedStream(_ObjectProxy):
    """A synchronous stream of chunks, observed.

    A transparent proxy: ``isinstance`` checks, attributes (``response``, ...) and every
    chunk are the wrapped stream's own; only iteration and closing are watched.
    """

    def __init__(self, stream: Iterable[Any], observer: ResponseObserver) -> None:
        super().__init__(stream)
        self._self_iterator: Iterator[Any] | None = None
        self._self_observer = observer
        self._self_feed = observer.assembler.feed  # called once per chunk: no frame in between
        self._self_finalizer = weakref.finalize(self, observer.finish, CLOSED)

    def __iter__(self) -> Iterator[Any]:
        """A ``for`` loop gets a generator: the cheapest per-chunk path CPython has.

        Leaving the loop early (``break``) closes that generator, which ends the response
        as abandoned at once. ``next(stream)`` without ``iter`` goes through ``__next__``.
        """
        if self._self_iterator is not None:
            return self
        self._self_iterator = iterator = iter(self.__wrapped__)
        return self._self_generate(iterator)

    def _self_generate(self, iterator: Iterator[Any]) -> Iterator[Any]:
        feed = self._self_feed
        try:
            for chunk in iterator:
                try:
                    feed(chunk)
                except Exception:  # pragma: no cover - the assembler never raises on JSON-shaped input
                    observe_failed()
                yield chunk
        except GeneratorExit:
            self._self_end(CLOSED)
            raise
        except BaseException:
            self._self_end(ERROR)
            raise
        self._self_end(EOF)

    def __next__(self) -> Any:
        iterator = self._self_iterator
        if iterator is None:
            iterator = self._self_iterator = iter(self.__wrapped__)
        try:
            chunk = next(iterator)
        except StopIteration:
            self._self_end(EOF)
            raise
        except BaseException:
            self._self_end(ERROR)
            raise
        try:
            self._self_feed(chunk)
        except Exception:  # pragma: no cover - the assembler never raises on JSON-shaped input
            observe_failed()
        return chunk

    def _self_end(self, how: str) -> None:
        self._self_observer.finish(how)
        self._self_finalizer.detach()

    def close(self) -> Any:
        try:
            close = getattr(self.__wrapped__, "close", None)
            return close() if close is not None else None
        finally:
            self._self_end(CLOSED)

    def __enter__(self) -> ObservedStream:
        enter = getattr(self.__wrapped__, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(self, *exc_info: object) -> Any:
        try:
            exit_ = getattr(self.__wrapped__, "__exit__", None)
            return exit_(*exc_info) if exit_ is not None else None
        finally:
            self._self_end(CLOSED)


class ObservedAsyncStream(_ObjectProxy):
    """An asynchronous stream of chunks, observed; a transparent proxy like :class:`ObservedStream`."""

    def __init__(self, stream: AsyncIterable[Any], observer: ResponseObserver) -> None:
        super().__init__(stream)
        self._self_iterator: AsyncIterator[Any] | None = None
        self._self_observer = observer
        self._self_feed = observer.assembler.feed  # called once per chunk: no frame in between
        self._self_finalizer = weakref.finalize(self, observer.finish, CLOSED)

    def __aiter__(self) -> ObservedAsyncStream:
        return self

    async def __anext__(self) -> Any:
        iterator = self._self_iterator
        if iterator is None:
            iterator = self._self_iterator = self.__wrapped__.__aiter__()
        try:
            chunk = await iterator.__anext__()
        except StopAsyncIteration:
            self._self_end(EOF)
            raise
        except BaseException:
            self._self_end(ERROR)
            raise
        try:
            self._self_feed(chunk)
        except Exception:  # pragma: no cover - the assembler never raises on JSON-shaped input
            observe_failed()
        return chunk

    def _self_end(self, how: str) -> None:
        self._self_observer.finish(how)
        self._self_finalizer.detach()

    def close(self) -> Any:
        """Forwards ``close()`` (a coroutine for ``openai.AsyncStream``); the response ends now."""
        try:
            return self.__wrapped__.close()
        finally:
            self._self_end(CLOSED)

    async def aclose(self) -> None:
        try:
            aclose = getattr(self.__wrapped__, "aclose", None)
            if aclose is None:
                close = getattr(self.__wrapped__, "close", None)
                outcome = close() if close is not None else None
                if inspect.isawaitable(outcome):
                    await outcome
            else:
                await aclose()
        finally:
            self._self_end(CLOSED)

    async def __aenter__(self) -> ObservedAsyncStream:
        enter = getattr(self.__wrapped__, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc_info: object) -> Any:
        try:
            exit_ = getattr(self.__wrapped__, "__aexit__", None)
            return await exit_(*exc_info) if exit_ is not None else None
        finally:
            self._self_end(CLOSED)


def observer_of(stream: object) -> ResponseObserver | None:
    """The observer behind an observed stream (what ``Instrumentation.stream`` returns), else ``None``.

    A function, not a property of the proxies: an attribute of theirs would hide the wrapped
    stream's attribute of the same name.
    """
    if isinstance(stream, (ObservedStream, ObservedAsyncStream)):
        observer: ResponseObserver = stream._self_observer
        return observer
    return None
