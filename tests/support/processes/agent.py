"""An agent process: streams two recorded responses through the instrumentation, exports its
spans over OTLP/HTTP, and prints each proposal with the W3C trace context a tool host needs.

Run by ``tests/audit/test_multiprocess_audit.py`` as its own OS process.
Usage: agent.py OTLP_TRACES_URL RECORDING...
"""

from __future__ import annotations

import json
import sys

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from etf_otel import ReferenceAssembler
from etf_otel.instrumentation import Instrumentation
from etf_otel.recordings import read_chunks


def main(endpoint: str, recordings: list[str]) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=5)))
    meters = MeterProvider()
    instrumentation = Instrumentation(provider, meters)
    tracer = provider.get_tracer("agent")
    propagator = TraceContextTextMapPropagator()
    for recording in recordings:
        with tracer.start_as_current_span(f"turn {recording.rsplit('/', 1)[-1]}"):
            chunks = list(read_chunks(recording))
            assembler = ReferenceAssembler()
            for chunk in instrumentation.stream(iter(chunks)):
                assembler.feed(chunk)
            carrier: dict[str, str] = {}
            propagator.inject(carrier)
            for call in assembler.finish().proposals:
                line = {"id": call.id, "name": call.name, "arguments": call.arguments, "context": carrier}
                print(json.dumps(line), flush=True)
    provider.shutdown()
    meters.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
