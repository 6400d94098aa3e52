"""openai-agents, zero code: its model calls and its function tool runs recorded, linked and judged
(docs/frameworks.md, "openai-agents").

The real framework runs agents against the scripted server, with the ``openai`` instrumentor and
:class:`OpenAIAgentsInstrumentor` instrumented on the test's own providers, and the spans are
also exported to an OTLP JSON file for ``etf-otel audit``. The server answers by what a request
carries (no tool result yet: the two calls; results: a text answer), so concurrent runs each get
their own answers. The framework's own tracing is disabled (its exporter would reach the vendor)
except where OpenInference replaces its processors.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import agents
import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool
from openai import AsyncOpenAI
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from etf_otel import attributes as A
from etf_otel.cli._audit import run_audit
from etf_otel.errors import GuardRefusedError
from etf_otel.instrumentation._safety import set_strict
from etf_otel.integrations.openai import instrument_openai
from etf_otel.integrations.openai_agents import instrument_openai_agents
from etf_otel.testing import LocalChatServer, RecordedRequest, Script
from etf_otel.testing import chat as C
from etf_otel.testing import responses as R
from tests.conftest import Captured

agents.set_tracing_disabled(True)

CALLS = (("call_a", "get_weather", '{"city":"Paris"}'), ("call_b", "get_time", '{"tz":"CET"}'))
IDS = ["call_a", "call_b"]
SHAPES = [("chat", "run"), ("chat", "run_streamed"), ("responses", "run"), ("responses", "run_streamed")]

# --- what the server answers -------------------------------------------------------------------------------------

CHAT_CALLS = C.finished(*(C.chunk(C.fragment(i, *call, type="function")) for i, call in enumerate(CALLS)))
CHAT_ANSWER = C.finished(C.chunk(content="done"), finish_reason="stop")
CHAT_NULL_ID = C.finished(  # the seed case: the continuation's id is null
    C.chunk(C.fragment(0, "call_a", "get_weather", '{"city":', type="function")),
    C.chunk(C.fragment(0, None, arguments='"Paris"}')),
)
CHAT_CONFLICT = C.finished(  # the continuation names another id: the rules keep call_a and reject the call
    C.chunk(C.fragment(0, "call_a", "get_weather", '{"city":', type="function")),
    C.chunk(C.fragment(0, "call_X9", arguments='"Paris"}')),
)
RESPONSES_CHANGED = R.stream(  # the call's id in output_item.added is not the one in output_item.done
    R.call(0, "call_a", "get_weather", ['{"city":"Paris"}'], item_id="fc_0", added_call_id="call_X9")
)
RESPONSES_CUT = R.stream(  # no terminal event: the body ends in the second call's arguments
    R.call(0, "call_a", "get_weather", ['{"city":"Paris"}'], item_id="fc_0"),
    R.call(1, "call_b", "get_time", ['{"tz":'], item_id="fc_1")[:2],
    end=None,
)
CHAT_CUT = [  # the body ends after the first call and half the second: no finish_reason, no [DONE]
    C.chunk(C.fragment(0, "call_a", "get_weather", '{"city":"Paris"}', type="function")),
    C.chunk(C.fragment(1, "call_b", "get_time", '{"tz":', type="function")),
]


def _chat_body(message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}


CHAT_CALLS_BODY = _chat_body(
    {
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in CALLS
        ],
    },
    "tool_calls",
)
CHAT_ANSWER_BODY = _chat_body({"content": "done"}, "stop")
TEXT_ITEM = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "done", "annotations": []}],
}
CALL_ITEMS = [
    R.function_call(call_id, name, arguments, id=f"fc_{i}", status="completed")
    for i, (call_id, name, arguments) in enumerate(CALLS)
]
RESPONSES_CALLS = R.stream(*(R.call(i, *call[:2], [call[2]], item_id=f"fc_{i}") for i, call in enumerate(CALLS)))
RESPONSES_ANSWER = R.stream(
    R.added(0, item=R.message_item()), R.text_delta(0, "done"), end=R.completed([TEXT_ITEM], "resp_2"), id="resp_2"
)
RESPONSES_CALLS_BODY = R.response("resp_1", "completed", CALL_ITEMS)
RESPONSES_ANSWER_BODY = R.response("resp_2", "completed", [TEXT_ITEM])


def answer(first: list[Any] | None = None, responses: list[Any] | None = None) -> Any:
    """The server's answer to a request: the calls (``first`` for a streamed Chat request,
    ``responses`` for a streamed Responses one) or the text."""

    def respond(request: RecordedRequest) -> Script:
        body = request.body
        streamed = bool(body.get("stream"))
        if request.path.endswith("/chat/completions"):
            if any(message.get("role") == "tool" for message in body["messages"]):
                return Script(events=CHAT_ANSWER) if streamed else Script(body=CHAT_ANSWER_BODY)
            return Script(events=first or CHAT_CALLS) if streamed else Script(body=CHAT_CALLS_BODY)
        items = body["input"] if isinstance(body["input"], list) else []
        if any(item.get("type") == "function_call_output" for item in items):
            return Script(events=RESPONSES_ANSWER, named=True) if streamed else Script(body=RESPONSES_ANSWER_BODY)
        return (
            Script(events=responses or RESPONSES_CALLS, named=True) if streamed else Script(body=RESPONSES_CALLS_BODY)
        )

    return respond


# --- the agent ---------------------------------------------------------------------------------------------------


@dataclass
class Agents:
    """One scripted server and the tools the agents run (what ran is remembered, in order)."""

    server: LocalChatServer
    ran: list[tuple[str, str]] = field(default_factory=list)

    def agent(self, kind: str) -> Agent[Any]:
        ran = self.ran

        @function_tool
        def get_weather(city: str) -> str:
            ran.append(("get_weather", city))
            return "sunny"

        @function_tool
        def get_time(tz: str) -> str:
            ran.append(("get_time", tz))
            return "noon"

        client = AsyncOpenAI(base_url=self.server.base_url, api_key="x", max_retries=0)
        model: Any = (
            OpenAIChatCompletionsModel(model="m", openai_client=client)
            if kind == "chat"
            else OpenAIResponsesModel(model="m", openai_client=client)
        )
        return Agent(name="helper", instructions="be brief", tools=[get_weather, get_time], model=model)

    async def arun(self, kind: str = "chat", method: str = "run_streamed") -> Any:
        agent = self.agent(kind)
        if method == "run":
            return (await Runner.run(agent, "weather and time in Paris?")).final_output
        streamed = Runner.run_streamed(agent, "weather and time in Paris?")
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

    def run(self, kind: str = "chat", method: str = "run_streamed") -> Any:
        return asyncio.run(self.arun(kind, method))

    def follow_up(self, index: int = 1) -> dict[str, Any]:
        """The ``index``-th request's body: the second carries the tool results."""
        body = self.server.requests[index].body
        assert isinstance(body, dict)
        return body


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer(responder=answer()) as scripted:
        yield scripted


