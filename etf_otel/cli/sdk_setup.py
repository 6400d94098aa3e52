"""OpenTelemetry SDK setup for the command line only (``replay --export``, ``demo``).

The library never configures providers; the CLI is an application, so it does, and
keeps its providers local (never set as the global ones) so that the same process can
be embedded in tests.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

__all__ = ["SdkSetup", "otlp_configured", "setup_sdk"]

_OTLP_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def otlp_configured() -> bool:
    """Whether the standard ``OTEL_EXPORTER_OTLP_*`` variables point at a collector."""
    return any(os.environ.get(name) for name in _OTLP_VARIABLES)


@dataclass
class SdkSetup:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    destination: str
    """Where telemetry goes, for people; empty when only in-process readers get it."""

    def shutdown(self) -> None:
        """Flush and stop: everything recorded so far is exported before this returns."""
        self.tracer_provider.force_flush()
        self.meter_provider.force_flush()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def _otlp_exporters() -> tuple[SpanExporter, MetricExporter, str]:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        return GrpcSpans(), GrpcMetrics(), "OTLP/gRPC"
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

    return HttpSpans(), HttpMetrics(), "OTLP/HTTP"


def setup_sdk(
    service_name: str,
    export_path: str | Path | None = None,
    *,
    extra_readers: Sequence[MetricReader] = (),
) -> SdkSetup:
    """Providers exporting to ``export_path`` (OTLP JSON lines) or to OTLP when configured.

    Without either, the providers export nowhere but to ``extra_readers`` (and the span
    processors the caller adds).
    """
    span_exporter: SpanExporter | None = None
    readers: list[MetricReader] = list(extra_readers)
    destination = ""
    if export_path is not None:
        from opentelemetry.exporter.otlp.json.file import FileMetricExporter, FileSpanExporter

        Path(export_path).parent.mkdir(parents=True, exist_ok=True)
        span_exporter = FileSpanExporter(str(export_path))
        readers.append(PeriodicExportingMetricReader(FileMetricExporter(str(export_path)), 60_000))
        destination = f"{export_path} (OTLP JSON lines)"
    elif otlp_configured():
        span_exporter, metric_exporter, destination = _otlp_exporters()
        readers.append(PeriodicExportingMetricReader(metric_exporter, 60_000))
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name})
    tracer_provider = TracerProvider(resource=resource)
    if span_exporter is not None:
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    return SdkSetup(tracer_provider, meter_provider, destination)
