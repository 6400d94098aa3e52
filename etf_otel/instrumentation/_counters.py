"""The etf-otel counters, summed in plain dictionaries and reported through observable counters.

Why not synchronous ``Counter.add``: in the SDK one ``add`` costs 5-8 µs (a measurement
object, attribute hashing, view matching, the exemplar filter), and a finalized response
makes five to ten of them, more than its spans' share of the budget (issue 7). Here a
response adds its counts to dictionaries under one lock (well under a microsecond per
point) and the SDK sees the running totals only when a reader collects. The exported data
is the same: a monotonic sum per attribute set, cumulative or delta as the reader asks.

One :class:`CounterTotals` exists per meter provider (:func:`totals_for`): the SDK keeps
the callbacks of the first observable counter registered under a name and silently
ignores later ones, so every :class:`~etf_otel.instrumentation._telemetry.Telemetry` of a provider must
share the same totals.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.util.types import AttributeValue

from etf_otel import attributes as A
from etf_otel._version import __version__
from etf_otel.core._results import AssemblyResult
from etf_otel.core._vocabulary import VALUE_OF, ErrorCategory, StreamState
from etf_otel.instrumentation._safety import internal_errors_swallowed

__all__ = ["COUNTERS", "REQUEST_PAIRING_PROBLEMS", "CounterSpec", "CounterTotals", "totals_for"]

Key = tuple[AttributeValue | None, ...]
"""The attribute values of one point, in the order of its counter's ``attributes``; ``None`` omits one."""


@dataclass(frozen=True, eq=False)
class CounterSpec:
    """One counter. Compared and hashed by identity: the specs are module constants, used as
    dict keys on every response (a generated field-wise ``__hash__`` costs more than that)."""

    name: str
    unit: str
    description: str
    attributes: tuple[str, ...]
    """Attribute names, in the order of the keys; the provider name always comes last."""


FRAGMENTS: Final = CounterSpec(
    A.METRIC_FRAGMENTS, "{fragment}", "Streamed tool-call fragments observed.", (A.GEN_AI_PROVIDER_NAME,)
)
ID_TRANSITIONS: Final = CounterSpec(
    A.METRIC_ID_TRANSITIONS,
    "{fragment}",
    "Identity decisions by transition and id kind.",
    (A.ETF_ID_TRANSITION, A.ETF_ID_KIND, A.GEN_AI_PROVIDER_NAME),
)
IDENTITY_ERRORS: Final = CounterSpec(
    A.METRIC_IDENTITY_ERRORS,
    "{fragment}",
    "Fragments rejected by the identity rules.",
    (A.ETF_ERROR_CATEGORY, A.ETF_ID_KIND, A.ETF_ID_PRIOR_PRESENT, A.ETF_ID_EMPTY, A.GEN_AI_PROVIDER_NAME),
)
INTEGRITY_VIOLATIONS: Final = CounterSpec(
    A.METRIC_INTEGRITY_VIOLATIONS,
    "{violation}",
    "Linkage and assembly integrity problems, and responses that ended incomplete.",
    (A.ETF_ERROR_CATEGORY, A.GEN_AI_PROVIDER_NAME),
)
LINKAGE_DRIFT: Final = CounterSpec(
    A.METRIC_LINKAGE_DRIFT,
    "{record}",
    "Follow-up requests whose history differs from the proposals without breaking anything (not violations).",
    (A.ETF_DIVERGENCE_KIND, A.GEN_AI_PROVIDER_NAME),
)
TOOL_CALLS: Final = CounterSpec(
    A.METRIC_TOOL_CALLS,
    "{call}",
    "Finalized tool calls by verdict.",
    (A.ETF_TOOL_CALL_VERDICT, A.GEN_AI_TOOL_NAME, A.GEN_AI_PROVIDER_NAME),
)
STREAMS: Final = CounterSpec(
    A.METRIC_STREAMS,
    "{stream}",
    "Streamed responses by end state and wire protocol.",
    (A.ETF_STREAM_STATE, A.ETF_PROTOCOL, A.GEN_AI_PROVIDER_NAME),
)
REQUEST_PAIRING_PROBLEMS: Final = CounterSpec(
    A.METRIC_REQUEST_PAIRING_PROBLEMS,
    "{problem}",
    "Problems of requests whose history the provider refuses for its pairing of calls and results.",
    (A.ETF_PAIRING_PROBLEM, A.ETF_PAIRING_REASON, A.GEN_AI_PROVIDER_NAME),
)
COUNTERS: Final = (
    FRAGMENTS,
    ID_TRANSITIONS,
    IDENTITY_ERRORS,
    INTEGRITY_VIOLATIONS,
    LINKAGE_DRIFT,
    TOOL_CALLS,
    STREAMS,
    REQUEST_PAIRING_PROBLEMS,
)

_INCOMPLETE: Final = ErrorCategory.INCOMPLETE_RESPONSE.value


