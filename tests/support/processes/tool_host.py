"""A tool-host process: executes the calls it reads on stdin (one JSON object per line, with
the caller's W3C trace context) through an instrumented host and exports over OTLP/HTTP.

``execute`` is the list of call ids to run, in order (an id may repeat; an unknown id is run
with the first call's context). Run by ``tests/audit/test_multiprocess_audit.py``.
Usage: tool_host.py OTLP_TRACES_URL ID...
"""

from __future__ import annotations

import json
import sys
from typing import Any

from opentelemetry import context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from etf_otel.instrumentation import Instrumentation


def run_tool(call: dict[str, Any]) -> str:
    return f"ran {call['function']['name']}"


def main(endpoint: str, execute: list[str]) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "tool-host"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=5)))
    meters = MeterProvider()
    # Another process proposed these calls: record the ids it hands us.
    host = Instrumentation(provider, meters).host(run_tool, record_unverified_ids=True)
    calls = {line["id"]: line for line in map(json.loads, sys.stdin) if line}
    first = next(iter(calls.values()))
    propagator = TraceContextTextMapPropagator()
    for call_id in execute:
        known = calls.get(call_id, first)
        token = context.attach(propagator.extract(known["context"]))
        try:
            host({"id": call_id, "function": {"name": known["name"], "arguments": known["arguments"]}})
        finally:
            context.detach(token)
    provider.shutdown()
    meters.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
