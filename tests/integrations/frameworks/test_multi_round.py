"""Real multi-round agent loops, zero code: no false violation live or in the audit (issue 36, AGENT-STACKS 11.6, 11.7).

Each framework runs its own loop against the scripted server for three tool rounds (two parallel
calls in the first two) before the text answer, with every etf-otel instrumentor installed from its
``opentelemetry_instrumentor`` entry point, as ``opentelemetry-instrument`` installs them. What is
asserted is public: the ``etf.integrity.violation`` events on the spans, the
``etf.integrity.violations`` counter, and ``etf-otel audit`` of the OTLP JSON export (exit 0, no
finding). The later requests of these loops carry what a follow-up's judgement must scope right:
stateless histories repeating every earlier call and result (pydantic-ai and openai-agents on the
Responses API by default, every Chat Completions and Anthropic history), a ``previous_response_id``
chain carrying only the newest results, a handoff, a file a tool returned sent after the results.
Loops marked ``xfail(strict=True)`` report false violations today: the fix of issue 36 removes
the marks. The last tests keep real mistakes in a multi-round loop reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any

import agents
import pytest
from agents import Agent as SdkAgent
from agents import (
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    function_tool,
)
from agents import (
    OpenAIResponsesModel as SdkResponsesModel,
)
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import InjectedToolCallId, tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from openai import AsyncOpenAI
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

from etf_otel import attributes as A
from etf_otel.cli import main
from etf_otel.instrumentation._safety import set_strict
from etf_otel.testing import Capture, LocalChatServer, RecordedRequest, Script
from etf_otel.testing._rounds import Round, round_of, tool_rounds_responder
from etf_otel.testing._scripted import ANSWER

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the price list (no network)
litellm = pytest.importorskip("litellm")

agents.set_tracing_disabled(True)  # its own exporter would reach the vendor

pytestmark = pytest.mark.filterwarnings(
    # LiteLLM imports provider modules lazily, during the first call; pydantic warns about one of them
    "ignore:Items? .*ReadOnly. qualifier:UserWarning",
)

ROUNDS: tuple[Round, ...] = (
    (("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})),
    (("get_weather", {"city": "Lyon"}), ("get_weather", {"city": "Nice"})),
    (("get_time", {"tz": "UTC"}),),
)
"""Three rounds before the answer: two parallel calls, two parallel calls of one tool, one call."""


def ran_in(rounds: Sequence[Round]) -> list[list[tuple[str, str]]]:
    """What the tools run, round by round (the calls of a round in any order: frameworks run them in parallel)."""
    return [sorted((name, "".join(map(str, arguments.values()))) for name, arguments in calls) for calls in rounds]


def weather(city: str) -> str:
    return f"sunny in {city}"


def clock(tz: str) -> str:
    return f"noon {tz}"


# --- one server for the module, the instrumentors per test -------------------------------------------------------


class Switch:
    """The server's responder: the current test's model (``None``: the server's usual ``500``)."""

    def __init__(self) -> None:
        self.current: Callable[[RecordedRequest], Script | None] | None = None

    def __call__(self, request: RecordedRequest) -> Script | None:
        return self.current(request) if self.current is not None else None


@dataclass
class Served:
    server: LocalChatServer
    switch: Switch


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    switch = Switch()
    with LocalChatServer(responder=switch) as server:
        yield Served(server, switch)


class World:
    """Every etf-otel instrumentor from its entry point on the test's providers, spans also written to an
    OTLP JSON file; the scripted model; what the tools ran; what is judged."""

    def __init__(self, served: Served, path: Path) -> None:
        self.server = served.server
        self.switch = served.switch
        self.path = path
        self.capture = Capture()
        self.capture.tracer_provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(str(path))))
        self.first_request = len(self.server.requests)
        self.ran: list[tuple[int | None, str, str]] = []
        self.instrumentors = [
            point.load()()
            for point in entry_points(group="opentelemetry_instrumentor")
            if point.name.startswith("etf_otel_")
        ]
        for instrumentor in self.instrumentors:
            instrumentor.instrument(
                tracer_provider=self.capture.tracer_provider, meter_provider=self.capture.meter_provider
            )

    def model(self, rounds: Sequence[Round] = ROUNDS) -> None:
        self.switch.current = tool_rounds_responder(rounds)

    def note(self, call_id: str | None, name: str, argument: str) -> None:
        self.ran.append((round_of(call_id), name, argument))

    def requests(self) -> list[RecordedRequest]:
        return self.server.requests[self.first_request :]

    def sent(self) -> list[tuple[bool, int]]:
        """What each request carried: whether it continued a stored response (``previous_response_id``),
        and how many tool results (a stateless history repeats the earlier ones)."""
        return [(bool(request.body.get("previous_response_id")), results(request.body)) for request in self.requests()]

    def close(self) -> None:
        self.switch.current = None
        for instrumentor in self.instrumentors:
            if instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.uninstrument()
        self.instrumentors = []

    # --- what is judged ---------------------------------------------------------------------------------------

    def violations(self) -> dict[str, int]:
        """The ``etf.integrity.violation`` events of every span, by ``etf.error.category``."""
        return dict(
            Counter(
                str(event.attributes.get(A.ETF_ERROR_CATEGORY))
                for span in self.capture.spans()
                for event in span.events
                if event.name == A.EVENT_INTEGRITY_VIOLATION and event.attributes is not None
            )
        )

    def counted(self) -> int:
        """The ``etf.integrity.violations`` counter, all categories."""
        return int(sum(value for _, value in self.capture.points(A.METRIC_INTEGRITY_VIOLATIONS)))

    def audit(self) -> tuple[int, list[tuple[str, str]]]:
        """``etf-otel audit --json`` of the exported file: its exit code and its findings (kind, category)."""
        self.capture.tracer_provider.force_flush()
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["audit", "--json", "--no-progress", str(self.path)])
        assert code in (0, 1), err.getvalue()
        report = json.loads(out.getvalue())
        found = [(f["kind"], f["category"]) for trace in report["traces_detail"] for f in trace["findings"]]
        return code, sorted(found)

    def linkage(self) -> list[tuple[Any, ...]]:
        """Per response span, in order: (response id, answered ids, ambiguous)."""
        return [
            (
                (span.attributes or {}).get("gen_ai.response.id"),
                tuple((span.attributes or {}).get(A.ETF_LINKAGE_ANSWERED_IDS, ())),
                (span.attributes or {}).get(A.ETF_LINKAGE_AMBIGUOUS),
            )
            for span in sorted(self.capture.spans(A.SPAN_ASSEMBLE_RESPONSE), key=lambda span: span.start_time or 0)
        ]

    def judged(self) -> tuple[dict[str, int], int, int, list[tuple[str, str]]]:
        """Live violation events by category, the counter, the audit's exit code and findings."""
        violations, counted = self.violations(), self.counted()
        return (violations, counted, *self.audit())

    def assert_clean(self, rounds: Sequence[Round] = ROUNDS) -> None:
        """Every round ran, once, then the answer; nothing judged wrong live or by the audit."""
        ran = [sorted((name, argument) for k, name, argument in self.ran if k == i + 1) for i in range(len(rounds))]
        assert ran == ran_in(rounds) and len(self.ran) == sum(map(len, rounds)), self.ran
        assert len(self.requests()) == len(rounds) + 1
        violations, counted, code, findings = self.judged()
        summary = f"live {violations} (counted {counted}); audit exit {code}: {dict(Counter(findings))}"
        assert (violations, counted, code, findings) == ({}, 0, 0, []), summary


