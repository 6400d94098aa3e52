"""Assembler wrappers: any assembler fed chunks and then finished, observed (docs/guarantees.md).

An :class:`AssemblerAdapter` says how to drive one: which methods take a chunk, which
one marks the end-of-stream sentinel, which one ends the response, and how to read the
calls it returns. :class:`ObservedAssembler` forwards every call unchanged, feeds the
same chunks to the identity rules and, when the response ends, records how the wrapped
assembler's calls differ from the rules' (``divergent_assembly``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from etf_otel.core._divergence import AssembledCall, DivergenceKind, compare
from etf_otel.instrumentation._observer import CLOSED, EOF, ERROR, ResponseObserver
from etf_otel.instrumentation._safety import internal_errors_swallowed

__all__ = [
    "DEFAULT_ADAPTER",
    "AssemblerAdapter",
    "CallsReader",
    "ChunkAssembler",
    "ObservedAssembler",
    "adapter_from",
    "reference_calls",
]

CallsReader = Callable[[Any], Sequence[AssembledCall]]
"""Turns what an assembler's finish method returned into ``(id, name, arguments)`` triples."""


class ChunkAssembler(Protocol):
    """The assembler shape the default :class:`AssemblerAdapter` drives (:class:`~etf_otel.ReferenceAssembler`'s).

    ``feed(chunk)`` once per chunk, ``finish()`` at the end. A ``feed_done()`` method, when
    present, is called at the ``[DONE]`` sentinel and observed too. Assemblers of another
    shape are wrapped with an adapter naming their methods.
    """

    def feed(self, chunk: Any, /) -> object: ...

    def finish(self) -> object: ...


def reference_calls(result: object) -> Sequence[AssembledCall]:
    """Extract ``(id, name, arguments)`` from a :class:`ReferenceAssembler` result."""
    return [(call.id, call.name, call.arguments) for call in result.calls]  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class AssemblerAdapter:
    """How :class:`ObservedAssembler` drives an assembler; the defaults fit a :class:`ChunkAssembler`.

    ``feed`` is converted to a tuple (a single name is accepted), so adapters are hashable.
    """

    feed: Sequence[str] = ("feed",)
    """The method(s) that take one chunk as their first argument."""
    done: str | None = "feed_done"
    """The method called at the end-of-stream sentinel; ``None`` when the assembler has none."""
    finish: str = "finish"
    """The method that ends the response and returns what :attr:`calls` reads."""
    calls: CallsReader = reference_calls
    """``(id, name, arguments)`` of each call in the finish method's return value."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "feed", (self.feed,) if isinstance(self.feed, str) else tuple(self.feed))


DEFAULT_ADAPTER: Final = AssemblerAdapter()


def adapter_from(
    adapter: AssemblerAdapter | None,
    *,
    feed: Sequence[str] = DEFAULT_ADAPTER.feed,
    done: str | None = DEFAULT_ADAPTER.done,
    finish: str = DEFAULT_ADAPTER.finish,
    calls: CallsReader = DEFAULT_ADAPTER.calls,
) -> AssemblerAdapter:
    """``adapter``, or the one the separate keywords describe (how it was spelled before adapters existed)."""
    described = AssemblerAdapter(feed=feed, done=done, finish=finish, calls=calls)
    if adapter is None:
        return described
    if described != DEFAULT_ADAPTER:
        raise TypeError("give either adapter= or the feed/done/finish/calls keywords, not both")
    return adapter


class ObservedAssembler:
    """Any assembler that is fed chunks and then finished, observed.

    ``adapter`` (or, as before, the keywords ``feed``, ``done``, ``finish``, ``calls``)
    names the methods to watch; see :class:`AssemblerAdapter`. Everything else is
    forwarded untouched.
    """

    def __init__(
        self,
        assembler: object,
        observer: ResponseObserver,
        *,
        adapter: AssemblerAdapter | None = None,
        feed: Sequence[str] = DEFAULT_ADAPTER.feed,
        done: str | None = DEFAULT_ADAPTER.done,
        finish: str = DEFAULT_ADAPTER.finish,
        calls: CallsReader = DEFAULT_ADAPTER.calls,
    ) -> None:
        adapter = adapter_from(adapter, feed=feed, done=done, finish=finish, calls=calls)
        self._etf_assembler = assembler
        self._etf_observer = observer
        self._etf_feed = frozenset(adapter.feed)
        self._etf_finish = adapter.finish
        self._etf_done = adapter.done
        self._etf_calls = adapter.calls
        self._etf_finalizer = weakref.finalize(self, observer.finish, CLOSED)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._etf_assembler, name)
        if name in self._etf_feed:
            return self._etf_wrap_feed(target)
        if name == self._etf_done:
            return self._etf_wrap_done(target)
        if name == self._etf_finish:
            return self._etf_wrap_finish(target)
        return target

    def _etf_wrap_feed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        observer = self._etf_observer

        def feed(chunk: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                outcome = method(chunk, *args, **kwargs)
            except BaseException:  # some assemblers raise mid-stream (openai: IndexError, AssertionError)
                self._etf_end([DivergenceKind.ASSEMBLER_RAISED], ERROR)
                raise
            if not observer.finished:
                observer.observe(chunk)
            return outcome

        return feed

    def _etf_wrap_done(self, method: Callable[..., Any]) -> Callable[..., Any]:
        observer = self._etf_observer

        def done(*args: Any, **kwargs: Any) -> Any:
            outcome = method(*args, **kwargs)
            observer.assembler.feed_done()
            return outcome

        return done

    def _etf_wrap_finish(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def finish(*args: Any, **kwargs: Any) -> Any:
            try:
                outcome = method(*args, **kwargs)
            except BaseException:
                self._etf_end([DivergenceKind.ASSEMBLER_RAISED], ERROR)
                raise
            kinds: list[DivergenceKind] = []
            with internal_errors_swallowed("comparing assemblies"):
                ours = self._etf_observer.assembler.finish()
                kinds = compare(ours.calls, self._etf_calls(outcome))
            self._etf_end(kinds, EOF)
            return outcome

        return finish

    def _etf_end(self, kinds: Sequence[DivergenceKind], how: str) -> None:
        observer = self._etf_observer
        if observer.finished:
            return
        with internal_errors_swallowed("recording divergence"):
            observer.telemetry.record_divergence([kind.value for kind in kinds])
        observer.finish(how)
        self._etf_finalizer.detach()
