"""A plain agent: the ``openai`` client asks the model, the tools run on two MCP servers.

No etf-otel import: run it under ``opentelemetry-instrument`` (``run.py`` does), and etf-otel's
instrumentors observe the streamed tool calls (``etf_otel``) and carry each call's id to the
server that executes it (``etf_otel_mcp``, which matches ``call_tool(name, arguments)`` to the
proposal with that name and those arguments). ``read_page`` runs on a server started over stdio,
``word_count`` on one over Streamable HTTP (``MCP_HTTP_URL``). ``MCP_DUPLICATE=1`` runs
``read_page`` on both servers, the mistake ``etf-otel audit`` then reports as a duplicate execution.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import openai
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import trace

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_page",
            "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}, "required": ["page"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "word_count",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        },
    },
]


async def run_tools(calls: list[Any]) -> list[dict[str, Any]]:
    """Each call on the server that hosts its tool; the tool messages of the next request."""
    stdio = StdioServerParameters(
        command=str(BIN / "opentelemetry-instrument"),
        args=[str(BIN / "python"), str(HERE / "server.py"), "stdio"],
        env=dict(os.environ, OTEL_SERVICE_NAME="report-tools-stdio"),
    )
    messages = []
    async with stdio_client(stdio) as (read, write), ClientSession(read, write) as on_stdio:
        async with streamable_http_client(os.environ["MCP_HTTP_URL"]) as (h_read, h_write, *_):
            async with ClientSession(h_read, h_write) as on_http:
                await on_stdio.initialize()
                await on_http.initialize()
                for call in calls:
                    name, arguments = call.function.name, json.loads(call.function.arguments)
                    sessions = [on_stdio] if name == "read_page" else [on_http]
                    if name == "read_page" and os.environ.get("MCP_DUPLICATE") == "1":
                        sessions.append(on_http)
                    for session in sessions:
                        result = await session.call_tool(name, arguments)
                    text = " ".join(getattr(part, "text", "") for part in result.content)
                    print(f"{name}({arguments}) -> {text}")
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return messages


def main() -> None:
    client = openai.OpenAI(max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "How did revenue do? Count the words of page 1 too."}]
    with trace.get_tracer("mcp-agent-example").start_as_current_span("agent turn"):
        with client.chat.completions.stream(model="gpt-4o-mini", messages=messages, tools=TOOLS) as stream:  # type: ignore[arg-type]
            for _ in stream:
                pass
            message = stream.get_final_completion().choices[0].message
        calls = message.tool_calls or []
        tool_messages = anyio.run(run_tools, calls)
        assistant = {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in calls
            ],
        }
        follow_up = [*messages, assistant, *tool_messages]
        answer = client.chat.completions.create(model="gpt-4o-mini", messages=follow_up, stream=True)  # type: ignore[arg-type]
        print("".join(chunk.choices[0].delta.content or "" for chunk in answer if chunk.choices))
    client.close()


if __name__ == "__main__":
    main()
