"""In-memory telemetry for tests: a tracer and a meter provider of their own, never the global ones.

Why not the global providers: OpenTelemetry lets them be set once per process, so a test suite
that sets them cannot give each test a clean slate. Handing ``capture.tracer_provider`` and
``capture.meter_provider`` to the instrumentor (``instrument(tracer_provider=..., meter_provider=...)``)
or to :class:`~etf_otel.instrumentation.Instrumentation` keeps each test's telemetry its own.

The OpenTelemetry SDK is imported when a :class:`Capture` is made, not before: the base install
of etf-otel has no SDK, and importing this package must not need one.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["SDK_MISSING", "Capture", "MetricPoint", "capture"]

SDK_MISSING = (
    "etf_otel.testing.capture() needs the OpenTelemetry SDK, which the base install of etf-otel leaves "
    "to the application: pip install opentelemetry-sdk, or install etf-otel with the cli extra: 'etf-otel[cli]'"
)

MetricPoint = tuple[dict[str, Any], Any]
"""``(attributes, value)`` of one data point; the value is the point itself for a histogram."""


class Capture:
    """A :class:`TracerProvider` exporting to memory and a :class:`MeterProvider` read from memory."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def __init__(self) -> None:
        try:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import InMemoryMetricReader
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        except ImportError as missing:
            raise ModuleNotFoundError(SDK_MISSING, name=missing.name) from missing
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        """The finished spans whose name starts with ``prefix``, in the order they ended."""
        return [span for span in self.exporter.get_finished_spans() if span.name.startswith(prefix)]

    def span(self, name: str) -> ReadableSpan:
        """The one finished span named ``name``; ``AssertionError`` if there is none or several."""
        found = [span for span in self.exporter.get_finished_spans() if span.name == name]
        if len(found) != 1:
            names = [span.name for span in self.spans()]
            raise AssertionError(f"{len(found)} finished spans named {name!r}; finished: {names}")
        return found[0]

    def metrics(self) -> dict[str, list[MetricPoint]]:
        """Every metric collected now: its name to its data points."""
        out: dict[str, list[MetricPoint]] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return out
        for resource_metrics in data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", point)
                        out.setdefault(metric.name, []).append((dict(point.attributes or {}), value))
        return out

    def points(self, name: str) -> Sequence[MetricPoint]:
        """The data points of the metric ``name`` (none if it was never recorded)."""
        return self.metrics().get(name, [])

    def metric_sum(self, name: str, **match: Any) -> Any:
        """The sum of the metric's values whose attributes match; ``etf__protocol=`` matches ``etf.protocol``."""
        return sum(
            value
            for attributes, value in self.points(name)
            if all(attributes.get(key.replace("__", ".")) == expected for key, expected in match.items())
        )

    def clear(self) -> None:
        """Forget the finished spans (metrics are cumulative and stay)."""
        self.exporter.clear()

    def shutdown(self) -> None:
        """Shut both providers down; later spans and metrics are dropped."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    def __enter__(self) -> Capture:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()


def capture() -> Capture:
    """A fresh :class:`Capture`; usable as a context manager that shuts its providers down."""
    return Capture()
