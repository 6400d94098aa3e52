"""Manual instrumentation: an agent turn whose streamed tool call keeps its id end to end.

Run it with ``python examples/manual_instrumentation.py``.

- Model: with ``OPENAI_BASE_URL`` or ``OPENAI_API_KEY`` set, the real API (or a compatible
  server) is called, model ``OPENAI_MODEL`` (default ``gpt-4o-mini``). Otherwise a local
  scripted server (``etf_otel.testing.LocalChatServer``) replays the case study: the
  continuation fragment of the tool call carries ``"id": null``.
- Telemetry: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
  set, spans and metrics go to that OTLP/HTTP collector; otherwise spans are printed as JSON
  on stdout by ``ConsoleSpanExporter``.

The application sets up the OpenTelemetry SDK, calls ``instrument_openai(...)`` once,
streams a response with the ``openai`` client's own helper, and executes each tool call
through ``instrumentor.instrumentation.host(...)``: the ``execute_tool`` span then carries
the preserved ``gen_ai.tool.call.id`` and links to the ``assemble_tool_call`` span. The
tool results go back to the model in a second request, which closes the linkage checks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import openai
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from etf_otel.integrations.openai import instrument_openai

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "read_page",
            "description": "Read one page of the source document.",
            "parameters": {
                "type": "object",
                "properties": {"page": {"type": "integer"}},
                "required": ["page"],
            },
        },
    }
]
PAGES = {1: "The quarterly numbers are up 4%.", 2: "Costs are flat."}


def setup_telemetry() -> tuple[TracerProvider, MeterProvider]:
    """SDK providers for this app: OTLP/HTTP when configured by the environment, else the console."""
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "etf-otel-manual-example")})
    tracer_provider = TracerProvider(resource=resource)
    readers: list[MetricReader] = []
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    else:
        tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    return tracer_provider, MeterProvider(resource=resource, metric_readers=readers)


@contextmanager
def model_endpoint() -> Iterator[openai.OpenAI]:
    """The real API when configured, else a local server replaying the null-continuation case study."""
    if os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY"):
        with openai.OpenAI() as client:
            yield client
        return

    from etf_otel.testing import LocalChatServer, Script, chat

    first = chat.fragment(0, "call-a", "read_page", '{"page":', type="function")
    continuation = chat.fragment(0, None, arguments="1}")  # the id: null continuation of the case study
    with LocalChatServer() as server:
        server.enqueue(
            Script(events=chat.finished(chat.chunk(first), chat.chunk(continuation))),
            Script(
                events=chat.finished(chat.chunk(content="Page 1 says the numbers are up 4%."), finish_reason="stop")
            ),
        )
        with openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0) as client:
            yield client


def read_page(call: Any) -> str:
    """The tool host: authorizes nothing here, just runs the function the model asked for."""
    arguments = json.loads(call.function.arguments)
    return PAGES.get(int(arguments["page"]), "no such page")


def main() -> None:
    tracer_provider, meter_provider = setup_telemetry()
    instrumentor = instrument_openai(tracer_provider=tracer_provider, meter_provider=meter_provider)
    instrumentation = instrumentor.instrumentation
    assert instrumentation is not None
    host = instrumentation.host(read_page)
    model = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
    messages: list[Any] = [{"role": "user", "content": "What does page 1 of the report say? Use read_page."}]
    tracer = tracer_provider.get_tracer("manual-instrumentation-example")
    try:
        # One span for the agent turn: the response, its tool calls and their executions share its trace.
        with model_endpoint() as client, tracer.start_as_current_span("agent turn"):
            with client.chat.completions.stream(model=model, messages=messages, tools=TOOLS) as stream:
                for _ in stream:
                    pass
                message = stream.get_final_completion().choices[0].message
            tool_calls = message.tool_calls or []
            messages.append(message.model_dump(exclude_unset=True, exclude_none=True))
            for call in tool_calls:
                result = host(call)  # -> execute_tool span, linked to its assemble_tool_call span
                print(f"executed {call.function.name} with preserved call id {call.id}: {result}")
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            if tool_calls:
                answer = "".join(
                    chunk.choices[0].delta.content or ""
                    for chunk in client.chat.completions.create(model=model, messages=messages, stream=True)
                    if chunk.choices
                )
                print(f"answer: {answer}")
    finally:
        instrumentor.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()


if __name__ == "__main__":
    main()
