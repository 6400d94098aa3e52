"""Stream wrappers: a sync or async iterable of chunks, observed (docs/telemetry.md).

Each wrapper is a transparent proxy (``wrapt``): ``isinstance`` checks, attributes and
every chunk are the wrapped stream's own; only iteration and closing are watched. A wrapper
has ``close``/``aclose`` only when the wrapped stream has them, and the async one is not
iterable synchronously: ``hasattr`` answers as for the stream itself. The response ends, and
is reported once, by exhaustion, by an error, by ``close()``/``aclose()``, by leaving ``with``,
or when an abandoned stream is garbage collected. Leaving a ``for`` loop (``break``) only
pauses the stream: iterating again continues the same response. :func:`observer_of` gives
the observer behind a wrapper (the proxies forward every other attribute to the stream).
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from types import MethodType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import wrapt

from etf_otel.instrumentation._observer import CLOSED, EOF, ERROR, ResponseObserver, observe_failed

__all__ = ["ObservedAsyncStream", "ObservedDualStream", "ObservedStream", "observer_of"]

if TYPE_CHECKING:  # wrapt < 2.5 proxies are not subscriptable at run time
    _ObjectProxy = wrapt.ObjectProxy[Any]
    _BaseObjectProxy = wrapt.BaseObjectProxy[Any]
else:
    _ObjectProxy = wrapt.ObjectProxy
    # No ``__iter__``: an async stream is not iterable. wrapt < 2 has no such base: there the async
    # proxy answers ``hasattr(stream, "__iter__")`` with True (iterating it still raises TypeError).
    _BaseObjectProxy = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)

_F = TypeVar("_F", bound=Callable[..., Any])
_Self = TypeVar("_Self")


class _NoContextManager(AttributeError, TypeError):
    """A context-manager method the wrapped stream lacks: ``hasattr`` is ``False`` (an
    ``AttributeError``) and ``with``/``async with`` fail with a ``TypeError``, as without etf-otel."""


class _IfWrappedHas(Generic[_F]):
    """A proxy method that exists only when the wrapped object has an attribute of its name.

    Looked up per instance: when the wrapped stream has no such attribute the lookup fails,
    the proxy falls back to forwarding, and the wrapped stream's own ``AttributeError`` is
    raised (``hasattr`` is ``False``, as without etf-otel). A context-manager method, which
    Python looks up without that fallback, fails with :class:`_NoContextManager`. Only closing
    and context-manager methods use it: they run once per stream, never per chunk.
    """

    __slots__ = ("_function", "_name")

    def __init__(self, function: _F) -> None:
        self._function = function
        self._name = function.__name__

    def __get__(self, instance: object, owner: type | None = None) -> _F:
        if instance is None:
            return self._function
        wrapped = instance.__wrapped__  # type: ignore[attr-defined]
        if not hasattr(wrapped, self._name):
            if self._name.startswith("__"):
                kind = "asynchronous context manager" if self._name.startswith("__a") else "context manager"
                raise _NoContextManager(f"{type(wrapped).__name__!r} object does not support the {kind} protocol")
            raise AttributeError(self._name)
        bound: _F = MethodType(self._function, instance)  # type: ignore[assignment]
        return bound


class _ReadAsync:
    """``async for`` over the wrapped stream, each chunk fed to the rules (the async proxies' reading)."""

    __wrapped__: Any
    _self_areading: tuple[AsyncIterator[Any] | None, Callable[[object], None]]
    """The wrapped stream's iterator (``None`` until the first chunk is asked for) and the rules'
    ``feed``: one attribute read per chunk, as each read through the proxy costs about as much as
    the rest of ``__anext__``'s own work."""
    _self_end: Callable[[str], None]  # the proxy class's own

    def __aiter__(self: _Self) -> _Self:
        return self

    async def __anext__(self) -> Any:
        iterator, feed = self._self_areading
        if iterator is None:
            iterator = self.__wrapped__.__aiter__()
            self._self_areading = (iterator, feed)
        try:
            chunk = await iterator.__anext__()
        except StopAsyncIteration:
            self._self_end(EOF)
            raise
        except BaseException:
            self._self_end(ERROR)
            raise
        try:
            feed(chunk)
        except Exception:  # pragma: no cover - the assembler never raises on JSON-shaped input
            observe_failed()
        return chunk

    @_IfWrappedHas
    async def aclose(self) -> Any:
        try:
            return await self.__wrapped__.aclose()
        finally:
            self._self_end(CLOSED)


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

        Every loop (and ``next(stream)``, through ``__next__``) draws from the one iterator of
        the wrapped stream, so a loop left with ``break`` can be resumed where it stopped: the
        generator is closed then, but the response goes on (it is not abandoned until the
        stream is closed or garbage collected).
        """
        iterator = self._self_iterator
        if iterator is None:
            iterator = self._self_iterator = iter(self.__wrapped__)
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
        except GeneratorExit:  # the loop was left (``break``): a pause, not an end
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

    @_IfWrappedHas
    def close(self) -> Any:
        try:
            return self.__wrapped__.close()
        finally:
            self._self_end(CLOSED)

    # wrapt's base proxy defines both kinds of context manager: this one has the other kind only
    # when the wrapped stream has it (forwarded unchanged).
    @_IfWrappedHas
    async def __aenter__(self) -> Any:  # type: ignore[override]  # present only when the stream has it
        return await self.__wrapped__.__aenter__()

    @_IfWrappedHas
    async def __aexit__(self, *exc_info: object) -> Any:  # type: ignore[override]  # present only when the stream has it
        return await self.__wrapped__.__aexit__(*exc_info)

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


class ObservedAsyncStream(_ReadAsync, _BaseObjectProxy):
    """An asynchronous stream of chunks, observed; a transparent proxy like :class:`ObservedStream`."""

    def __init__(self, stream: AsyncIterable[Any], observer: ResponseObserver) -> None:
        super().__init__(stream)
        self._self_areading = (None, observer.assembler.feed)  # feed: called once per chunk, no frame in between
        self._self_observer = observer
        self._self_finalizer = weakref.finalize(self, observer.finish, CLOSED)

    def _self_end(self, how: str) -> None:
        self._self_observer.finish(how)
        self._self_finalizer.detach()

    @_IfWrappedHas
    def close(self) -> Any:
        """Forwards ``close()`` (a coroutine for the SDKs' ``AsyncStream``); the response ends now."""
        try:
            return self.__wrapped__.close()
        finally:
            self._self_end(CLOSED)

    @_IfWrappedHas
    def __enter__(self) -> Any:  # type: ignore[override]  # present only when the stream has it
        return self.__wrapped__.__enter__()

    @_IfWrappedHas
    def __exit__(self, *exc_info: object) -> Any:  # type: ignore[override]  # present only when the stream has it
        return self.__wrapped__.__exit__(*exc_info)

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


class ObservedDualStream(_ReadAsync, ObservedStream):
    """A stream that is iterable both ways (LiteLLM's ``CustomStreamWrapper`` has ``__iter__`` and
    ``__aiter__``), observed whichever way the application reads it: a ``for`` and an ``async for``
    feed the same response, so neither bypasses the rules."""

    def __init__(self, stream: Iterable[Any], observer: ResponseObserver) -> None:
        super().__init__(stream, observer)
        self._self_areading = (None, self._self_feed)


def observer_of(stream: object) -> ResponseObserver | None:
    """The observer behind an observed stream (what ``Instrumentation.stream`` returns), else ``None``.

    A function, not a property of the proxies: an attribute of theirs would hide the wrapped
    stream's attribute of the same name.
    """
    if isinstance(stream, (ObservedStream, ObservedAsyncStream)):
        observer: ResponseObserver = stream._self_observer
        return observer
    return None