class Stack:
    """Both instrumentors on the test's providers, spans also written to an OTLP JSON file."""

    def __init__(self, captured: Captured, path: Path) -> None:
        self.captured = captured
        self.path = path
        captured.tracer_provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(str(path))))
        self.instrumentors: list[Any] = []

    def instrument(self, **options: Any) -> Stack:
        providers = {"tracer_provider": self.captured.tracer_provider, "meter_provider": self.captured.meter_provider}
        self.instrumentors = [
            instrument_openai(**providers, **options),
            instrument_openai_agents(**providers, **options),
        ]
        return self

    def uninstrument(self) -> None:
        for instrumentor in self.instrumentors:
            instrumentor.uninstrument()
        self.instrumentors = []

    def executions(self) -> list[ReadableSpan]:
        return self.captured.spans("execute_tool")

    def audit(self, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
        self.captured.tracer_provider.force_flush()
        capsys.readouterr()
        code = run_audit([str(self.path)], json_output=True, progress=False)
        return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def stack(captured: Captured, tmp_path: Path) -> Iterator[Stack]:
    made = Stack(captured, tmp_path / "traces.jsonl")
    try:
        yield made
    finally:
        made.uninstrument()


def proposals(stack: Stack) -> dict[str, int]:
    """The span id of each proposed call's ``assemble_tool_call`` span, by call id."""
    return {
        str(span.attributes[A.GEN_AI_TOOL_CALL_ID]): span.context.span_id
        for span in stack.captured.spans("assemble_tool_call")
        if span.attributes is not None
    }


def divergence(span: ReadableSpan) -> list[Any]:
    return [event.attributes.get(A.ETF_DIVERGENCE_KIND) for event in span.events if event.attributes is not None]


def kinds(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {entry["kind"]: entry["categories"] for entry in report["by_kind"]}


# --- the tests ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "method"), SHAPES)
def test_a_clean_loop_is_recorded_linked_and_audits_clean(
    stack: Stack, server: LocalChatServer, kind: str, method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.instrument()
    tools = Agents(server)
    assert tools.run(kind, method) == "done"
    assert tools.ran == [("get_weather", "Paris"), ("get_time", "CET")]
    responses = stack.captured.spans("assemble_response")
    assert len(responses) == 2  # both model calls, through the openai instrumentor
    assert [span.attributes[A.ETF_STREAM_DISPATCHABLE] for span in responses] == [True, False]
    proposed = proposals(stack)
    executions = stack.executions()
    assert [span.attributes[A.GEN_AI_TOOL_CALL_ID] for span in executions] == IDS
    for span in executions:
        assert [link.context.span_id for link in span.links] == [proposed[str(span.attributes[A.GEN_AI_TOOL_CALL_ID])]]
        assert divergence(span) == [] and A.ERROR_TYPE not in span.attributes
    code, report = stack.audit(capsys)
    assert (code, report["findings"]) == (0, 0), report["by_kind"]


def test_the_null_id_continuation_stays_clean(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    stack.instrument()
    with LocalChatServer(responder=answer(CHAT_NULL_ID)) as server:
        tools = Agents(server)
        assert tools.run() == "done"
        (result,) = [message for message in tools.follow_up()["messages"] if message["role"] == "tool"]
    assert tools.ran == [("get_weather", "Paris")] and result["tool_call_id"] == "call_a"
    (execution,) = stack.executions()
    assert execution.attributes[A.GEN_AI_TOOL_CALL_ID] == "call_a" and len(execution.links) == 1
    assert divergence(execution) == []
    code, report = stack.audit(capsys)
    assert (code, report["findings"]) == (0, 0), report["by_kind"]


def test_a_conflicting_id_is_reported_as_what_ran(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    """openai-agents' Chat model keeps the last id of a call: it runs get_weather as call_X9."""
    stack.instrument()
    with LocalChatServer(responder=answer(CHAT_CONFLICT)) as server:
        tools = Agents(server)
        assert tools.run() == "done"
        (result,) = [message for message in tools.follow_up()["messages"] if message["role"] == "tool"]
    assert tools.ran == [("get_weather", "Paris")] and result["tool_call_id"] == "call_X9"
    (execution,) = stack.executions()
    (proposal,) = stack.captured.spans("assemble_tool_call")
    assert proposal.attributes[A.ETF_TOOL_CALL_VERDICT] == "rejected"
    assert execution.attributes[A.GEN_AI_TOOL_CALL_ID] == "call_a"  # the preserved id, never the framework's
    assert [link.context.span_id for link in execution.links] == [proposal.context.span_id]
    assert divergence(execution) == ["id_replaced"]
    code, report = stack.audit(capsys)
    assert code == 1
    found = kinds(report)
    assert found["recorded_violation"].get("divergent_assembly") == 1, found
    assert found["recorded_rejection"] == {"id_conflict": 1}, found


def test_a_cut_stream_ran_anyway_is_found(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    """The body ends mid-call, without a finish reason: the framework runs the first call anyway."""
    stack.instrument()
    with LocalChatServer(responder=answer(CHAT_CUT)) as server:
        tools = Agents(server)
        assert tools.run() == "done"
    assert tools.ran == [("get_weather", "Paris")]  # get_time's '{"tz":' is an error result
    (response, _) = stack.captured.spans("assemble_response")
    assert response.attributes[A.ETF_STREAM_STATE] == "truncated"
    executions = {span.attributes[A.GEN_AI_TOOL_CALL_ID]: span for span in stack.executions()}
    assert sorted(executions) == IDS and all(len(span.links) == 1 for span in executions.values())
    assert A.ERROR_TYPE in executions["call_b"].attributes and A.ERROR_TYPE not in executions["call_a"].attributes
    code, report = stack.audit(capsys)
    found = kinds(report)
    assert code == 1 and found["recorded_rejection"] == {"truncated_stream": 1}, found
    assert found["executed_rejected"] == {"invalid_arguments": 1, "truncated_stream": 1}, found


def test_the_responses_model_runs_the_id_of_the_done_item(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    """A provider that changes a call's id between output_item.added and .done: the rules keep the
    first and reject the call, the framework runs the second."""
    stack.instrument()
    with LocalChatServer(responder=answer(responses=RESPONSES_CHANGED)) as server:
        tools = Agents(server)
        assert tools.run("responses") == "done"
        (result,) = [item for item in tools.follow_up()["input"] if item.get("type") == "function_call_output"]
    assert tools.ran == [("get_weather", "Paris")] and result["call_id"] == "call_a"
    (execution,) = stack.executions()
    assert execution.attributes[A.GEN_AI_TOOL_CALL_ID] == "call_X9" and divergence(execution) == ["id_replaced"]
    code, report = stack.audit(capsys)
    found = kinds(report)
    assert code == 1 and found["executed_rejected"] == {"id_conflict": 1}, found
    assert found["recorded_violation"].get("divergent_assembly") == 1, found


def test_a_cut_responses_stream_ends_the_run_and_runs_nothing(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    stack.instrument()
    with LocalChatServer(responder=answer(responses=RESPONSES_CUT)) as server, pytest.raises(agents.ModelBehaviorError):
        Agents(server).run("responses")
    assert stack.executions() == []
    code, report = stack.audit(capsys)
    assert code == 1 and kinds(report) == {"recorded_rejection": {"truncated_stream": 1}}, report["by_kind"]


@pytest.mark.parametrize(
    ("kind", "first"),
    [("chat", CHAT_CONFLICT), ("chat", CHAT_CUT), ("responses", RESPONSES_CHANGED)],
    ids=["chat-conflicting_id", "chat-cut_stream", "responses-changed_id"],
)
def test_guard_answers_a_refusal_with_the_tools_error_result(stack: Stack, kind: str, first: list[Any]) -> None:
    stack.instrument(guard=True)
    responder = answer(first) if kind == "chat" else answer(responses=first)
    with LocalChatServer(responder=responder) as server:
        tools = Agents(server)
        assert tools.run(kind) == "done"  # the run went on to the model's answer
        follow_up = tools.follow_up()
    if kind == "chat":
        results = [message["content"] for message in follow_up["messages"] if message["role"] == "tool"]
    else:
        results = [item["output"] for item in follow_up["input"] if item.get("type") == "function_call_output"]
    assert tools.ran == []
    assert results and all(result.startswith("An error occurred") for result in results)
    executions = stack.executions()
    assert len(executions) == len(results)
    assert all(span.attributes[A.ETF_GUARD_REFUSED] is True for span in executions)


def test_guard_ends_the_run_where_the_application_asked_raising_tools_to(stack: Stack) -> None:
    """``failure_error_function=None``: a tool that raises ends the run; a refused one does the same."""
    stack.instrument(guard=True)

    @function_tool(failure_error_function=None)
    def get_weather(city: str) -> str:
        raise AssertionError("refused: never run")

    async def run(server: LocalChatServer) -> None:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        model = OpenAIChatCompletionsModel(model="m", openai_client=client)
        streamed = Runner.run_streamed(Agent(name="helper", tools=[get_weather], model=model), "weather?")
        async for _ in streamed.stream_events():
            pass

    with LocalChatServer(responder=answer(CHAT_CONFLICT)) as server, pytest.raises(agents.UserError) as ended:
        asyncio.run(run(server))
    assert isinstance(ended.value.__cause__, GuardRefusedError)
    (execution,) = stack.executions()
    assert execution.attributes[A.ETF_GUARD_REFUSED] is True and execution.attributes[A.ERROR_TYPE] == "id_conflict"


def test_guard_lets_a_clean_loop_run(stack: Stack, server: LocalChatServer) -> None:
    stack.instrument(guard=True)
    tools = Agents(server)
    assert tools.run("responses") == "done"
    assert tools.ran == [("get_weather", "Paris"), ("get_time", "CET")]
    assert [span.attributes.get(A.ETF_GUARD_REFUSED) for span in stack.executions()] == [None, None]


def test_openinference_co_installed_keeps_the_clean_loop_clean(
    stack: Stack, server: LocalChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor as OpenInference

    openinference = OpenInference()
    openinference.instrument(tracer_provider=stack.captured.tracer_provider)  # replaces the vendor's processor
    agents.set_tracing_disabled(False)
    try:
        stack.instrument()
        tools = Agents(server)
        assert tools.run() == "done"
    finally:
        agents.set_tracing_disabled(True)
        openinference.uninstrument()
    spans = {span.context.span_id: span for span in stack.captured.spans()}
    kinds_seen = {span.attributes.get("openinference.span.kind") for span in spans.values()}
    assert {"LLM", "TOOL", "AGENT"} <= kinds_seen  # OpenInference's spans are there
    executions = stack.executions()
    assert [span.attributes[A.GEN_AI_TOOL_CALL_ID] for span in executions] == IDS
    # ours inside OpenInference's TOOL span (it has no call id): one execution, judged by ours
    parents = [spans[span.parent.span_id] for span in executions if span.parent is not None]
    assert [parent.attributes.get("openinference.span.kind") for parent in parents] == ["TOOL", "TOOL"]
    code, report = stack.audit(capsys)
    assert (code, report["findings"]) == (0, 0), report["by_kind"]
    assert "unidentified_execution" not in kinds(report)  # what OpenInference's TOOL spans alone are


@pytest.mark.parametrize(("kind", "method"), SHAPES)
def test_eight_concurrent_identical_runs_stay_clean(
    stack: Stack, server: LocalChatServer, kind: str, method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.instrument()
    tools = Agents(server)

    async def eight() -> list[Any]:
        return await asyncio.gather(*(tools.arun(kind, method) for _ in range(8)))

    assert asyncio.run(eight()) == ["done"] * 8
    executions = stack.executions()
    assert len(executions) == 16 and all(len(span.links) == 1 and not divergence(span) for span in executions)
    assert len({span.links[0].context.span_id for span in executions}) == 16  # each its own run's proposal
    code, report = stack.audit(capsys)
    assert (code, report["findings"]) == (0, 0), report["by_kind"]


@pytest.mark.parametrize(
    ("kind", "method", "first"),
    [
        ("chat", "run_streamed", None),
        ("chat", "run_streamed", CHAT_CONFLICT),
        ("chat", "run_streamed", CHAT_CUT),
        ("chat", "run", None),
        ("responses", "run_streamed", None),
        ("responses", "run", None),
    ],
    ids=["chat-clean", "chat-conflicting_id", "chat-cut_stream", "chat-run", "responses-clean", "responses-run"],
)
def test_the_framework_behaves_the_same_with_and_without_etf_otel(
    stack: Stack, kind: str, method: str, first: list[Any] | None
) -> None:
    seen = []
    for instrumented in (False, True):
        if instrumented:
            stack.instrument()
        with LocalChatServer(responder=answer(first)) as server:
            tools = Agents(server)
            output = tools.run(kind, method)
            seen.append((output, tools.ran, [request.body for request in server.requests]))
    assert seen[0] == seen[1]
    assert stack.executions()  # the second run was recorded


def test_a_framework_of_another_layout_is_left_as_it_is(
    stack: Stack, server: LocalChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agents.tool
    import wrapt

    from etf_otel.integrations.openai_agents import _instrumentor

    monkeypatch.setattr(_instrumentor, "_LAYOUT", (*_instrumentor._LAYOUT, "a_name_this_version_lacks"))
    previous = set_strict(False)  # what an application runs with: the failure is logged, never raised
    try:
        stack.instrument()
    finally:
        set_strict(previous)
    assert not isinstance(vars(agents.tool)["_invoke_function_tool_with_metadata"], wrapt.FunctionWrapper)
    tools = Agents(server)
    assert tools.run() == "done" and len(tools.ran) == 2
    assert stack.executions() == []


def test_instrumenting_imports_nothing_and_uninstrumenting_restores_the_runner() -> None:
    script = """
import sys, wrapt
from etf_otel.integrations.openai_agents import OpenAIAgentsInstrumentor
instrumentor = OpenAIAgentsInstrumentor()
instrumentor.instrument()
before = sorted(name for name in ("agents", "openai", "mcp", "pydantic") if name in sys.modules)
import agents.tool, agents.run_internal.tool_execution as runner
def hooked():
    return [isinstance(vars(module)[name], wrapt.FunctionWrapper) for module, name in (
        (agents.tool, "_invoke_function_tool_with_metadata"),
        (runner, "_invoke_function_tool_with_metadata"),
        (agents.tool, "maybe_invoke_function_tool_failure_error_function"))]
wrapped = hooked()
instrumentor.uninstrument()
print(before, wrapped, hooked())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[] [True, True, True] [False, False, False]"


MCP_AGENT = """
import asyncio, json, os, sys
from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from etf_otel.integrations.mcp import instrument_mcp
from etf_otel.integrations.openai import instrument_openai
from etf_otel.integrations.openai_agents import instrument_openai_agents
from etf_otel.testing import LocalChatServer
from tests.integrations.frameworks.test_openai_agents import MCP_CALL, answer

path = sys.argv[1]
provider = TracerProvider()  # global: the mcp SDK's own spans are the execution here
provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
trace.set_tracer_provider(provider)
for instrument in (instrument_openai, instrument_openai_agents, instrument_mcp):
    instrument()
import agents
from agents.mcp import MCPServerStdio
from openai import AsyncOpenAI
agents.set_tracing_disabled(True)

async def run(server):
    command = {"command": sys.executable, "args": [os.environ["TOOLS_SERVER"], "stdio"], "env": dict(os.environ)}
    async with MCPServerStdio(params=command) as mcp:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        model = agents.OpenAIChatCompletionsModel(model="m", openai_client=client)
        agent = agents.Agent(name="helper", mcp_servers=[mcp], model=model)
        streamed = agents.Runner.run_streamed(agent, "page one?")
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

with LocalChatServer(responder=answer(MCP_CALL)) as server:
    output = asyncio.run(run(server))
    results = [message for message in server.requests[1].body["messages"] if message["role"] == "tool"]
provider.shutdown()
print(json.dumps({"output": output, "results": results}))
"""
MCP_CALL = C.finished(C.chunk(C.fragment(0, "call_a", "read_page", '{"page":1}', type="function")))


def test_an_mcp_servers_tool_is_one_execution_the_mcp_integration_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With etf-otel's MCP integration instrumented, the mcp SDK's ``tools/call`` span is the execution
    (told the preserved id): a span of ours around it would be a second one (``duplicate_execution``).

    In a process of its own: the mcp SDK traces with the global tracer provider."""
    path = tmp_path / "traces.jsonl"
    tools_server = Path(__file__).parents[1] / "mcp_servers" / "tools_server.py"
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", MCP_AGENT, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**env, "TOOLS_SERVER": str(tools_server), "PYTHONPATH": str(Path(__file__).parents[3])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    (result,) = outcome["results"]
    assert outcome["output"] == "done"
    exported = [json.loads(line) for line in path.read_text().splitlines()]
    spans = {
        span["name"]: {attribute["key"]: attribute["value"].get("stringValue") for attribute in span["attributes"]}
        for line in exported
        for resource in line["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    }
    capsys.readouterr()
    code = run_audit([str(path)], json_output=True, progress=False)
    report = json.loads(capsys.readouterr().out)
    assert result["content"][0]["text"] == "page 1: revenue grew"
    assert (code, report["findings"]) == (0, 0), report["by_kind"]
    assert not any(name.startswith("execute_tool") for name in spans)
    client = spans["MCP send tools/call read_page"]
    assert (client[A.ETF_MCP_MATCH], client[A.GEN_AI_TOOL_CALL_ID]) == ("explicit", "call_a")
