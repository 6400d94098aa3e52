"""Real multi-round agent loops, zero code: no false violation live or in the audit (issue 36, AGENT-STACKS 11.6, 11.7).

Each framework runs its own loop against the scripted server (``tool_rounds_responder``) for three
tool rounds (two parallel calls in the first two) before the text answer, with every etf-otel
instrumentor installed from its ``opentelemetry_instrumentor`` entry point, as
``opentelemetry-instrument`` installs them, no line of glue. What is asserted is public: the
``etf.integrity.violation`` events on the spans, the ``etf.integrity.violations`` counter,
``etf-otel audit`` of the OTLP JSON export (exit 0, no finding), and that each follow-up settled
the round it answers (``etf.linkage.answered_ids``): a loop never judged is no proof.

The later requests of these loops carry what a follow-up's judgement must scope right: stateless
histories repeating every earlier call and result (pydantic-ai and openai-agents on the Responses
API by default, every Chat Completions and Anthropic history), a ``previous_response_id`` chain
carrying only the newest results, a handoff, turns after the answered one (a file, a synthetic
``search_tools`` round), ids every response reuses, identical loops at once. Each loop runs under
etf-otel alone and, where the framework calls the ``openai`` client's ``create``, beside the
OpenTelemetry GenAI instrumentation recording every request's messages, which the audit reads.
A case marked ``xfail(strict=True)`` still reports a false finding, its reason says which. The last
tests keep real mistakes in a multi-round loop reported, once, on the request that carried them.

    PYTHONPATH=. .venv/bin/python -m pytest tests/integrations/frameworks/test_multi_round.py
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
from agents import OpenAIChatCompletionsModel, RunConfig, RunContextWrapper, Runner, function_tool
from agents import OpenAIResponsesModel as SdkResponsesModel
from agents.run_config import CallModelData, ModelInputData
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import InjectedToolCallId, tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from openai import AsyncOpenAI
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent, BinaryContent, RunContext, Tool
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

from etf_otel import attributes as A
from etf_otel.cli import main
from etf_otel.instrumentation._safety import set_strict
from etf_otel.testing import MISSING, Capture, LocalChatServer, RecordedRequest, Script
from etf_otel.testing import anthropic as AN
from etf_otel.testing import chat as C
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
    """The module's server and the switch its tests plug their model into."""

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
        self.ran: list[tuple[int | None, str, str, str | None]] = []
        self.rounds: Sequence[Round] = ROUNDS
        self.reused_ids = False
        self.instrumentors = [
            point.load()()
            for point in entry_points(group="opentelemetry_instrumentor")
            if point.name.startswith("etf_otel_")
        ]
        for instrumentor in self.instrumentors:
            instrumentor.instrument(
                tracer_provider=self.capture.tracer_provider, meter_provider=self.capture.meter_provider
            )

    def model(self, rounds: Sequence[Round] = ROUNDS, reused_ids: bool = False) -> None:
        self.rounds, self.reused_ids = rounds, reused_ids
        self.switch.current = tool_rounds_responder(rounds, reused_ids=reused_ids)

    def note(self, call_id: str | None, name: str, argument: str) -> None:
        """A tool ran with the id the framework gave it (its round: the id says it, or, where every response
        numbers its calls again, the requests so far)."""
        self.ran.append((len(self.requests()) if self.reused_ids else round_of(call_id), name, argument, call_id))

    def requests(self) -> list[RecordedRequest]:
        return self.server.requests[self.first_request :]

    def sent(self) -> list[tuple[bool, int]]:
        """What each request carried: whether it continued a stored response (``previous_response_id``),
        and how many tool results (a stateless history repeats the earlier ones)."""
        return [
            (bool(request.body.get("previous_response_id")), len(result_ids(request.body)))
            for request in self.requests()
        ]

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

    def audit(self, engine: str = "python") -> tuple[int, list[tuple[str, str, str | None]]]:
        """``etf-otel audit --json`` of the exported file: its exit code and its findings (kind, category,
        call id)."""
        self.capture.tracer_provider.force_flush()
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["audit", "--json", "--no-progress", "--engine", engine, str(self.path)])
        assert code in (0, 1), err.getvalue()
        report = json.loads(out.getvalue())
        found = [
            (f["kind"], f["category"], f.get("call_id")) for trace in report["traces_detail"] for f in trace["findings"]
        ]
        return code, sorted(found)

    def settled(self) -> list[list[str]]:
        """What each request settled, as its response's span says (``etf.linkage.answered_ids``)."""
        spans = sorted(self.capture.spans(A.SPAN_ASSEMBLE_RESPONSE), key=lambda span: span.start_time or 0)
        return [sorted(map(str, (span.attributes or {}).get(A.ETF_LINKAGE_ANSWERED_IDS, ()))) for span in spans]

    def answered(self) -> list[list[str]]:
        """What each request answered: the results it carries for the round before it (a stateless
        history carries the earlier rounds' too)."""
        if self.reused_ids:
            return [[], *([f"call_{i}" for i in range(len(calls))] for calls in self.rounds)]
        return [
            sorted(call_id for call_id in result_ids(request.body) if round_of(call_id) == i)
            for i, request in enumerate(self.requests())
        ]

    def per_response(self) -> list[dict[str, int]]:
        """The violation events of each response's span, by category, in the order of the requests."""
        spans = sorted(self.capture.spans(A.SPAN_ASSEMBLE_RESPONSE), key=lambda span: span.start_time or 0)
        return [
            dict(
                Counter(
                    str((event.attributes or {}).get(A.ETF_ERROR_CATEGORY))
                    for event in span.events
                    if event.name == A.EVENT_INTEGRITY_VIOLATION
                )
            )
            for span in spans
        ]

    def judged(self) -> tuple[dict[str, int], int, int, list[tuple[str, str, str | None]]]:
        """Live violation events by category, the counter, the audit's exit code and findings."""
        violations, counted = self.violations(), self.counted()
        return (violations, counted, *self.audit())

    def assert_clean(self, rounds: Sequence[Round] = ROUNDS) -> None:
        """Every round ran, once, then the answer; nothing judged wrong live or by the audit."""
        ran = [sorted((name, argument) for k, name, argument, _ in self.ran if k == i + 1) for i in range(len(rounds))]
        assert ran == ran_in(rounds) and len(self.ran) == sum(map(len, rounds)), self.ran
        assert len(self.requests()) == len(rounds) + 1
        settled, answered = self.settled(), self.answered()
        violations, counted, code, findings = self.judged()
        kinds = Counter((kind, category) for kind, category, _ in findings)
        summary = f"live {violations} (counted {counted}); audit exit {code}: {dict(kinds)}"
        assert (violations, counted, code, findings) == ({}, 0, 0, []), summary
        assert settled == answered, "every follow-up judged, against the round it answers"
        assert self.pairing() == ({}, 0), f"every request pairs as its provider requires: {self.problems()}"

    def problems(self) -> dict[tuple[str, str], int]:
        return {
            (str(point[A.ETF_PAIRING_PROBLEM]), str(point[A.ETF_PAIRING_REASON])): int(value)
            for point, value in self.capture.points(A.METRIC_REQUEST_PAIRING_PROBLEMS)
        }

    def pairing(self) -> tuple[dict[str, int], int]:
        """The ``etf.request.pairing`` of every response span, by value, and the ``etf.request.pairing_problems``
        counter (docs/protocols.md, "The request before it is sent")."""
        spans = self.capture.spans(A.SPAN_ASSEMBLE_RESPONSE)
        values = Counter(str((span.attributes or {}).get(A.ETF_REQUEST_PAIRING)) for span in spans)
        values.pop("None", None)
        return dict(values), int(sum(value for _, value in self.capture.points(A.METRIC_REQUEST_PAIRING_PROBLEMS)))


