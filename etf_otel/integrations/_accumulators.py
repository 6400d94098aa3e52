"""The SDKs' own accumulators compared with the identity rules (``divergent_assembly``).

Each SDK assembles streamed tool calls itself, in an object fed by hand (a *state*), in the
stream its helper gives (``with client....stream(...) as stream``) and through the *manager*
that helper returns. :func:`observe_accumulator` wraps any of the three the same way; an
:class:`SdkAccumulator` says only what differs per SDK: which classes are which, how the
state is driven and its final object read into calls (an :class:`AssemblerAdapter`), and
how a stream hands its events to the comparison.

The comparison needs what the rules preserve for the same events. When the stream's raw
stream is already observed (an instrumentor is active) its observer has run the rules on
exactly those events: :class:`StreamResultObserver` compares with that observer's assembly
and runs no rule itself. Otherwise the comparison runs the rules once, recording the
response (:meth:`Instrumentation.observer`) or, with ``record_response=False``, only the
divergence (:class:`ComparisonObserver`).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

import wrapt

from etf_otel.core._results import AssemblyResult
from etf_otel.instrumentation._assemblers import AssemblerAdapter, ObservedAssembler, fed_elsewhere
from etf_otel.instrumentation._convenience import _instrumentation
from etf_otel.instrumentation._observer import EOF, ResponseObserver
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._streams import observer_of
from etf_otel.instrumentation._switches import _disabled
from etf_otel.protocols import WireProtocol

if TYPE_CHECKING:  # wrapt < 2.5 proxies are not subscriptable at run time
    ObjectProxy = wrapt.ObjectProxy[Any]
else:
    ObjectProxy = wrapt.ObjectProxy

__all__ = [
    "ComparisonObserver",
    "ObjectProxy",
    "ObservedStreamManager",
    "SdkAccumulator",
    "StreamResultObserver",
    "compare_now",
    "observe_accumulator",
    "observed_accumulator",
    "then_compare",
]

_T = TypeVar("_T")


class ComparisonObserver(ResponseObserver):
    """Runs the rules for the divergence check only, recording no response telemetry.

    For events no observed stream sees (LangChain's rebuilt chunks) whose response another
    observer records, or when the caller asked for the check alone.
    """

    __slots__ = ()

    def finish(self, how: str = EOF) -> AssemblyResult | None:
        with self._lock:
            if self._done:
                return None
            self._done = True
        return self._assembler.finish()


class StreamResultObserver(ResponseObserver):
    """The divergence check against the assembly of the observer of the same events: no rule runs here.

    The raw stream's observer feeds every event to its rules and records the response; this
    one lends the comparison that assembly (finishing it is idempotent) and records nothing
    but the divergence.
    """

    __slots__ = ()

    def __init__(self, telemetry: Any, stream_observer: ResponseObserver) -> None:
        # Not ResponseObserver.__init__: it would build a second assembler for the same events.
        self.telemetry = telemetry
        self._assembler = stream_observer.assembler
        self._lock = threading.Lock()
        self._done = False

    def observe(self, chunk: object) -> None:
        """The stream's observer has fed ``chunk`` to the rules already."""

    @property
    def rules_feed(self) -> Callable[[object], None]:
        """The chunks reach the rules through the raw stream's observer: the wrapped assembler's
        proxy hands them nowhere (no call per chunk)."""
        return fed_elsewhere

    def finish(self, how: str = EOF) -> AssemblyResult | None:
        with self._lock:
            self._done = True
        return None


def observed_accumulator(
    instrumentation: Instrumentation,
    accumulator: Any,
    adapter: AssemblerAdapter,
    protocol: WireProtocol,
    *,
    record_response: bool = True,
    stream_observer: ResponseObserver | None = None,
) -> Any:
    """``accumulator`` compared with ``protocol``'s rules; ``record_response=False``: the divergence check alone.

    Without recording, the assembly of ``stream_observer`` (the observer of the same events)
    is reused when there is one; otherwise the rules run here.
    """
    if _disabled():
        return accumulator
    observer: ResponseObserver
    if record_response:
        observer = instrumentation.observer(protocol=protocol)
    elif stream_observer is not None:
        observer = StreamResultObserver(instrumentation.telemetry, stream_observer)
    else:
        observer = ComparisonObserver(instrumentation.telemetry, instrumentation.rules, protocol=protocol)
    return ObservedAssembler(accumulator, observer, adapter=adapter)


def compare_now(observed: Any, finish: str) -> None:
    """End the response: the observed ``finish`` method compares (or records that it raised)."""
    try:
        getattr(observed, finish)()
    except Exception:  # recorded as assembler_raised; the application meets it when it asks for the result
        return


def _then_compare(iterator: Iterator[Any], observed: Any, finish: str) -> Iterator[Any]:
    yield from iterator
    compare_now(observed, finish)


async def _async_then_compare(iterator: AsyncIterator[Any], observed: Any, finish: str) -> AsyncIterator[Any]:
    async for event in iterator:
        yield event
    compare_now(observed, finish)


def then_compare(iterator: Any, observed: Any, finish: str) -> Any:
    """``iterator``'s events (sync or async) unchanged; once they are exhausted, :func:`compare_now`."""
    if hasattr(iterator, "__anext__"):
        return _async_then_compare(iterator, observed, finish)
    return _then_compare(iterator, observed, finish)


class ObservedStreamManager(ObjectProxy):
    """A stream manager (sync or async) whose stream is instrumented on entering the ``with`` block."""

    def __init__(self, manager: Any, instrument: Callable[[Any], Any]) -> None:
        super().__init__(manager)
        self._self_instrument = instrument

    def __enter__(self) -> Any:
        return self._self_instrument(self.__wrapped__.__enter__())

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)

    async def __aenter__(self) -> Any:
        return self._self_instrument(await self.__wrapped__.__aenter__())

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self.__wrapped__.__aexit__(*exc_info)


