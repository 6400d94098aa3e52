"""Shared fixtures: in-memory exporters and readers injected, never global providers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from etf_otel.instrumentation import Instrumentation
from etf_otel.instrumentation._safety import set_strict


class Captured:
    """What one test's instrumentation exported."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrumentation(self, **config: Any) -> Instrumentation:
        return Instrumentation(self.tracer_provider, self.meter_provider, **config)

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [span for span in self.exporter.get_finished_spans() if span.name.startswith(prefix)]

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """metric name -> [(attributes, value or histogram point)]"""
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
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

    def metric_sum(self, name: str, **match: Any) -> Any:
        return sum(
            value
            for attributes, value in self.metrics().get(name, [])
            if all(attributes.get(key.replace("__", ".")) == expected for key, expected in match.items())
        )


@pytest.fixture
def captured() -> Iterator[Captured]:
    previous = set_strict(True)
    try:
        yield Captured()
    finally:
        set_strict(previous)


class Process:
    """One instrumented process exporting to its own OTLP JSON lines file."""

    def __init__(self, path: Path, service: str) -> None:
        self.path = path
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(str(path))))
        self.meters = MeterProvider()
        self.tracer = self.provider.get_tracer("agent")
        self.closed = False

    def instrumentation(self, **config: Any) -> Instrumentation:
        return Instrumentation(self.provider, self.meters, **config)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.provider.shutdown()
            self.meters.shutdown()


@pytest.fixture
def process(tmp_path: Path) -> Iterator[Callable[..., Process]]:
    """Instrumented "processes", each exporting OTLP JSON lines to its own file (strict mode on)."""
    previous = set_strict(True)
    made: list[Process] = []

    def make(name: str = "traces.jsonl", service: str = "agent") -> Process:
        made.append(Process(tmp_path / name, service))
        return made[-1]

    try:
        yield make
    finally:
        for one in made:
            one.close()
        set_strict(previous)
