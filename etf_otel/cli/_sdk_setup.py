"""OpenTelemetry SDK setup for the command line only (``demo``).

The library never configures providers; the CLI is an application, so it does, and
keeps its providers local (never set as the global ones) so that the same process can
be embedded in tests. Telemetry leaves the process only where the command line says:
``--export FILE``, or ``--otlp`` for the collector of the standard ``OTEL_EXPORTER_OTLP_*``
variables, which are read only then (a collector configured in the shell is not a request).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

__all__ = ["OTLP_MISSING", "CountingSpanExporter", "SdkSetup", "otlp_configured", "otlp_endpoint", "setup_sdk"]

_OTLP_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
OTLP_MISSING = "--otlp needs the collector's address in OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT)"


def otlp_endpoint() -> str:
    """The collector the standard variables name for spans (``""``: none); read for ``--otlp`` only."""
    return next((os.environ[name].strip() for name in _OTLP_VARIABLES if os.environ.get(name, "").strip()), "")


def otlp_configured() -> bool:
    """Whether the standard ``OTEL_EXPORTER_OTLP_*`` variables point at a collector."""
    return bool(otlp_endpoint())


class CountingSpanExporter(SpanExporter):
    """Forwards to ``inner`` and counts the spans it accepted and refused (the exporter's own results)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.accepted = 0
        self.refused = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.accepted += len(spans)
        else:
            self.refused += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


@dataclass
class SdkSetup:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    destination: str
    """Where telemetry goes, for people; empty when only in-process readers get it."""
    spans: CountingSpanExporter | None = None
    """The exporter to ``destination`` (``None`` without one): what it accepted so far."""

    def delivery(self, recorded: int) -> tuple[str, str]:
        """Where the telemetry went, for people, and what went wrong (``""``: all ``recorded`` spans arrived).

        The spans recorded so far are exported first: with an OTLP collector that does not
        answer, that takes the exporter's retries until its timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``).
        """
        if self.spans is None:
            return "exported to: this summary only (--export FILE, or --otlp)", ""
        self.tracer_provider.force_flush()
        accepted = self.spans.accepted
        problem = f"{self.destination} accepted {accepted} of {recorded} spans" if accepted < recorded else ""
        return f"exported to: {self.destination}, {accepted} of {recorded} spans accepted", problem

    def shutdown(self) -> None:
        """Flush and stop: everything recorded so far is exported before this returns.

        The metrics are exported once, by their reader's last collection at shutdown.
        """
        self.tracer_provider.force_flush()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def _otlp_exporters() -> tuple[SpanExporter, MetricExporter, str]:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        return GrpcSpans(), GrpcMetrics(), f"OTLP/gRPC {otlp_endpoint()}"
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

    return HttpSpans(), HttpMetrics(), f"OTLP/HTTP {otlp_endpoint()}"


def setup_sdk(
    service_name: str,
    export_path: str | Path | None = None,
    *,
    otlp: bool = False,
    extra_readers: Sequence[MetricReader] = (),
) -> SdkSetup:
    """Providers exporting to ``export_path`` (OTLP JSON lines), or with ``otlp`` to the configured collector.

    Without either, the providers export nowhere but to ``extra_readers`` (and the span
    processors the caller adds), whatever the environment says. ``otlp`` without a
    configured endpoint is a ``ValueError`` (:data:`OTLP_MISSING`); an unwritable
    ``export_path`` (or one in a directory that does not exist) an ``OSError``.
    """
    span_exporter: SpanExporter | None = None
    readers: list[MetricReader] = list(extra_readers)
    destination = ""
    if export_path is not None:
        from opentelemetry.exporter.otlp.json.file import FileMetricExporter, FileSpanExporter

        parent = Path(export_path).parent
        if not parent.is_dir():  # as --html: a typo in the directory must not create a tree somewhere
            raise FileNotFoundError(errno.ENOENT, f"no directory {os.fspath(parent) or '.'}")
        span_exporter = FileSpanExporter(str(export_path))
        readers.append(PeriodicExportingMetricReader(FileMetricExporter(str(export_path)), 60_000))
        destination = f"{export_path} (OTLP JSON lines)"
    elif otlp:
        if not otlp_configured():
            raise ValueError(OTLP_MISSING)
        span_exporter, metric_exporter, destination = _otlp_exporters()
        readers.append(PeriodicExportingMetricReader(metric_exporter, 60_000))
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name})
    tracer_provider = TracerProvider(resource=resource)
    counted = CountingSpanExporter(span_exporter) if span_exporter is not None else None
    if counted is not None:
        tracer_provider.add_span_processor(BatchSpanProcessor(counted))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    return SdkSetup(tracer_provider, meter_provider, destination, counted)
