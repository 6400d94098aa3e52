"""Zero-code instrumentation: a plain ``openai`` app that knows nothing about etf-otel.

There is no ``etf_otel`` (and no OpenTelemetry) import here. Run it under the
OpenTelemetry launcher, which loads every installed instrumentor through the
``opentelemetry_instrumentor`` entry point (etf-otel's is named ``etf_otel_openai``)::

    pip install '/path/to/etf-otel[openai]' opentelemetry-distro  # a clone: etf-otel is on no package index
    OTEL_SERVICE_NAME=zero-code-example \\
    opentelemetry-instrument --traces_exporter console --metrics_exporter none --logs_exporter none \\
        python examples/zero_code.py

The client is configured by the usual ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` variables
(any Chat Completions server, such as a local test server); the model by ``OPENAI_MODEL``.
The app streams one response that asks for a tool, assembles the tool call with the SDK's
own helper, and prints the call id it would answer with. The launcher's exporter prints
the ``assemble_tool_call`` span, whose ``gen_ai.tool.call.id`` is that same id.

The console exporter is for reading; to audit the spans, export OTLP JSON instead (the
``cli`` extra brings the exporter and ``etf-otel``), as the README's quickstart does::

    OTEL_TRACES_EXPORTER=otlp_json_file OTEL_METRICS_EXPORTER=none OTEL_LOGS_EXPORTER=none \\
        opentelemetry-instrument python examples/zero_code.py > spans.jsonl
    etf-otel audit spans.jsonl
"""

from __future__ import annotations

import os

import openai

TOOLS: list[dict[str, object]] = [
    {
        "type": "function",
        "function": {
            "name": "read_page",
            "description": "Read one page of the source document.",
            "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}, "required": ["page"]},
        },
    }
]


def main() -> None:
    client = openai.OpenAI(max_retries=0)
    model = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
    with client.chat.completions.stream(
        model=model,
        messages=[{"role": "user", "content": "Read page 1 of the report."}],
        tools=TOOLS,  # type: ignore[arg-type]
    ) as stream:
        for _ in stream:
            pass
        message = stream.get_final_completion().choices[0].message
    for call in message.tool_calls or []:
        print(f"tool call {call.function.name} id={call.id} arguments={call.function.arguments}")
    client.close()


if __name__ == "__main__":
    main()
