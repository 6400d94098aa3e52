"""Instrumentation: wrappers for any stream, assembler and tool host (OpenTelemetry API only)."""

from etf_otel.instrumentation.wrappers import (
    GuardRefusedError,
    Instrumentation,
    ObservedAssembler,
    ObservedAsyncStream,
    ObservedHost,
    ObservedStream,
    ResponseObserver,
    instrument_assembler,
    instrument_host,
    instrument_stream,
)

__all__ = [
    "GuardRefusedError",
    "Instrumentation",
    "ObservedAssembler",
    "ObservedAsyncStream",
    "ObservedHost",
    "ObservedStream",
    "ResponseObserver",
    "instrument_assembler",
    "instrument_host",
    "instrument_stream",
]
