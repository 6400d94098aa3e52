"""An agent process for the MCP tests: the real ``openai`` client, then ``call_tool`` on real MCP servers.

Run under ``opentelemetry-instrument`` (zero-code: no etf-otel import but the explicit-id helper,
which only the ``explicit`` calls use). ``python agent.py < PLAN`` where ``PLAN`` is JSON:

- ``proposals``: ``[[call id, tool name, arguments text], ...]``, streamed by a local Chat
  Completions server (:class:`~etf_otel.testing.LocalChatServer`) as one response;
  ``conflict``: the first call's id changes mid-stream (``id_conflict``: nothing is dispatchable);
- ``stdio``: start ``tools_server.py stdio`` (under ``opentelemetry-instrument``) as a subprocess;
  ``http``: the URL of a Streamable HTTP server started by the test;
- ``calls``: ``{"server": "stdio"|"http", "name", "arguments", "explicit": id?, "meta": {...}?, "timeout": s?}``
  in order (``meta`` is passed to ``call_tool`` as it is), or ``{"server", "proposed": id}``: that call
  of the response, as the ``openai`` SDK returns it, through ``call_proposed_tool``;
- ``answered``: when present, a follow-up request carries one tool message per id listed here.

Every call prints one JSON line: ``{"outcome": "ok"|"tool_error"|<exception type>, "text": ...}``.
The whole turn runs inside one ``agent turn`` span, so the response, the MCP calls and the
servers' executions share one trace.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.client.stdio
import mcp.client.streamable_http
import openai
import wrapt
from mcp import ClientSession, StdioServerParameters
from opentelemetry import trace

from etf_otel.testing import DONE, LocalChatServer, Script
from etf_otel.testing.chat import chunk

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def _script(plan: dict[str, Any]) -> Script:
    events: list[Any] = []
    for index, (call_id, name, arguments) in enumerate(plan["proposals"]):
        first = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        events.append(chunk(tool_calls=[first]))
        continued_id = "call-changed" if plan.get("conflict") and index == 0 else None
        events.append(chunk(tool_calls=[{"index": index, "id": continued_id, "function": {"arguments": arguments}}]))
    events += [chunk(finish_reason="tool_calls"), DONE]
    return Script(events=events)


def _stdio_parameters() -> StdioServerParameters:
    env = dict(os.environ, OTEL_SERVICE_NAME="tool-server-stdio")
    argv = [str(BIN / "python"), str(HERE / "tools_server.py"), "stdio"]
    if not os.environ.get("ETF_TEST_ORDER"):  # else the server sets itself up in the same order
        argv.insert(0, str(BIN / "opentelemetry-instrument"))
    return StdioServerParameters(command=argv[0], args=argv[1:], env=env)


async def _call(session: ClientSession, call: dict[str, Any], proposed: dict[str, Any]) -> dict[str, Any]:
    arguments = call.get("arguments")
    try:
        with anyio.fail_after(call.get("timeout", 30)):
            if call.get("proposed"):  # the helper, handed the SDK's own tool-call object
                from etf_otel.integrations.mcp._instrumentor import call_proposed_tool

                result = await call_proposed_tool(session, proposed[call["proposed"]])
            elif call.get("explicit"):
                from etf_otel.integrations.mcp._instrumentor import proposed_call

                with proposed_call(call["explicit"]):
                    result = await session.call_tool(call["name"], arguments, meta=call.get("meta"))
            else:
                result = await session.call_tool(call["name"], arguments, meta=call.get("meta"))
    except Exception as error:  # what the app sees, reported to the test
        return {"outcome": type(error).__name__, "text": str(error)[:200]}
    text = " ".join(getattr(part, "text", "") for part in result.content)
    return {"outcome": "tool_error" if result.is_error else "ok", "text": text}


async def _run_calls(plan: dict[str, Any], proposed: dict[str, Any]) -> None:
    async with contextlib.AsyncExitStack() as stack:
        sessions: dict[str, ClientSession] = {}
        if plan.get("stdio"):
            read, write = await stack.enter_async_context(mcp.client.stdio.stdio_client(_stdio_parameters()))
            sessions["stdio"] = await stack.enter_async_context(ClientSession(read, write))
        if plan.get("http"):
            read, write = await stack.enter_async_context(
                mcp.client.streamable_http.streamable_http_client(plan["http"])
            )
            sessions["http"] = await stack.enter_async_context(ClientSession(read, write))
        for session in sessions.values():
            await session.initialize()
        for call in plan["calls"]:
            print(json.dumps(await _call(sessions[call["server"]], call, proposed)), flush=True)


def main() -> None:
    plan = json.loads(sys.stdin.read())
    if os.environ.get("ETF_TEST_ORDER"):
        from tests.integrations.mcp_servers.setup_order import instrument_in_order

        instrument_in_order()
        targets = {
            "stdio_client": mcp.client.stdio.stdio_client,
            "streamable_http_client": mcp.client.streamable_http.streamable_http_client,
            "call_tool": vars(ClientSession)["call_tool"],
        }
        wrapped = sorted(name for name, target in targets.items() if isinstance(target, wrapt.FunctionWrapper))
        print(json.dumps({"wrapped": wrapped}), flush=True)
    tracer = trace.get_tracer("agent")
    messages: list[Any] = [{"role": "user", "content": "Read the report."}]
    with LocalChatServer() as llm, tracer.start_as_current_span("agent turn"):
        llm.enqueue(_script(plan))
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        with client.chat.completions.stream(model="m", messages=messages) as stream:
            for _ in stream:
                pass
            message = stream.get_final_completion().choices[0].message
        anyio.run(_run_calls, plan, {call.id: call for call in message.tool_calls or []})
        if plan.get("answered") is not None:
            llm.enqueue(Script(events=[chunk(content="Revenue grew."), chunk(finish_reason="stop"), DONE]))
            calls = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
                for call in message.tool_calls or []
            ]
            follow_up = [*messages, {"role": "assistant", "tool_calls": calls}]
            follow_up += [{"role": "tool", "tool_call_id": call_id, "content": "done"} for call_id in plan["answered"]]
            for _ in client.chat.completions.create(model="m", messages=follow_up, stream=True):
                pass
        client.close()


if __name__ == "__main__":
    main()
