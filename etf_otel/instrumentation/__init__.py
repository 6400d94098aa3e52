"""Instrumentation: wrappers for any stream, assembler and tool host (OpenTelemetry API only).

* :class:`Instrumentation` is one setup; its ``stream``, ``assembler`` and ``host``
  methods wrap objects so that they share state (links, guard mode).
* ``instrument_stream``, ``instrument_assembler`` and ``instrument_host`` do the same in one
  line, sharing one setup per providers and options.
* :class:`ChunkAssembler`, :class:`ToolHost` (or a :data:`ToolFunction`) and
  :class:`AssemblerAdapter` describe what the wrappers accept. Each wrapper returns the
  caller's object type: it is a transparent proxy, ``isinstance`` included.
"""

from etf_otel.errors import GuardRefusedError
from etf_otel.instrumentation._assemblers import AssemblerAdapter, CallsReader, ChunkAssembler, ObservedAssembler
from etf_otel.instrumentation._convenience import SetupOptions, instrument_assembler, instrument_host, instrument_stream
from etf_otel.instrumentation._host import ObservedHost, ToolFunction, ToolHost
from etf_otel.instrumentation._observer import ResponseObserver
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._streams import ObservedAsyncStream, ObservedDualStream, ObservedStream, observer_of
from etf_otel.instrumentation._telemetry import Telemetry

__all__ = [
    "AssemblerAdapter",
    "CallsReader",
    "ChunkAssembler",
    "GuardRefusedError",
    "Instrumentation",
    "ObservedAssembler",
    "ObservedAsyncStream",
    "ObservedDualStream",
    "ObservedHost",
    "ObservedStream",
    "ResponseObserver",
    "SetupOptions",
    "Telemetry",
    "ToolFunction",
    "ToolHost",
    "instrument_assembler",
    "instrument_host",
    "instrument_stream",
    "observer_of",
]
