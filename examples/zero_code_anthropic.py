"""Zero-code instrumentation: a plain ``anthropic`` app that knows nothing about etf-otel.

There is no ``etf_otel`` (and no OpenTelemetry) import here. Run it under the
OpenTelemetry launcher, which loads every installed instrumentor through the
``opentelemetry_instrumentor`` entry point (etf-otel's for this client is named
``etf_otel_anthropic``; ``etf_otel`` is the one for ``openai``)::

    pip install '/path/to/etf-otel[anthropic]' opentelemetry-distro  # a clone: etf-otel is on no package index
    OTEL_SERVICE_NAME=zero-code-example \\
    opentelemetry-instrument --traces_exporter console --metrics_exporter none --logs_exporter none \\
        python examples/zero_code_anthropic.py

The client is configured by the usual ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``
variables (the Anthropic API, or any server speaking the Messages API, such as a local test
server); the model by ``ANTHROPIC_MODEL``. The app streams one message that asks for a
tool with the SDK's ``messages.stream(...)`` helper and prints the ``tool_use`` id it would
answer with. The launcher's exporter prints the ``assemble_tool_call`` span, whose
``gen_ai.tool.call.id`` is that same id.
"""

from __future__ import annotations

import json
import os

import anthropic

TOOLS: list[dict[str, object]] = [
    {
        "name": "read_page",
        "description": "Read one page of the source document.",
        "input_schema": {"type": "object", "properties": {"page": {"type": "integer"}}, "required": ["page"]},
    }
]


def main() -> None:
    client = anthropic.Anthropic(max_retries=0)
    model = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-5-5")
    with client.messages.stream(
        model=model,
        max_tokens=1024,
        messages=[{"role": "user", "content": "Read page 1 of the report."}],
        tools=TOOLS,  # type: ignore[arg-type]
    ) as stream:
        message = stream.get_final_message()
    for block in message.content:
        if block.type == "tool_use":
            print(f"tool call {block.name} id={block.id} input={json.dumps(block.input, separators=(',', ':'))}")
    print(f"stop_reason={message.stop_reason}")
    client.close()


if __name__ == "__main__":
    main()
