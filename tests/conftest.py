"""Shared fixtures: in-memory exporters and readers injected, never global providers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from etf_otel.instrumentation import Instrumentation
from etf_otel.instrumentation._safety import set_strict
from etf_otel.testing import Capture


class Captured(Capture):
    """What one test's instrumentation exported (in-memory providers of its own, never the global ones)."""

    def instrumentation(self, **config: Any) -> Instrumentation:
        return Instrumentation(self.tracer_provider, self.meter_provider, **config)


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
