"""LangGraph and LangChain, zero code: a ``create_react_agent`` over ``ChatOpenAI`` (docs/frameworks.md).

Real packages against the scripted server, with the ``openai`` instrumentor (every model call)
and the LangChain one (tool runs, LangChain's own assembly) instrumented on captured providers.
The spans are exported to an OTLP JSON file and audited as ``etf-otel audit`` would.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode, tools_condition
from opentelemetry.exporter.otlp.json.file import FileSpanExporter

from etf_otel import attributes as A
from etf_otel.cli._audit import run_audit
from etf_otel.integrations.langgraph import LangChainInstrumentor, instrument_langgraph
from etf_otel.integrations.langgraph._tools import REFUSAL_TEXT
from etf_otel.integrations.openai import instrument_openai
from etf_otel.testing import LocalChatServer, RecordedRequest, Script
from etf_otel.testing import chat as C
from etf_otel.testing import responses as R
from tests.conftest import Captured
from tests.integrations.support import divergence_kinds

RAN: list[tuple[str, str]] = []
_RAN_LOCK = threading.Lock()


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    with _RAN_LOCK:
        RAN.append(("get_weather", city))
    return f"sunny in {city}"


@tool
def get_time(tz: str = "UTC") -> str:
    """The time in a time zone."""
    with _RAN_LOCK:
        RAN.append(("get_time", tz))
    return f"noon {tz}"


def two_calls(prefix: str = "call") -> list[Any]:
    return C.finished(
        C.chunk(C.fragment(0, f"{prefix}_a", "get_weather", '{"city":', type="function")),
        C.chunk(C.fragment(0, arguments='"Paris"}')),
        C.chunk(C.fragment(1, f"{prefix}_b", "get_time", '{"tz":"CET"}', type="function")),
    )


CLEAN = two_calls()
NULL_CONTINUATION = C.finished(
    C.chunk(C.fragment(0, "call_a", "get_weather", '{"city":', type="function")),
    C.chunk(C.fragment(0, None, arguments='"Paris"}')),  # the seed's id: null continuation
    C.chunk(C.fragment(1, "call_b", "get_time", '{"tz":"CET"}', type="function")),
)
CONFLICT = C.finished(
    C.chunk(C.fragment(0, "call_a", "get_weather", '{"city":')),
    C.chunk(C.fragment(0, "call_X", arguments='"Paris"}')),  # LangChain splits the call here
)
CUT = [C.chunk(C.fragment(0, "call_b", "get_time", '{"tz":'))]  # the stream ends mid-arguments
ANSWER = C.finished(C.chunk(content="done"), finish_reason="stop")
BODY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": '{"tz":"CET"}'}},
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
}
ANSWER_BODY = {
    **BODY,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
}


@pytest.fixture(autouse=True)
def fresh_runs() -> Iterator[None]:
    RAN.clear()
    yield
    RAN.clear()


class Stack:
    """The openai and LangChain instrumentors on the captured providers; uninstrumented at the end."""

    def __init__(self, captured: Captured, **options: Any) -> None:
        providers = {"tracer_provider": captured.tracer_provider, "meter_provider": captured.meter_provider}
        self.captured = captured
        self.openai = instrument_openai(**providers)
        self.langchain = instrument_langgraph(**providers, **options)

    def close(self) -> None:
        self.langchain.uninstrument()
        self.openai.uninstrument()

    def audit(self, path: Path, capsys: Any) -> tuple[int, dict[str, Any]]:
        exporter = FileSpanExporter(str(path))
        exporter.export(self.captured.spans())
        exporter.shutdown()
        capsys.readouterr()
        code = run_audit([str(path)], json_output=True, progress=False)
        return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def stack(captured: Captured) -> Iterator[Callable[..., Stack]]:
    made: list[Stack] = []

    def make(**options: Any) -> Stack:
        made.append(Stack(captured, **options))
        return made[-1]

    yield make
    for one in made:
        one.close()


def agent(server: LocalChatServer, streaming: bool, tools: tuple[Any, ...] = (), **chat_options: Any) -> Any:
    """The ReAct loop of ``langgraph.prebuilt``: a model node, a ``ToolNode``, and back until no call is left."""
    # streaming=False would keep LangGraph's messages mode from streaming: left unset, as applications do
    options: dict[str, Any] = {"streaming": True, **chat_options} if streaming else chat_options
    chat = ChatOpenAI(base_url=server.base_url, api_key="x", model="m", max_retries=0, **options)  # type: ignore[arg-type]
    tools = tools or (get_weather, get_time)
    model = chat.bind_tools(list(tools))

    def call(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def acall(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", RunnableLambda(call, afunc=acall))
    graph.add_node("tools", ToolNode(list(tools)))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


def run(graph: Any, how: str, text: str = "weather and time in Paris?") -> list[Any]:
    """One agent run as an application writes it: ``invoke``/``ainvoke``, or the messages stream."""
    state = {"messages": [("user", text)]}
    if how == "invoke":
        return list(graph.invoke(state)["messages"])
    if how == "ainvoke":
        return list(asyncio.run(graph.ainvoke(state))["messages"])
    if how == "messages":
        return [message for message, _ in graph.stream(state, stream_mode="messages")]

    async def messages() -> list[Any]:
        return [message async for message, _ in graph.astream(state, stream_mode="messages")]

    return asyncio.run(messages())


def executions(captured: Captured) -> dict[str, Any]:
    return {span.attributes[A.GEN_AI_TOOL_CALL_ID]: span for span in captured.spans("execute_tool")}


def proposals(captured: Captured) -> dict[str, Any]:
    return {span.attributes[A.GEN_AI_TOOL_CALL_ID]: span for span in captured.spans("assemble_tool_call")}


def span_kinds(span: Any) -> list[str]:
    return [str(e.attributes[A.ETF_DIVERGENCE_KIND]) for e in span.events if A.ETF_DIVERGENCE_KIND in e.attributes]


def assert_linked(captured: Captured, ids: list[str]) -> None:
    ran, proposed = executions(captured), proposals(captured)
    assert sorted(ran) == sorted(ids)
    for call_id in ids:
        assert [link.context.span_id for link in ran[call_id].links] == [proposed[call_id].context.span_id]
        assert span_kinds(ran[call_id]) == []


# --- a clean loop ---------------------------------------------------------------------------------------------

SHAPES = [
    pytest.param(True, "invoke", id="streaming-invoke"),
    pytest.param(False, "invoke", id="invoke"),
    pytest.param(True, "ainvoke", id="streaming-ainvoke"),
    pytest.param(False, "ainvoke", id="ainvoke"),
    pytest.param(False, "messages", id="stream_mode=messages"),
    pytest.param(False, "amessages", id="astream-stream_mode=messages"),
]


@pytest.mark.parametrize(("streaming", "how"), SHAPES)
def test_a_clean_loop_links_both_calls_and_audits_clean(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer, tmp_path: Path, capsys: Any,
    streaming: bool, how: str,
) -> None:  # fmt: skip
    etf = stack()
    streamed = streaming or how.endswith("messages")
    server.enqueue(
        *((Script(events=CLEAN), Script(events=ANSWER)) if streamed else (Script(body=BODY), Script(body=ANSWER_BODY)))
    )
    messages = run(agent(server, streaming), how)
    assert sorted(RAN) == [("get_time", "CET"), ("get_weather", "Paris")]
    assert any(getattr(m, "content", None) == "done" for m in messages)
    assert_linked(captured, ["call_a", "call_b"])
    assert divergence_kinds(captured) == []
    code, report = etf.audit(tmp_path / "traces.jsonl", capsys)
    assert (code, report["findings"]) == (0, 0)


RESPONSES_CALLS = R.stream(
    R.call(0, "call_a", "get_weather", ['{"city":', '"Paris"}'], item_id="fc_0"),
    R.call(1, "call_b", "get_time", ['{"tz":"CET"}'], item_id="fc_1"),
)
_MESSAGE = {**R.message_item("msg_1", "done"), "status": "completed"}
RESPONSES_ANSWER = R.stream(R.added(0, item=_MESSAGE), R.item_done(0, item=_MESSAGE), end=R.completed([_MESSAGE]))


@pytest.mark.parametrize(
    ("chat_options", "scripts"),
    [
        ({"include_response_headers": True}, (Script(events=CLEAN), Script(events=ANSWER))),  # with_raw_response
        (
            {"use_responses_api": True},
            (Script(events=RESPONSES_CALLS, named=True), Script(events=RESPONSES_ANSWER, named=True)),
        ),
    ],
    ids=["include_response_headers", "use_responses_api"],
)
def test_other_model_paths_link_both_calls_too(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer, tmp_path: Path, capsys: Any,
    chat_options: dict[str, Any], scripts: tuple[Script, Script],
) -> None:  # fmt: skip
    etf = stack()
    server.enqueue(*scripts)
    run(agent(server, True, **chat_options), "invoke")
    assert sorted(RAN) == [("get_time", "CET"), ("get_weather", "Paris")]
    assert_linked(captured, ["call_a", "call_b"])
    code, report = etf.audit(tmp_path / "traces.jsonl", capsys)
    assert (code, report["findings"]) == (0, 0)


def test_the_null_continuation_stays_clean(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer, tmp_path: Path, capsys: Any
) -> None:
    etf = stack()
    server.enqueue(Script(events=NULL_CONTINUATION), Script(events=ANSWER))
    run(agent(server, True), "invoke")
    assert sorted(RAN) == [("get_time", "CET"), ("get_weather", "Paris")]
    assert_linked(captured, ["call_a", "call_b"])
    assert divergence_kinds(captured) == []
    assert etf.audit(tmp_path / "traces.jsonl", capsys)[0] == 0


@tool("get_weather")
def weather_with_state(city: str, state: Annotated[dict[str, Any], InjectedState]) -> str:
    """The weather in a city, for the conversation so far."""
    with _RAN_LOCK:
        RAN.append(("get_weather", f"{city} after {len(state['messages'])} messages"))
    return "sunny"


def test_arguments_langgraph_injects_are_not_the_models(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer
) -> None:
    stack()
    server.enqueue(Script(events=CLEAN), Script(events=ANSWER))
    run(agent(server, True, (weather_with_state, get_time)), "invoke")
    assert sorted(RAN) == [("get_time", "CET"), ("get_weather", "Paris after 2 messages")]
    assert_linked(captured, ["call_a", "call_b"])  # no arguments_differ for the injected state


@tool("get_weather")
async def aget_weather(city: str) -> str:
    """The weather in a city (a coroutine: ToolNode awaits ``arun``)."""
    with _RAN_LOCK:
        RAN.append(("get_weather", city))
    return "sunny"


@tool("get_time")
async def aget_time(tz: str = "UTC") -> str:
    """The time in a time zone (a coroutine)."""
    with _RAN_LOCK:
        RAN.append(("get_time", tz))
    return "noon"


def test_async_tools_are_recorded_and_refused_alike(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer
) -> None:
    stack(guard=True)
    server.enqueue(Script(events=CLEAN), Script(events=ANSWER), Script(events=CUT), Script(events=ANSWER))
    graph = agent(server, True, (aget_weather, aget_time))
    run(graph, "amessages")
    assert sorted(RAN) == [("get_time", "CET"), ("get_weather", "Paris")]
    assert_linked(captured, ["call_a", "call_b"])
    RAN.clear()
    run(graph, "ainvoke")  # the cut stream: refused, answered with an error result
    assert RAN == [] and tool_results(server.requests[3]) == {
        "call_b": REFUSAL_TEXT.format(category="invalid_arguments")
    }


# --- LangChain's own assembly, judged ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "messages", "amessages"])
def test_a_conflicting_id_is_judged_where_langchain_splits_it_and_where_it_runs(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer, tmp_path: Path, capsys: Any, how: str
) -> None:
    etf = stack()
    server.enqueue(Script(events=CONFLICT), Script(events=ANSWER))
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application") as application:
        run(agent(server, True), how)
    assert RAN == []  # get_weather ran with {} and failed LangChain's validation
    ran = executions(captured)["call_a"]
    assert ran.name == "execute_tool get_weather" and ran.attributes[A.ERROR_TYPE] == "ValidationError"
    assert span_kinds(ran) == ["arguments_differ"]  # LangChain ran {} for '{"city":"Paris"}'
    assert span_kinds(application) == ["arguments_differ", "call_split"]  # its sum of the stream
    assert len(ran.links) == 1
    code, report = etf.audit(tmp_path / "traces.jsonl", capsys)
    assert code == 1
    found = [f for trace in report["traces_detail"] for f in trace["findings"]]
    assert {"kind": "executed_rejected", "category": "id_conflict", "span_id": f"{ran.context.span_id:016x}",
            "call_id": "call_a"} in found  # fmt: skip
    assert {
        "kind": "recorded_violation",
        "category": "divergent_assembly",
        "span_id": f"{ran.context.span_id:016x}",
        "call_id": "call_a",  # the execution's divergence names the preserved call
        "divergence_kind": "arguments_differ",  # and says how the run differs from it
    } in found


def chat_model(server: LocalChatServer) -> Any:
    return ChatOpenAI(base_url=server.base_url, api_key="x", model="m", max_retries=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["stream", "astream"])
def test_model_stream_and_astream_are_judged_and_can_be_left_early(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer, asynchronous: bool
) -> None:
    stack()
    model = chat_model(server)

    def consume(stop_after: int | None) -> list[Any]:
        if not asynchronous:
            seen = []
            for chunk in model.stream("hi"):
                seen.append(chunk)
                if len(seen) == stop_after:
                    break
            return seen

        async def drain() -> list[Any]:
            seen = []
            stream = model.astream("hi")
            async for chunk in stream:
                seen.append(chunk)
                if len(seen) == stop_after:
                    await stream.aclose()
                    break
            return seen

        return asyncio.run(drain())

    conflict = C.finished(
        C.chunk(C.fragment(0, "left_a", "get_weather", '{"city":')),
        C.chunk(C.fragment(0, "left_X", arguments='"Paris"}')),
    )  # ids of its own: the stream left early is finalized when the garbage collector gets to it
    server.enqueue(Script(events=conflict), Script(events=conflict))
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application") as application:
        whole = consume(None)
        left = consume(1)  # the application stops reading: the SDK's stream is closed, nothing is judged
    assert len(whole) >= 3 and len(left) == 1
    assert span_kinds(application) == ["arguments_differ", "call_split"]
    summed = whole[0]
    for chunk in whole[1:]:
        summed = summed + chunk
    assert [call["id"] for call in summed.tool_calls] == ["left_a"]  # LangChain's own sum, unchanged
    assert [call["id"] for call in summed.invalid_tool_calls] == ["left_X"]


def test_a_cut_stream_run_with_repaired_arguments_says_so(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer, tmp_path: Path, capsys: Any
) -> None:
    etf = stack()
    server.enqueue(Script(events=CUT), Script(events=ANSWER))
    run(agent(server, True), "invoke")
    assert RAN == [("get_time", "UTC")]  # LangGraph ran get_time with '{"tz":' parsed to {}
    ran = executions(captured)["call_b"]
    assert span_kinds(ran) == ["arguments_differ"]
    assert proposals(captured)["call_b"].attributes[A.ETF_TOOL_CALL_VERDICT] == "rejected"
    code, report = etf.audit(tmp_path / "traces.jsonl", capsys)
    assert code == 1
    assert {"kind": "executed_rejected", "categories": {"invalid_arguments": 1}} == {
        key: value for key, value in report["by_kind"][0].items() if key in ("kind", "categories")
    }


# --- guard mode -------------------------------------------------------------------------------------------------


def tool_results(request: RecordedRequest) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request.body["messages"] if m.get("role") == "tool"}


@pytest.mark.parametrize("how", ["invoke", "amessages"])
def test_guard_refuses_through_an_error_result_and_the_graph_goes_on(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer, how: str
) -> None:
    stack(guard=True)
    server.enqueue(Script(events=CUT), Script(events=ANSWER))
    messages = run(agent(server, True), how)
    assert RAN == []  # refused before it ran
    assert any(getattr(m, "content", None) == "done" for m in messages)  # the graph finished
    refusal = REFUSAL_TEXT.format(category="invalid_arguments")
    assert tool_results(server.requests[1]) == {"call_b": refusal}  # the model got an error result
    (sent,) = [m for m in messages if getattr(m, "tool_call_id", None) == "call_b"]
    assert sent.status == "error"
    ran = executions(captured)["call_b"]
    assert ran.attributes[A.ETF_GUARD_REFUSED] is True and ran.attributes[A.ERROR_TYPE] == "invalid_arguments"


def test_guard_lets_a_clean_loop_run(captured: Captured, stack: Callable[..., Stack], server: LocalChatServer) -> None:
    stack(guard=True)
    server.enqueue(Script(events=CLEAN), Script(events=ANSWER))
    run(agent(server, True), "ainvoke")
    assert sorted(RAN) == [("get_time", "CET"), ("get_weather", "Paris")]
    assert not any(A.ETF_GUARD_REFUSED in span.attributes for span in captured.spans("execute_tool"))


# --- with others, at once, and without etf-otel --------------------------------------------------------------


def test_openinference_co_installed_keeps_the_clean_loop_clean(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer, tmp_path: Path, capsys: Any
) -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor as OpenInference

    openinference = OpenInference()
    openinference.instrument(tracer_provider=captured.tracer_provider)
    try:
        etf = stack()
        server.enqueue(Script(events=CLEAN), Script(events=ANSWER))
        run(agent(server, True), "invoke")
    finally:
        openinference.uninstrument()
    spans = captured.spans()
    tools = sorted(span.name for span in spans if span.attributes.get("openinference.span.kind") == "TOOL")
    assert tools == ["get_time", "get_weather"]
    assert_linked(captured, ["call_a", "call_b"])
    assert len({span.context.trace_id for span in spans}) == 1  # ours in the graph's trace, under its runs
    code, report = etf.audit(tmp_path / "traces.jsonl", capsys)
    assert (code, report["findings"], report["unobserved_llm_calls"]) == (0, 0, 0)


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "amessages"])
def test_openinference_runs_not_streamed_or_async_are_observed_in_its_trace(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer, tmp_path: Path, capsys: Any, how: str
) -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor as OpenInference

    openinference = OpenInference()
    openinference.instrument(tracer_provider=captured.tracer_provider)
    try:
        etf = stack()
        streamed = how == "amessages"
        server.enqueue(
            *(
                (Script(events=CLEAN), Script(events=ANSWER))
                if streamed
                else (Script(body=BODY), Script(body=ANSWER_BODY))
            )
        )
        run(agent(server, False), how)
    finally:
        openinference.uninstrument()
    assert_linked(captured, ["call_a", "call_b"])
    assert len({span.context.trace_id for span in captured.spans()}) == 1
    code, report = etf.audit(tmp_path / "traces.jsonl", capsys)
    assert (code, report["findings"], report["unobserved_llm_calls"]) == (0, 0, 0)


def unique_ids(request: RecordedRequest) -> Script:
    """Each run (its own user text) gets its own call ids; the answer once the results are back."""
    messages = request.body["messages"]
    if messages[-1]["role"] == "tool":
        return Script(events=ANSWER)
    return Script(events=two_calls(messages[0]["content"]))


def test_eight_concurrent_runs_stay_clean(
    captured: Captured, stack: Callable[..., Stack], tmp_path: Path, capsys: Any
) -> None:
    etf = stack()
    with LocalChatServer(responder=unique_ids) as server:
        graph = agent(server, True)
        threads = [threading.Thread(target=run, args=(graph, "invoke", f"run{i}")) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(RAN) == 16
    assert_linked(captured, [f"run{i}_{c}" for i in range(8) for c in "ab"])
    code, report = etf.audit(tmp_path / "traces.jsonl", capsys)
    assert (code, report["findings"]) == (0, 0)


@pytest.mark.parametrize("events", [CLEAN, CONFLICT, CUT], ids=["clean", "conflict", "cut"])
def test_the_run_is_the_same_with_and_without_etf_otel(
    stack: Callable[..., Stack], server: LocalChatServer, events: list[Any]
) -> None:
    def once() -> tuple[list[Any], list[Any], list[Any]]:
        RAN.clear()
        start = len(server.requests)
        server.enqueue(Script(events=events), Script(events=ANSWER))
        messages = run(agent(server, True), "invoke")
        seen = [
            (type(m).__name__, m.content, getattr(m, "tool_calls", None), getattr(m, "status", None)) for m in messages
        ]
        return list(RAN), seen, [request.body for request in server.requests[start:]]

    without = once()
    stack()
    assert once() == without


def test_nothing_is_recorded_when_etf_otel_is_disabled(
    captured: Captured, stack: Callable[..., Stack], server: LocalChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack(guard=True)
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "etf_otel")
    server.enqueue(Script(events=CONFLICT), Script(events=ANSWER))
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application") as application:
        run(agent(server, True), "invoke")
    assert tool_results(server.requests[1])["call_a"].startswith("Error invoking tool")  # LangGraph's, not a refusal
    assert captured.spans("execute_tool") == [] and span_kinds(application) == []


# --- lazy ------------------------------------------------------------------------------------------------------

LAZY = """
import sys, wrapt
from etf_otel.integrations.langgraph import LangChainInstrumentor
instrumentor = LangChainInstrumentor()
instrumentor.instrument()
print(sorted(name for name in ("langchain_core", "langchain_openai", "langgraph", "openai") if name in sys.modules))
from langchain_core.tools import BaseTool
from langchain_openai.chat_models.base import BaseChatOpenAI
wrapped = lambda: [isinstance(vars(cls)[name], wrapt.FunctionWrapper)
                   for cls, name in ((BaseTool, "run"), (BaseTool, "arun"), (BaseChatOpenAI, "_stream"))]
print(wrapped())
instrumentor.uninstrument()
print(wrapped())
"""


def test_nothing_is_imported_until_the_application_does_and_uninstrument_restores() -> None:
    done = subprocess.run([sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == ["[]", "[True, True, True]", "[False, False, False]"]
    assert LangChainInstrumentor().instrumentation_dependencies() == ("langchain-core >= 1.0",)
