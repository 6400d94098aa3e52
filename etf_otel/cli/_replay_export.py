"""``etf-otel replay --export PATH``: the telemetry the real instrumentation emits for the recording.

Its own module because it is the one part of ``replay`` that runs the OpenTelemetry SDK (imported
when ``--export`` is given); :mod:`etf_otel.cli._replay` reads, assembles and reports.
"""

from __future__ import annotations

import argparse
import errno
import io
import os
from collections.abc import Sequence
from pathlib import Path

from etf_otel.cli._replay_input import Recording

__all__ = ["export_telemetry"]


def export_telemetry(recording: Recording, args: argparse.Namespace) -> None:
    """Run the recording through the real instrumentation; append its telemetry to ``args.export``.

    The telemetry is collected in memory and written here, in one go: a path that cannot be
    written (a directory, a full disk) is an ``OSError`` for the caller, never the SDK
    exporters' logged tracebacks.
    """
    path = Path(args.export)
    if not path.parent.is_dir():  # as --html: a typo in the directory must not create a tree somewhere
        raise FileNotFoundError(errno.ENOENT, f"no directory {os.fspath(path.parent) or '.'}")
    text = _telemetry(recording, args.allow, args.deny)
    with open(path, "a", encoding="utf-8") as out:  # the OTLP JSON file exporters append too
        out.write(text)


def _telemetry(recording: Recording, allow: Sequence[str], deny: Sequence[str] = ()) -> str:
    """What the instrumentation emits for the recording, as OTLP JSON lines (spans, then metrics)."""
    from opentelemetry.exporter.otlp.json.file import FileMetricExporter, FileSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from etf_otel.instrumentation import Instrumentation

    buffer = io.StringIO()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "etf-otel-replay"})
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    tracer_provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(stream=buffer)))
    reader = PeriodicExportingMetricReader(FileMetricExporter(stream=buffer), export_interval_millis=60_000)
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    instrumentation = Instrumentation(tracer_provider, meter_provider, allow=allow, deny=deny)
    if recording.body is not None:
        instrumentation.response(recording.body, protocol=recording.protocol)
    else:
        for _ in instrumentation.stream(iter(recording.events), protocol=recording.protocol):
            pass
    tracer_provider.shutdown()  # exports every span left
    meter_provider.shutdown()  # collects and exports the metrics once
    return buffer.getvalue()
