"""Assembler wrappers: any assembler fed chunks and then finished, observed (docs/guarantees.md).

An :class:`AssemblerAdapter` says how to drive one: which methods take a chunk, which
one marks the end-of-stream sentinel, which one ends the response, and how to read the
calls it returns. :class:`ObservedAssembler` is a transparent proxy (``wrapt``): it forwards
every call unchanged, feeds the same chunks to the identity rules and, when the response
ends, records how the wrapped assembler's calls differ from the rules'
(``divergent_assembly``).

The watched methods are real methods of a proxy class made once per adapter shape (the
method names the wrapped assembler has), so reading ``feed`` costs what it costs on any
object and calling it adds one Python frame to the wrapped assembler's and the rules' own.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

import wrapt

from etf_otel.core._divergence import AssembledCall, DivergenceKind, compare
from etf_otel.instrumentation._observer import CLOSED, EOF, ERROR, ResponseObserver, observe_failed
from etf_otel.instrumentation._safety import internal_errors_swallowed

__all__ = [
    "DEFAULT_ADAPTER",
    "AssemblerAdapter",
    "CallsReader",
    "ChunkAssembler",
    "ObservedAssembler",
    "fed_elsewhere",
    "reference_calls",
]

if TYPE_CHECKING:  # wrapt < 2.5 proxies are not subscriptable at run time
    _ObjectProxy = wrapt.ObjectProxy[Any]
else:
    _ObjectProxy = wrapt.ObjectProxy

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


def fed_elsewhere(chunk: object) -> None:
    """The ``rules_feed`` of an observer whose rules get each chunk another way (the observed raw
    stream the wrapped assembler is fed from): :class:`ObservedAssembler` then calls nothing per chunk."""


class ObservedAssembler(_ObjectProxy):
    """Any assembler that is fed chunks and then finished, observed.

    ``adapter`` names the methods to watch; see :class:`AssemblerAdapter`. Everything else,
    ``isinstance`` included, is the wrapped assembler's own. Constructing one gives an
    instance of the subclass made for the adapter's shape.
    """

    __slots__ = ("_self_feeding",)
    # What a feed reads, in one slot read through its descriptor (_feeding_of): an attribute
    # read on a wrapt proxy subclass goes through Python's __getattr__ hook and then wrapt's
    # getattro (~1,000 instructions under callgrind), the descriptor's own __get__ ~450.

    def __new__(
        cls, assembler: object, observer: ResponseObserver, *, adapter: AssemblerAdapter = DEFAULT_ADAPTER
    ) -> ObservedAssembler:
        if not isinstance(adapter, AssemblerAdapter):  # a mapping of its fields was a pre-release spelling
            raise TypeError(f"adapter must be an AssemblerAdapter, not {type(adapter).__name__}")
        if cls is ObservedAssembler:
            has = functools.partial(hasattr, assembler)
            done = adapter.done if adapter.done is not None and has(adapter.done) else None
            finish = adapter.finish if has(adapter.finish) else None
            cls = _shaped(tuple(filter(has, adapter.feed)), done, finish)
        observed: ObservedAssembler = super().__new__(cls)
        return observed

    def __init__(
        self, assembler: object, observer: ResponseObserver, *, adapter: AssemblerAdapter = DEFAULT_ADAPTER
    ) -> None:
        super().__init__(assembler)
        self._self_observer = observer
        rules_feed = observer.rules_feed
        self._self_feeding: tuple[object, Callable[[object], None] | None] = (
            assembler,
            None if rules_feed is fed_elsewhere else rules_feed,
        )
        """The assembler, and the rules' ``feed`` (``None`` once the response ended, or when fed elsewhere)."""
        self._self_calls = adapter.calls
        self._self_finalizer = weakref.finalize(self, observer.finish, CLOSED)

    def _self_end(self, kinds: Sequence[DivergenceKind], how: str) -> None:
        self._self_feeding = (self._self_feeding[0], None)
        observer = self._self_observer
        if observer.finished:
            return
        with internal_errors_swallowed("recording divergence"):
            observer.telemetry.record_divergence([kind.value for kind in kinds])
        observer.finish(how)
        self._self_finalizer.detach()


_feeding_of: Final[Callable[[ObservedAssembler], tuple[Any, Callable[[object], None] | None]]] = (
    ObservedAssembler.__dict__["_self_feeding"].__get__
)
"""``proxy._self_feeding`` without the attribute hook (see the slot)."""


def _feeding(name: str) -> Callable[..., Any]:
    def feed(self: ObservedAssembler, chunk: Any, /, *args: Any, **kwargs: Any) -> Any:
        wrapped, rules_feed = _feeding_of(self)
        try:
            if args or kwargs:
                outcome = getattr(wrapped, name)(chunk, *args, **kwargs)
            else:
                outcome = getattr(wrapped, name)(chunk)
        except BaseException:  # some assemblers raise mid-stream (openai: IndexError, AssertionError)
            self._self_end((DivergenceKind.ASSEMBLER_RAISED,), ERROR)
            raise
        if rules_feed is not None:
            try:
                rules_feed(chunk)
            except Exception:  # pragma: no cover - the assembler never raises on JSON-shaped input
                observe_failed()
        return outcome

    return feed


def _ending_input(name: str) -> Callable[..., Any]:
    def done(self: ObservedAssembler, *args: Any, **kwargs: Any) -> Any:
        outcome = getattr(self.__wrapped__, name)(*args, **kwargs)
        self._self_observer.assembler.feed_done()
        return outcome

    return done


def _finishing(name: str) -> Callable[..., Any]:
    def finish(self: ObservedAssembler, *args: Any, **kwargs: Any) -> Any:
        try:
            outcome = getattr(self.__wrapped__, name)(*args, **kwargs)
        except BaseException:
            self._self_end((DivergenceKind.ASSEMBLER_RAISED,), ERROR)
            raise
        kinds: list[DivergenceKind] = []
        with internal_errors_swallowed("comparing assemblies"):
            ours = self._self_observer.assembler.finish()
            kinds = compare(ours.calls, self._self_calls(outcome))
        self._self_end(kinds, EOF)
        return outcome

    return finish


@functools.lru_cache(maxsize=64)
def _shaped(feed: tuple[str, ...], done: str | None, finish: str | None) -> type[ObservedAssembler]:
    """The proxy class whose methods ``feed``, ``done`` and ``finish`` are watched, made once per shape."""
    methods: dict[str, Callable[..., Any]] = {name: _feeding(name) for name in feed}
    if done is not None:
        methods[done] = _ending_input(done)
    if finish is not None:
        methods[finish] = _finishing(finish)
    for name, method in methods.items():
        method.__name__ = name
        method.__qualname__ = f"ObservedAssembler.{name}"
    return type("ObservedAssembler", (ObservedAssembler,), {"__slots__": (), **methods})