def results(body: dict[str, Any]) -> int:
    """How many tool results a request body carries, whatever the protocol."""
    outputs = [item for item in body.get("input") or () if item.get("type") == "function_call_output"]
    tools = [message for message in body.get("messages") or () if message.get("role") == "tool"]
    blocks = [
        block
        for message in body.get("messages") or ()
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    return len(outputs) + len(tools) + len(blocks)


STATELESS = [(False, 0), (False, 2), (False, 4), (False, 5)]
"""What the requests of a stateless loop carry: every earlier result again."""
CHAINED = [(False, 0), (True, 2), (True, 2), (True, 1)]
"""What the requests of a ``previous_response_id`` chain carry: the newest results only."""


ETF_OTEL = "etf-otel"
WITH_GENAI = "with-genai-openai"
"""The stacks a loop runs under: etf-otel's instrumentors alone, or beside the OpenTelemetry GenAI
instrumentation of ``openai`` recording the messages of every request (``gen_ai.input.messages``,
which the audit reads: a stateless history's earlier results are in every later request's)."""


@pytest.fixture(params=[ETF_OTEL, WITH_GENAI])
def stack(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def only(*stacks: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("stack", stacks, indirect=True)


@pytest.fixture
def world(served: Served, tmp_path: Path, stack: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    previous = set_strict(True)
    made = World(served, tmp_path / "traces.jsonl")
    peer = None
    if stack == WITH_GENAI:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
        peer = pytest.importorskip("opentelemetry.instrumentation.genai.openai").OpenAIInstrumentor()
        peer.instrument(tracer_provider=made.capture.tracer_provider, meter_provider=made.capture.meter_provider)
    try:
        yield made
    finally:
        if peer is not None:
            peer.uninstrument()
        made.close()
        made.capture.shutdown()
        set_strict(previous)


STATELESS_AUDIT = (
    "issue 36: the audit judges every tool message of a stateless history (gen_ai.input.messages) against "
    "the last assistant turn: the earlier rounds' results are orphaned_tool_message"
)
CHAINED_AUDIT = (
    "issue 36: the audit judges a previous_response_id request's results (no assistant turn in its messages) "
    "against the calls of its own trace only: each round's results are orphaned_tool_message"
)


def case(stack: str, *values: Any, id: str, xfail: str | None = None) -> Any:
    """One loop under one stack; ``xfail``: why it reports false violations today (strict: the fix removes it)."""
    marks = [pytest.mark.xfail(reason=xfail, strict=True)] if xfail else []
    return pytest.param(stack, *values, id=f"{stack}-{id}", marks=marks)


# --- pydantic-ai --------------------------------------------------------------------------------------------------


def pydantic_agent(world: World, kind: str, **options: Any) -> Any:
    """A pydantic-ai agent on ``kind`` (``chat``, ``responses``, ``anthropic``) with the two tools."""

    def get_weather(ctx: RunContext[None], city: str) -> str:
        world.note(ctx.tool_call_id, "get_weather", city)
        return weather(city)

    def get_time(ctx: RunContext[None], tz: str) -> str:
        world.note(ctx.tool_call_id, "get_time", tz)
        return clock(tz)

    model: Any
    if kind == "anthropic":
        model = AnthropicModel("m", provider=AnthropicProvider(base_url=world.server.root_url, api_key="x"))
    else:
        provider = OpenAIProvider(base_url=world.server.base_url, api_key="x")
        model = (OpenAIChatModel if kind == "chat" else OpenAIResponsesModel)("m", provider=provider)
    tools = options.pop("tools", [get_weather, get_time])
    return Agent(model, tools=tools, **options)


def pydantic_run(agent: Any, method: str, **options: Any) -> str:
    async def go() -> str:
        if method == "run":
            return str((await agent.run("Weather and time, three places?", **options)).output)
        async with agent.run_stream("Weather and time, three places?", **options) as streamed:
            return str(await streamed.get_output())

    return asyncio.run(go())


RESPONSES_CHAINED = {"openai_previous_response_id": "auto"}
PYDANTIC_LOOPS = [
    case(ETF_OTEL, "responses", {}, id="responses-stateless"),
    case(ETF_OTEL, "responses", RESPONSES_CHAINED, id="responses-previous-response-id"),
    case(ETF_OTEL, "chat", {}, id="chat"),
    case(ETF_OTEL, "anthropic", {}, id="anthropic"),
    case(WITH_GENAI, "responses", {}, id="responses-stateless"),
    case(WITH_GENAI, "responses", RESPONSES_CHAINED, id="responses-previous-response-id"),
    case(WITH_GENAI, "chat", {}, id="chat"),
]


@pytest.mark.parametrize("method", ["run", "run_stream"])
@pytest.mark.parametrize(("stack", "kind", "settings"), PYDANTIC_LOOPS, indirect=["stack"])
def test_pydantic_ai_three_rounds_judge_nothing_wrong(
    world: World, kind: str, settings: dict[str, Any], method: str
) -> None:
    world.model()
    agent = pydantic_agent(world, kind)
    assert pydantic_run(agent, method, model_settings=settings) == ANSWER
    assert world.sent() == (CHAINED if settings else STATELESS)
    world.assert_clean()


@pytest.fixture
def instrument_all(world: World) -> Iterator[None]:
    """pydantic-ai's own instrumentation too (what logfire turns on), its messages recorded."""
    Agent.instrument_all(InstrumentationSettings(tracer_provider=world.capture.tracer_provider, include_content=True))
    try:
        yield
    finally:
        Agent.instrument_all(False)


@pytest.mark.usefixtures("instrument_all")
@pytest.mark.parametrize(
    ("stack", "kind", "settings"),
    [
        case(ETF_OTEL, "responses", {}, id="responses-stateless"),
        case(ETF_OTEL, "anthropic", {}, id="anthropic"),
        case(WITH_GENAI, "responses", {}, id="responses-stateless"),
        case(WITH_GENAI, "responses", RESPONSES_CHAINED, id="responses-previous-response-id"),  # one trace
        case(WITH_GENAI, "chat", {}, id="chat"),
    ],
    indirect=["stack"],
)
def test_pydantic_ai_with_its_own_instrumentation_three_rounds_judge_nothing_wrong(
    world: World, kind: str, settings: dict[str, Any]
) -> None:
    """``invoke_agent`` holds the run's requests in one trace; its ``chat`` spans record the messages in
    pydantic-ai's own shape."""
    world.model()
    assert pydantic_run(pydantic_agent(world, kind), "run", model_settings=settings) == ANSWER
    world.assert_clean()


# --- openai-agents ------------------------------------------------------------------------------------------------


def sdk_agent(world: World, kind: str, name: str = "helper", **options: Any) -> SdkAgent[Any]:
    """An openai-agents agent on the Responses model (``responses``) or the Chat Completions one (``chat``)."""

    @function_tool
    def get_weather(ctx: RunContextWrapper[Any], city: str) -> str:
        world.note(getattr(ctx, "tool_call_id", None), "get_weather", city)
        return weather(city)

    @function_tool
    def get_time(ctx: RunContextWrapper[Any], tz: str) -> str:
        world.note(getattr(ctx, "tool_call_id", None), "get_time", tz)
        return clock(tz)

    client = AsyncOpenAI(base_url=world.server.base_url, api_key="x", max_retries=0)
    model: Any = (
        OpenAIChatCompletionsModel(model="m", openai_client=client)
        if kind == "chat"
        else SdkResponsesModel(model="m", openai_client=client)
    )
    tools = options.pop("tools", [get_weather, get_time])
    return SdkAgent(name=name, instructions="be brief", tools=tools, model=model, **options)


def sdk_run(agent: SdkAgent[Any], method: str, **options: Any) -> str:
    async def go() -> str:
        if method == "run":
            return str((await Runner.run(agent, "Weather and time, three places?", **options)).final_output)
        streamed = Runner.run_streamed(agent, "Weather and time, three places?", **options)
        async for _ in streamed.stream_events():
            pass
        return str(streamed.final_output)

    return asyncio.run(go())


SDK_CHAINED = {"auto_previous_response_id": True}


@pytest.mark.parametrize("method", ["run", "run_streamed"])
@pytest.mark.parametrize(
    ("stack", "kind", "options"),
    [
        case(ETF_OTEL, "responses", {}, id="responses-stateless"),
        case(ETF_OTEL, "responses", SDK_CHAINED, id="responses-previous-response-id"),
        case(ETF_OTEL, "chat", {}, id="chat"),
        case(WITH_GENAI, "responses", {}, id="responses-stateless"),
        case(WITH_GENAI, "responses", SDK_CHAINED, id="responses-previous-response-id"),
        case(WITH_GENAI, "chat", {}, id="chat"),
    ],
    indirect=["stack"],
)
def test_openai_agents_three_rounds_judge_nothing_wrong(
    world: World, kind: str, options: dict[str, Any], method: str
) -> None:
    world.model()
    assert sdk_run(sdk_agent(world, kind), method, **options) == ANSWER
    assert world.sent() == (CHAINED if options else STATELESS)
    world.assert_clean()


HANDOFF: tuple[Round, ...] = ((("transfer_to_weather_desk", {}),), *ROUNDS)
"""The triage agent hands off, then the weather desk goes round three times."""


@pytest.mark.parametrize("method", ["run", "run_streamed"])
@pytest.mark.parametrize(
    ("stack", "kind"),
    [
        case(ETF_OTEL, "responses", id="responses-stateless"),
        case(ETF_OTEL, "chat", id="chat"),
        case(WITH_GENAI, "responses", id="responses-stateless"),
        case(WITH_GENAI, "chat", id="chat"),
    ],
    indirect=["stack"],
)
def test_openai_agents_handoff_chain_judges_nothing_wrong(world: World, kind: str, method: str) -> None:
    world.model(HANDOFF)
    desk = sdk_agent(world, kind, name="weather_desk")
    triage = sdk_agent(world, kind, name="triage", tools=[], handoffs=[desk])
    assert sdk_run(triage, method) == ANSWER
    assert world.sent() == [(False, 0), (False, 1), (False, 3), (False, 5), (False, 6)]
    world.ran.insert(0, (1, "transfer_to_weather_desk", ""))  # the SDK runs the handoff itself
    world.assert_clean(HANDOFF)


# --- LangGraph ----------------------------------------------------------------------------------------------------


def graph(world: World, streaming: bool) -> Any:
    """The ReAct loop: a model node over ``ChatOpenAI``, a ``ToolNode``, and back until no call is left."""

    @tool
    def get_weather(city: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """The weather in a city."""
        world.note(call_id, "get_weather", city)
        return weather(city)

    @tool
    def get_time(tz: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """The time in a time zone."""
        world.note(call_id, "get_time", tz)
        return clock(tz)

    tools = [get_weather, get_time]
    options: dict[str, Any] = {"streaming": True} if streaming else {}
    chat = ChatOpenAI(base_url=world.server.base_url, api_key="x", model="m", max_retries=0, **options)  # type: ignore[arg-type]
    model = chat.bind_tools(tools)

    def call(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", RunnableLambda(call))
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile()


@pytest.mark.parametrize(
    ("stack", "streaming"),
    [
        case(ETF_OTEL, False, id="body"),
        case(ETF_OTEL, True, id="streamed"),
        case(WITH_GENAI, False, id="body"),
        case(WITH_GENAI, True, id="streamed"),
    ],
    indirect=["stack"],
)
def test_langgraph_tool_node_three_rounds_judge_nothing_wrong(world: World, streaming: bool) -> None:
    world.model()
    messages = graph(world, streaming).invoke({"messages": [("user", "Weather and time, three places?")]})["messages"]
    assert messages[-1].content == ANSWER
    assert world.sent() == STATELESS
    world.assert_clean()


# --- LiteLLM ------------------------------------------------------------------------------------------------------


def litellm_loop(world: World, stream: bool, host: Callable[[int, list[Any]], list[Any]] | None = None) -> str:
    """The application's own loop over ``litellm.completion``: the assistant turn as LiteLLM gave it, then
    one ``tool`` message per call (``host`` may change them, round by round), until the text answer."""
    messages: list[Any] = [{"role": "user", "content": "Weather and time, three places?"}]
    for round_number in range(1, 10):
        response = litellm.completion(
            model="openai/m", api_base=world.server.base_url, api_key="x", messages=messages, stream=stream
        )
        if stream:
            chunks = list(response)
            message = litellm.stream_chunk_builder(chunks, messages=messages).choices[0].message
        else:
            message = response.choices[0].message
        if not message.tool_calls:
            return str(message.content)
        results = []
        for call in message.tool_calls:
            argument = "".join(map(str, json.loads(call.function.arguments).values()))
            world.note(call.id, call.function.name, argument)
            result = weather(argument) if call.function.name == "get_weather" else clock(argument)
            results.append({"role": "tool", "tool_call_id": call.id, "content": result})
        messages = [*messages, message, *(host(round_number, results) if host else results)]
    raise AssertionError("the model never answered")


@pytest.fixture
def litellm_loop_closed() -> Iterator[None]:
    """Close the event loop LiteLLM's sync logging makes (seen without etf-otel too)."""
    yield
    loop = getattr(getattr(asyncio.get_event_loop_policy(), "_local", None), "_loop", None)
    if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_running() and not loop.is_closed():
        loop.close()
        asyncio.set_event_loop(None)


@only(ETF_OTEL)  # LiteLLM posts through the client's low-level post(): the GenAI instrumentation sees nothing
@pytest.mark.usefixtures("litellm_loop_closed")
@pytest.mark.parametrize("stream", [False, True], ids=["body", "streamed"])
def test_litellm_completion_three_rounds_judge_nothing_wrong(world: World, stream: bool) -> None:
    world.model()
    assert litellm_loop(world, stream) == ANSWER
    assert world.sent() == STATELESS
    world.assert_clean()
