"""One-line wrapping without an explicit :class:`Instrumentation`, and the setups it shares.

``instrument_stream(s, tracer_provider=tp)`` followed by
``instrument_host(h, guard=True, tracer_provider=tp)`` must behave like one
``Instrumentation(tp)`` wrapping both: the host has to see the proposals the stream
recorded, or guard mode refuses every valid call as ``orphaned_result``. So calls with the
same providers and the same setup options share one :class:`Instrumentation`:

* Providers are compared by identity after resolving ``None`` to the global provider,
  exactly as :class:`Instrumentation` resolves them, so ``None`` and the global provider
  passed explicitly share.
* The setup options are those the shared state depends on: ``provider_name`` (span and
  metric attributes), ``allow`` (the identity rules of every observed response, compared as
  a set) and ``capture_content`` (``None`` resolved from the environment, as
  :class:`Instrumentation` does). ``provider_name`` and ``allow`` left ``None`` are part of
  the key as ``None``: the setup made for them reads ``OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME``
  and ``OTEL_INSTRUMENTATION_ETF_ALLOW`` once, when it is made, and keeps what it read.
* ``guard`` is not one of them: it only changes what a host does with the proposals, so it
  belongs to the host wrapper (``instrument_host(..., guard=True)``). Splitting setups on it
  would give the guarded host an empty proposal registry, the very failure this prevents.
  ``guard=None`` takes the setup's default, ``OTEL_INSTRUMENTATION_ETF_GUARD`` when it was made.

At most :data:`MAX_SHARED_SETUPS` setups are kept (least recently used out first). Each
holds its providers weakly: a setup whose provider was garbage collected is dropped and
never handed to a new provider that happens to reuse the address. A provider that cannot
be weakly referenced is held strongly, which the bound limits.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypedDict, TypeVar, overload

from opentelemetry import metrics, trace

from etf_otel.core._identity import CompatibilityRule
from etf_otel.core._linkage import Conversation
from etf_otel.instrumentation._assemblers import DEFAULT_ADAPTER, AssemblerAdapter, ChunkAssembler
from etf_otel.instrumentation._host import ToolFunction, ToolHost
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._telemetry import capture_content_enabled
from etf_otel.protocols import CHAT_COMPLETIONS, WireProtocol

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "MAX_SHARED_SETUPS",
    "SetupOptions",
    "instrument_assembler",
    "instrument_host",
    "instrument_stream",
    "shared_instrumentation",
]

MAX_SHARED_SETUPS: Final = 32

_T = TypeVar("_T")
_Stream = TypeVar("_Stream", bound="Iterable[Any] | AsyncIterable[Any]")
_Assembler = TypeVar("_Assembler", bound=ChunkAssembler)
_Host = TypeVar("_Host", bound="ToolHost | ToolFunction")


class SetupOptions(TypedDict, total=False):
    """The setup keywords of the convenience functions; see :class:`Instrumentation`."""

    tracer_provider: trace.TracerProvider | None
    meter_provider: metrics.MeterProvider | None
    provider_name: str | None
    allow: Iterable[CompatibilityRule | str] | None
    deny: Iterable[CompatibilityRule | str] | None
    capture_content: bool | None


class _Options(NamedTuple):
    """The options that make two setups behave differently (everything but the providers).

    ``None`` for ``provider_name`` or ``allow``: what the environment says when the setup is made.
    """

    provider_name: str | None
    allow: frozenset[CompatibilityRule] | None
    capture_content: bool
    deny: frozenset[CompatibilityRule] | None = None


class _Setup(NamedTuple):
    """One shared setup and (weak references to) the providers it was made for."""

    tracer_provider: Callable[[], object]
    meter_provider: Callable[[], object]
    instrumentation: Instrumentation

    def alive(self) -> bool:
        return self.tracer_provider() is not None and self.meter_provider() is not None

    def serves(self, tracer_provider: object, meter_provider: object) -> bool:
        return self.tracer_provider() is tracer_provider and self.meter_provider() is meter_provider


def _reference(provider: object) -> Callable[[], object]:
    """A weak reference to ``provider``, or a strong one when it cannot be weakly referenced."""
    try:
        return weakref.ref(provider)
    except TypeError:
        return lambda: provider


class _SharedSetups:
    """Bounded least-recently-used map from (providers, options) to their :class:`Instrumentation`."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._setups: OrderedDict[tuple[int, int, _Options], _Setup] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self, tracer_provider: trace.TracerProvider, meter_provider: metrics.MeterProvider, options: _Options
    ) -> Instrumentation:
        key = (id(tracer_provider), id(meter_provider), options)
        with self._lock:
            setup = self._setups.get(key)
            if setup is not None and setup.serves(tracer_provider, meter_provider):
                self._setups.move_to_end(key)
                return setup.instrumentation
            instrumentation = Instrumentation(
                tracer_provider,
                meter_provider,
                provider_name=options.provider_name,
                allow=options.allow,
                capture_content=options.capture_content,
                deny=options.deny,
            )
            self._setups[key] = _Setup(_reference(tracer_provider), _reference(meter_provider), instrumentation)
            self._setups.move_to_end(key)
            self._forget_dead_and_oldest()
            return instrumentation

    def _forget_dead_and_oldest(self) -> None:
        for key in [key for key, setup in self._setups.items() if not setup.alive()]:
            del self._setups[key]
        while len(self._setups) > self._capacity:
            self._setups.popitem(last=False)