def result_ids(body: dict[str, Any]) -> list[str]:
    """The call id of every tool result a request body carries, whatever the protocol."""
    outputs = [item["call_id"] for item in body.get("input") or () if item.get("type") == "function_call_output"]
    tools = [message["tool_call_id"] for message in body.get("messages") or () if message.get("role") == "tool"]
    blocks = [
        block["tool_use_id"]
        for message in body.get("messages") or ()
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    converse = [  # Bedrock Converse's toolResult blocks
        block["toolResult"]["toolUseId"]
        for message in body.get("messages") or ()
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if "toolResult" in block
    ]
    return [*outputs, *tools, *blocks, *converse]


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
def guard(request: pytest.FixtureRequest) -> bool:
    """Guard mode, as zero code turns it on (``OTEL_INSTRUMENTATION_ETF_GUARD=true``); off unless a test asks."""
    return bool(getattr(request, "param", False))


@pytest.fixture
def world(served: Served, tmp_path: Path, stack: str, guard: bool, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """The instrumented process: etf-otel's instrumentors (guard mode if asked), and the GenAI openai
    instrumentation recording messages beside them under ``WITH_GENAI`` (it is in the test extra)."""
    peer = None
    if stack == WITH_GENAI:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
        peer = pytest.importorskip("opentelemetry.instrumentation.genai.openai").OpenAIInstrumentor()
    if guard:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_ETF_GUARD", "true")
    previous = set_strict(True)
    made = World(served, tmp_path / "traces.jsonl")
    try:
        if peer is not None:
            peer.instrument(tracer_provider=made.capture.tracer_provider, meter_provider=made.capture.meter_provider)
        yield made
    finally:
        if peer is not None and peer.is_instrumented_by_opentelemetry:
            peer.uninstrument()
        made.close()
        made.capture.shutdown()
        set_strict(previous)


def case(stack: str, *values: Any, id: str) -> Any:
    """One loop under one stack."""
    return pytest.param(stack, *values, id=f"{stack}-{id}")


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
        model = AnthropicModel(
            options.pop("model_name", "m"), provider=AnthropicProvider(base_url=world.server.root_url, api_key="x")
        )
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


# --- pydantic-ai: turns after the answer ----------------------------------------------------------------------------

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
FILE_ROUNDS: tuple[Round, ...] = ((("get_chart", {"city": "Paris"}), ("get_time", {"tz": "CET"})), *ROUNDS[1:])


@pytest.mark.parametrize("stack", [ETF_OTEL, WITH_GENAI], indirect=True)
def test_pydantic_ai_a_file_sent_after_the_results_judges_nothing_wrong(world: World) -> None:
    """``OpenAIChatModel`` sends a file a tool returned as a user message after the ``tool`` messages (with
    a system note): turns after the answered one, in every later request of the loop."""

    def get_chart(ctx: RunContext[None], city: str) -> BinaryContent:
        world.note(ctx.tool_call_id, "get_chart", city)
        return BinaryContent(data=PNG, media_type="image/png")

    def get_time(ctx: RunContext[None], tz: str) -> str:
        world.note(ctx.tool_call_id, "get_time", tz)
        return clock(tz)

    def get_weather(ctx: RunContext[None], city: str) -> str:
        world.note(ctx.tool_call_id, "get_weather", city)
        return weather(city)

    world.model(FILE_ROUNDS)
    agent = pydantic_agent(world, "chat", tools=[get_chart, get_time, get_weather])
    assert pydantic_run(agent, "run") == ANSWER
    roles = [message["role"] for message in world.requests()[1].body["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "system", "user"]  # the file after the answers
    world.assert_clean(FILE_ROUNDS)


SEARCH_ROUNDS: tuple[Round, ...] = ((("get_time", {"tz": "CET"}),), *ROUNDS[1:])


@only(ETF_OTEL)
@pytest.mark.parametrize(
    ("model_name", "after"),
    [
        pytest.param("claude-sonnet-4-6", "assistant"),  # withholds deferred schemas: a search_tools round
        pytest.param("claude-sonnet-5-5", "system"),  # adds tools by reference: a system turn, no call
    ],
)
def test_pydantic_ai_a_tool_revealed_mid_run_judges_nothing_wrong(world: World, model_name: str, after: str) -> None:
    """A tool revealed mid-run to an Anthropic model: pydantic-ai writes the news after the answered turn, as a
    ``search_tools`` round of its own (a call the model never sent, answered at once) for a model that
    withholds deferred schemas, as a system turn for one that adds tools by reference."""

    def get_time(ctx: RunContext[None], tz: str) -> str:
        world.note(ctx.tool_call_id, "get_time", tz)
        return clock(tz)

    def get_weather(ctx: RunContext[None], city: str) -> str:
        world.note(ctx.tool_call_id, "get_weather", city)
        return weather(city)

    def get_moon(city: str) -> str:
        return "full"

    async def from_round_two(ctx: RunContext[None], definition: Any) -> Any:
        return definition if ctx.run_step > 1 else None

    world.model(SEARCH_ROUNDS)
    tools = [get_time, Tool(get_weather, prepare=from_round_two), Tool(get_moon, defer_loading=True)]
    agent = pydantic_agent(world, "anthropic", tools=tools, model_name=model_name)
    assert pydantic_run(agent, "run") == ANSWER
    (_, _, _, news, *_) = world.requests()[1].body["messages"]
    assert news["role"] == after
    if after == "assistant":  # the fabricated call, and its result in the next user message
        assert [(block["name"], round_of(block["id"])) for block in news["content"]] == [("search_tools", None)]
    world.assert_clean(SEARCH_ROUNDS)


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
    world.ran.insert(0, (1, "transfer_to_weather_desk", "", None))  # the SDK runs the handoff itself
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


# --- ids a provider reuses in every response; identical loops at once -------------------------------------------


@pytest.mark.parametrize(
    ("stack", "framework", "kind"),
    [
        case(ETF_OTEL, "pydantic-ai", "responses", id="pydantic-ai-responses-stateless"),
        case(ETF_OTEL, "pydantic-ai", "responses-chained", id="pydantic-ai-responses-previous-response-id"),
        case(ETF_OTEL, "pydantic-ai", "chat", id="pydantic-ai-chat"),
        case(ETF_OTEL, "langgraph", "chat", id="langgraph"),
        case(ETF_OTEL, "litellm", "chat", id="litellm"),
        case(WITH_GENAI, "pydantic-ai", "responses", id="pydantic-ai-responses-stateless"),  # the ids coincide
        case(WITH_GENAI, "pydantic-ai", "responses-chained", id="pydantic-ai-responses-previous-response-id"),
        case(WITH_GENAI, "pydantic-ai", "chat", id="pydantic-ai-chat"),
        case(WITH_GENAI, "langgraph", "chat", id="langgraph"),
    ],
    indirect=["stack"],
)
@pytest.mark.usefixtures("litellm_loop_closed")
def test_ids_every_response_reuses_judge_nothing_wrong(world: World, framework: str, kind: str) -> None:
    """Every response numbers its calls ``call_0``, ``call_1`` again (Bedrock's OpenAI-compatible endpoint):
    a stateless history holds ``call_0`` once per round. (openai-agents refuses such a model: its
    ``ModelBehaviorError`` "Model reused a completed tool call ID".)"""
    world.model(reused_ids=True)
    if framework == "pydantic-ai":
        settings = RESPONSES_CHAINED if kind == "responses-chained" else {}
        agent = pydantic_agent(world, kind.removesuffix("-chained"))
        assert pydantic_run(agent, "run", model_settings=settings) == ANSWER
    elif framework == "langgraph":
        messages = graph(world, False).invoke({"messages": [("user", "Weather and time, three places?")]})["messages"]
        assert messages[-1].content == ANSWER
    else:
        assert litellm_loop(world, False) == ANSWER
    world.assert_clean()  # a stateless Responses input repeating call_0 pairs each output with one call_0


@pytest.mark.parametrize(
    ("stack", "kind", "reused_ids"),
    [
        case(ETF_OTEL, "responses", False, id="responses-stateless"),
        case(ETF_OTEL, "chat", False, id="chat"),
        case(ETF_OTEL, "anthropic", False, id="anthropic"),
        case(ETF_OTEL, "responses", True, id="responses-stateless-reused-ids"),
        case(ETF_OTEL, "chat", True, id="chat-reused-ids"),
    ],
    indirect=["stack"],
)
def test_identical_loops_at_once_judge_nothing_wrong(world: World, kind: str, reused_ids: bool) -> None:
    """Four identical pydantic-ai loops in one process, at once: each follow-up judged against its own
    conversation. With ids every response reuses, nothing tells the conversations apart: those follow-ups
    are not judged (``etf.linkage.ambiguous``), never a violation."""
    world.model(reused_ids=reused_ids)
    agent = pydantic_agent(world, kind)

    async def loops() -> list[str]:
        async def one() -> str:
            return str((await agent.run("Weather and time, three places?")).output)

        return await asyncio.gather(*(one() for _ in range(4)))

    assert asyncio.run(loops()) == [ANSWER] * 4
    assert len(world.requests()) == 16 and len(world.ran) == 20
    settled = sorted(call_id for ids in world.settled() for call_id in ids)
    if not reused_ids:  # every call settled once, by the request that answered its round
        assert settled == sorted({call_id for request in world.requests() for call_id in result_ids(request.body)})
    violations, counted, code, findings = world.judged()
    assert (violations, counted, code, findings) == ({}, 0, 0, [])


# --- real mistakes in a multi-round loop are still reported ---------------------------------------------------------


def wrong_id(results: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The first call answered with an id the model never sent."""
    return [{**results[0], key: "call_9"}, *results[1:]]


def dropped(results: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The last result lost (a retry, a trimmed history)."""
    return results[:-1]


MISTAKES = {"wrong-id": wrong_id, "dropped-result": dropped}


def assert_reported(world: World, mistake: str) -> None:
    """The request that carried the mistake (the third) has it on its span, and only that one; the audit
    finds it (exit 1) and nothing else: every finding names an id of the mistake or none (a stateless
    history repeating the mistaken turn later does not make the earlier rounds' results orphaned)."""
    round_two = sorted(str(call_id) for k, _, _, call_id in world.ran if k == 2)
    if mistake == "wrong-id":
        expected, involved = {"orphaned_result": 1, "unanswered_call": 1}, {"call_9", round_two[0], None}
    else:
        expected, involved = {"unanswered_call": 1}, {round_two[-1], None}
    per_response = world.per_response()
    violations, counted, code, findings = world.judged()
    summary = f"live {per_response} (counted {counted}); audit exit {code}: {findings}"
    assert per_response == [{}, {}, expected, {}], summary
    assert (violations, counted, code) == (expected, sum(expected.values()), 1), summary
    assert {category for kind, category, _ in findings if kind != "request_pairing"} == set(expected), summary
    assert {call_id for _, _, call_id in findings} <= involved, summary
    # the request carrying the mistake is one its provider refuses: said before it is sent (11.8), on its span
    # and on every later request that repeats the mistaken round (a stateless history)
    assert [kind for kind, _, _ in findings if kind == "request_pairing"], summary
    assert world.pairing()[0].get("broken", 0) >= 1, summary


@only(ETF_OTEL)
@pytest.mark.usefixtures("litellm_loop_closed")
@pytest.mark.parametrize("stream", [False, True], ids=["body", "streamed"])
@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_litellm_a_mistake_of_the_tool_host_in_round_two_is_reported(world: World, stream: bool, mistake: str) -> None:
    change = MISTAKES[mistake]
    world.model()
    host = lambda k, results: change(results, "tool_call_id") if k == 2 else results  # noqa: E731
    assert litellm_loop(world, stream, host) == ANSWER
    assert_reported(world, mistake)


def in_round_two(change: Callable[[list[dict[str, Any]], str], list[dict[str, Any]]]) -> RunConfig:
    """openai-agents with a ``call_model_input_filter`` that applies ``change`` to round 2's
    ``function_call_output`` items of every request (what a buggy trimming filter does)."""

    def apply(data: CallModelData[Any]) -> ModelInputData:
        items = list(data.model_data.input)
        at = [
            i
            for i, item in enumerate(items)
            if isinstance(item, dict) and item.get("type") == "function_call_output" and round_of(item["call_id"]) == 2
        ]
        if at:
            changed = change([dict(items[i]) for i in at], "call_id")
            items = [
                *(item for i, item in enumerate(items[: at[-1] + 1]) if i not in at),
                *changed,
                *items[at[-1] + 1 :],
            ]
        return ModelInputData(input=items, instructions=data.model_data.instructions)  # type: ignore[arg-type]

    return RunConfig(call_model_input_filter=apply)


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
@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_openai_agents_an_input_filter_mistake_in_round_two_is_reported(world: World, kind: str, mistake: str) -> None:
    change = MISTAKES[mistake]
    world.model()
    assert sdk_run(sdk_agent(world, kind), "run", run_config=in_round_two(change)) == ANSWER
    assert_reported(world, mistake)


LINKAGE = frozenset({"orphaned_result", "unanswered_call", "duplicate_result"})


@only(ETF_OTEL)
@pytest.mark.parametrize("guard", [True], indirect=True, ids=["guard"])
@pytest.mark.parametrize("kind", ["chat", "anthropic"])
def test_pydantic_ai_guarded_a_refusal_answered_in_round_two_is_no_linkage_violation(world: World, kind: str) -> None:
    """Round 2's stream is cut in its second call: the rejection is a real finding (``recorded_rejection``);
    the guard refuses the first call, pydantic-ai answers both with an error result (AGENT-STACKS 11.7:
    the documented way to answer a refused call), and the loop goes on to round 3 and the answer. The
    instrumentation records each answer as a ``refusal_answered`` drift event naming the call, which the
    audit takes as its answer: the cut call pydantic-ai tried to run is no ``execution_without_result``."""
    rounds = tool_rounds_responder(ROUNDS)
    first, second = (f"{'toolu' if kind == 'anthropic' else 'call'}_9000r2c{i}" for i in (1, 2))
    cut = (
        Script(events=[C.chunk(C.fragment(0, first, "get_weather", '{"city":"Lyon"}', type="function")),
                       C.chunk(C.fragment(1, second, "get_weather", '{"city":', type="function"))])
        if kind == "chat"
        else Script(
            events=AN.stream(
                AN.tool_call(0, first, "get_weather", '{"city":"Lyon"}'),
                [AN.tool_start(1, second, "get_weather"), AN.json_delta(1, '{"city":')],
                stop_reason=MISSING,
                stop=False,
            ),
            named=True,
        )
    )  # fmt: skip
    world.switch.current = lambda request: cut if len(world.requests()) == 2 else rounds(request)
    assert pydantic_run(pydantic_agent(world, kind), "run_stream") == ANSWER
    assert {first, second} <= set(result_ids(world.requests()[2].body))  # both answered, with an error
    assert [k for k, *_ in world.ran] == [1, 1, 3]  # round 2 never ran
    violations, counted, code, findings = world.judged()
    summary = f"live {world.per_response()}; audit exit {code}: {findings}"
    assert not LINKAGE & set(violations), summary
    assert code == 1 and ("recorded_rejection", "truncated_stream", None) in findings, summary
    assert not LINKAGE & {category for _, category, _ in findings}, summary
    assert ("execution_without_result", "unanswered_call", second) not in findings, summary
    assert world.audit("chdb") == (code, findings)  # the SQL engine reads the drift event alike