class CounterTotals:
    """Running totals of every etf-otel counter of one meter provider.

    A response is added with :meth:`add_response`, which takes :attr:`lock` once; other writers
    use :meth:`add`. The reader's callbacks copy the totals under the same lock. The number of
    keys is bounded by the attributes' cardinality (enums, the capped tool names, the provider
    names, the wire protocols).
    """

    def __init__(self, meter: metrics.Meter) -> None:
        self.lock = threading.Lock()
        self._totals: dict[CounterSpec, dict[Key, int]] = {spec: {} for spec in COUNTERS}
        self._attributes: dict[tuple[CounterSpec, Key], dict[str, AttributeValue]] = {}
        for spec in COUNTERS:
            with internal_errors_swallowed("registering a counter"):  # then it is counted, never reported
                meter.create_observable_counter(
                    spec.name, callbacks=[self._callback(spec)], unit=spec.unit, description=spec.description
                )

    def add(self, spec: CounterSpec, key: Key, amount: int = 1) -> None:
        with self.lock:
            totals = self._totals[spec]
            totals[key] = totals.get(key, 0) + amount

    def add_response(
        self,
        result: AssemblyResult,
        state: StreamState,
        provider: AttributeValue | None,
        protocol: str | None,
        tool_name: Callable[[str | None], str],
        incomplete: bool,
    ) -> None:
        """Add one finalized response to every counter it touches, under one lock.

        ``protocol`` labels ``etf.streams`` only. An ``incomplete`` response is ``completed`` on
        ``etf.streams`` (its closed set of states has no other value for it), so it is also
        counted once on ``etf.integrity.violations`` as ``incomplete_response``: that is what
        makes its share alertable.
        """
        calls: dict[Key, int] = {}  # one point per distinct (verdict, tool name), not per call
        for call in result.calls:
            key: Key = (VALUE_OF[call.verdict], tool_name(call.name), provider)
            calls[key] = calls.get(key, 0) + 1
        tables = self._totals
        with self.lock:
            totals = tables[FRAGMENTS]
            totals[provider,] = totals.get((provider,), 0) + result.fragments
            totals = tables[ID_TRANSITIONS]
            for decision, count in result.decision_counts:
                key = (VALUE_OF[decision.transition], VALUE_OF[decision.id_kind], provider)
                totals[key] = totals.get(key, 0) + count
            totals = tables[IDENTITY_ERRORS]
            for (decision, category), count in result.identity_error_counts:
                key = (
                    VALUE_OF[category],
                    VALUE_OF[decision.id_kind],
                    decision.prior_id_present,
                    decision.id_empty,
                    provider,
                )
                totals[key] = totals.get(key, 0) + count
            totals = tables[STREAMS]
            key = (VALUE_OF[state], protocol, provider)
            totals[key] = totals.get(key, 0) + 1
            if incomplete:
                totals = tables[INTEGRITY_VIOLATIONS]
                key = (_INCOMPLETE, provider)
                totals[key] = totals.get(key, 0) + 1
            totals = tables[TOOL_CALLS]
            for call_key, count in calls.items():
                totals[call_key] = totals.get(call_key, 0) + count

    def _callback(self, spec: CounterSpec) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterator[Observation]:
            with self.lock:
                points = list(self._totals[spec].items())
            for key, total in points:
                yield Observation(total, self._point_attributes(spec, key))

        return observe

    def _point_attributes(self, spec: CounterSpec, key: Key) -> dict[str, AttributeValue]:
        attributes = self._attributes.get((spec, key))
        if attributes is None:
            attributes = {name: value for name, value in zip(spec.attributes, key, strict=True) if value is not None}
            self._attributes[spec, key] = attributes
        return attributes


_by_provider: weakref.WeakKeyDictionary[object, CounterTotals] = weakref.WeakKeyDictionary()
_global_totals: CounterTotals | None = None
_by_provider_lock = threading.Lock()


def totals_for(meter_provider: metrics.MeterProvider | None) -> CounterTotals:
    """The totals of ``meter_provider`` (the global one when ``None``), created once.

    The global provider has one set of totals whether it was set before or after they were
    created: before, the API's proxy meter forwards the counters to the provider set later.
    """
    global _global_totals
    global_provider = metrics.get_meter_provider()
    provider = meter_provider if meter_provider is not None else global_provider
    with _by_provider_lock:
        if provider is global_provider:
            if _global_totals is None:
                _global_totals = CounterTotals(metrics.get_meter(A.INSTRUMENTATION_NAME, __version__))
            return _global_totals
        try:
            totals = _by_provider.get(provider)
        except TypeError:  # a provider that cannot be weakly referenced: its own totals
            return CounterTotals(metrics.get_meter(A.INSTRUMENTATION_NAME, __version__, provider))
        if totals is None:
            meter = metrics.get_meter(A.INSTRUMENTATION_NAME, __version__, provider)
            totals = _by_provider[provider] = CounterTotals(meter)
        return totals
