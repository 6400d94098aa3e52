"""Manual setup of a test process with the MCP instrumentations in a chosen order (coexistence tests).

``ETF_TEST_ORDER`` is a comma-separated list of ``etf`` (etf-otel's ``openai`` and ``mcp``
instrumentors), ``openinference`` (``openinference-instrumentation-mcp``) and ``openllmetry``
(``opentelemetry-instrumentation-mcp``), instrumented in that order after the ``mcp`` modules are
imported. The process exports to ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as ``OTEL_SERVICE_NAME``.
"""

from __future__ import annotations

import atexit
import os
import sys

import mcp.client.stdio
import mcp.client.streamable_http
import mcp.server.stdio
import mcp.server.streamable_http  # noqa: F401  (imported before the peers wrap them)
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def instrument_in_order() -> None:
    order = [name for name in os.environ.get("ETF_TEST_ORDER", "").split(",") if name]
    if not order:
        return
    provider = TracerProvider(resource=Resource.create({"service.name": os.environ["OTEL_SERVICE_NAME"]}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=50))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)
    for name in order:
        if name == "etf":
            from etf_otel.integrations.mcp._instrumentor import MCPInstrumentor
            from etf_otel.integrations.openai._instrumentor import OpenAIInstrumentor

            OpenAIInstrumentor().instrument()
            MCPInstrumentor().instrument()
        elif name == "openinference":
            from openinference.instrumentation.mcp import MCPInstrumentor as OpenInferenceMCP

            OpenInferenceMCP().instrument()
        elif name == "openllmetry":
            from opentelemetry.instrumentation.mcp import McpInstrumentor

            try:  # 0.62.4 fails half-way on mcp 2.x (it looks for names 2.x renamed); it stays installed
                McpInstrumentor().instrument()
            except Exception as error:
                print(f"openllmetry: {type(error).__name__}", file=sys.stderr)