_shared = _SharedSetups(MAX_SHARED_SETUPS)


def shared_instrumentation(
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    provider_name: str | None = None,
    allow: Iterable[CompatibilityRule | str] | None = None,
    capture_content: bool | None = None,
    deny: Iterable[CompatibilityRule | str] | None = None,
) -> Instrumentation:
    """The :class:`Instrumentation` the convenience functions use for these providers and options.

    The same object for the same (resolved) providers and options; see the module docstring.
    """
    options = _Options(
        provider_name,
        None if allow is None else frozenset(CompatibilityRule(rule) for rule in allow),
        capture_content_enabled() if capture_content is None else capture_content,
        None if deny is None else frozenset(CompatibilityRule(rule) for rule in deny),
    )
    return _shared.get(
        tracer_provider if tracer_provider is not None else trace.get_tracer_provider(),
        meter_provider if meter_provider is not None else metrics.get_meter_provider(),
        options,
    )


def _instrumentation(instrumentation: Instrumentation | None, config: Mapping[str, Any]) -> Instrumentation:
    """``instrumentation``, or else the shared setup ``config`` (the :class:`SetupOptions`) describes."""
    if instrumentation is not None:
        return instrumentation
    return shared_instrumentation(**config)


def instrument_stream(
    stream: _Stream,
    *,
    conversation: Conversation | None = None,
    instrumentation: Instrumentation | None = None,
    **config: Unpack[SetupOptions],
) -> _Stream:
    """Observe a stream of Chat Completions chunks (sync or async); a transparent proxy of ``stream``.

    Without ``instrumentation``, the shared setup of ``config`` (see :class:`SetupOptions`).
    """
    return _instrumentation(instrumentation, config).stream(stream, conversation=conversation)


@overload
def instrument_assembler(
    assembler: _Assembler,
    *,
    conversation: Conversation | None = None,
    instrumentation: Instrumentation | None = None,
    adapter: None = None,
    protocol: WireProtocol | str = ...,
    **config: Unpack[SetupOptions],
) -> _Assembler: ...


@overload
def instrument_assembler(
    assembler: _T,
    *,
    conversation: Conversation | None = None,
    instrumentation: Instrumentation | None = None,
    adapter: AssemblerAdapter,
    protocol: WireProtocol | str = ...,
    **config: Unpack[SetupOptions],
) -> _T: ...


def instrument_assembler(
    assembler: _T,
    *,
    conversation: Conversation | None = None,
    instrumentation: Instrumentation | None = None,
    adapter: AssemblerAdapter | None = None,
    protocol: WireProtocol | str = CHAT_COMPLETIONS,
    **config: Unpack[SetupOptions],
) -> _T:
    """Observe any assembler fed with a ``protocol``'s events. See :class:`~etf_otel.instrumentation.ObservedAssembler`.

    ``adapter`` names its methods (:class:`AssemblerAdapter`); without it, those of a
    :class:`ChunkAssembler`.
    """
    return _instrumentation(instrumentation, config).assembler(
        assembler, conversation=conversation, adapter=adapter or DEFAULT_ADAPTER, protocol=protocol
    )


@overload
def instrument_host(
    host: _Host,
    *,
    conversation: Conversation | None = None,
    instrumentation: Instrumentation | None = None,
    guard: bool | None = None,
    record_unverified_ids: bool = False,
    **config: Unpack[SetupOptions],
) -> _Host: ...


@overload
def instrument_host(
    host: _T,
    *,
    method: str,
    conversation: Conversation | None = None,
    instrumentation: Instrumentation | None = None,
    guard: bool | None = None,
    record_unverified_ids: bool = False,
    **config: Unpack[SetupOptions],
) -> _T: ...


def instrument_host(
    host: _T,
    *,
    method: str = "execute",
    conversation: Conversation | None = None,
    instrumentation: Instrumentation | None = None,
    guard: bool | None = None,
    record_unverified_ids: bool = False,
    **config: Unpack[SetupOptions],
) -> _T:
    """Observe (or, with ``guard=True``, guard) a tool host's executions.

    Without ``instrumentation``, the shared setup of ``config``: the one the streams and
    assemblers instrumented with the same providers and options record their proposals in.
    """
    return _instrumentation(instrumentation, config).host(
        host, method=method, conversation=conversation, guard=guard, record_unverified_ids=record_unverified_ids
    )