class SdkAccumulator:
    """What differs per SDK accumulator; :func:`observe_accumulator` does the rest.

    Classes are named ``"<top-level package>.<class name>"`` (``"openai.ChatCompletionStream"``),
    so recognising them imports nothing and survives the SDK moving its private modules. By
    default a stream owns a state (``_state``) fed by its iterator (``_iterator``): the state
    is replaced by the observed one and the comparison runs when the events are exhausted.
    """

    protocol: ClassVar[WireProtocol]
    adapter: ClassVar[AssemblerAdapter]
    """How a state is driven: the methods fed events, the one that ends, the calls of its result."""
    states: ClassVar[frozenset[str]] = frozenset()
    streams: ClassVar[frozenset[str]] = frozenset()
    managers: ClassVar[frozenset[str]] = frozenset()

    def role(self, target: object) -> str | None:
        """``"state"``, ``"stream"``, ``"manager"`` when ``target`` is one of this accumulator's classes."""
        for cls in type(target).__mro__:
            name = f"{cls.__module__.partition('.')[0]}.{cls.__name__}"
            for role, names in (("state", self.states), ("stream", self.streams), ("manager", self.managers)):
                if name in names:
                    return role
        return None

    def new_state(self) -> Any:
        """A fresh state to feed by hand (the SDK is imported now)."""
        raise NotImplementedError

    def hand_fed(self, state: Any) -> Any:
        """What the observer drives for ``state`` (a view adding what the adapter needs, or the state)."""
        return state

    def is_fresh_state(self, state: Any) -> bool:
        """Whether a stream's ``state`` has not been fed yet (a started stream is left alone)."""
        return False

    def stream_target(self, stream: Any) -> tuple[Any, AssemblerAdapter] | None:
        """What to observe for a fresh ``stream`` and how; ``None`` when it is not fresh."""
        state = getattr(stream, "_state", None)
        if getattr(stream, "_iterator", None) is None or not self.is_fresh_state(state):
            return None
        return self.hand_fed(state), self.adapter

    def attach(self, stream: Any, observed: Any, adapter: AssemblerAdapter) -> None:
        """Let ``stream`` feed ``observed`` and compare when its events are exhausted."""
        stream._state = observed
        stream._iterator = then_compare(stream._iterator, observed, adapter.finish)


def _observe_stream(
    kind: SdkAccumulator, stream: Any, instrumentation: Instrumentation, record_response: bool | None
) -> None:
    target = kind.stream_target(stream)
    if target is None:
        return
    stream_observer = observer_of(getattr(stream, "_raw_stream", None))
    if record_response is None:
        record_response = stream_observer is None
    observed = observed_accumulator(
        instrumentation,
        target[0],
        target[1],
        kind.protocol,
        record_response=record_response,
        stream_observer=stream_observer,
    )
    kind.attach(stream, observed, target[1])


def observe_accumulator(
    target: _T,
    kinds: tuple[SdkAccumulator, ...],
    instrumentation: Instrumentation | None,
    record_response: bool | None,
    options: Mapping[str, Any],
) -> _T:
    """``target`` (a state, stream or manager of one of ``kinds``) compared with the rules; anything else unchanged.

    A state records its response. A stream is the same object, changed in place; with
    ``record_response`` ``None`` it records its response unless its raw stream is already
    observed by etf-otel. A manager gives such a stream on entering ``with``.
    """
    if _disabled():
        return _state_view(target, kinds)
    with internal_errors_swallowed("instrumenting an SDK accumulator"):
        for kind in kinds:
            role = kind.role(target)
            if role is None:
                continue
            etf = _instrumentation(instrumentation, options)
            if role == "state":
                observed: _T = observed_accumulator(etf, kind.hand_fed(target), kind.adapter, kind.protocol)
                return observed
            if role == "stream":
                _observe_stream(kind, target, etf, record_response)
                return target
            return _manager(target, kind, etf, record_response)
    return target


def _manager(manager: _T, kind: SdkAccumulator, etf: Instrumentation, record_response: bool | None) -> _T:
    """``manager``, whose stream is compared on entering ``with``."""
    observed = ObservedStreamManager(
        manager, lambda stream: observe_accumulator(stream, (kind,), etf, record_response, {})
    )
    return cast("_T", observed)  # a transparent proxy of the manager


def _state_view(target: _T, kinds: tuple[SdkAccumulator, ...]) -> _T:
    """Disabled: a state still gets the view its adapter needs (the stream's ``get_final_response``)."""
    for kind in kinds:
        if kind.role(target) == "state":
            view: _T = kind.hand_fed(target)
            return view
    return target
