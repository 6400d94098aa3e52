"""pydantic-ai agents, zero code: their tool runs recorded, linked and judged (docs/frameworks.md, "pydantic-ai").

Real ``pydantic_ai`` agents against the scripted server, with the ``openai``, ``anthropic`` and
``pydantic_ai`` instrumentors exporting to an OTLP JSON file that ``etf-otel audit`` reads, as
an application under ``opentelemetry-instrument`` would.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import ModelConnectionError
from pydantic_ai.models import Model
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

from etf_otel import attributes as A
from etf_otel.cli import main
from etf_otel.integrations.anthropic import instrument_anthropic
from etf_otel.integrations.openai import instrument_openai
from etf_otel.integrations.pydantic_ai import PydanticAIInstrumentor, instrument_pydantic_ai
from etf_otel.testing import LocalChatServer, RecordedRequest, Script
from etf_otel.testing import anthropic as a
from etf_otel.testing import chat as c
from etf_otel.testing import responses as r
from etf_otel.testing._scripted import ANSWER, tool_turn_responder
from tests.conftest import Process

KINDS = ("chat", "responses", "anthropic")
METHODS = ("run", "run_sync", "run_stream", "run_stream_events")
PROPOSED = {"chat": ["call_1", "call_2"], "responses": ["call_1", "call_2"], "anthropic": ["toolu_1", "toolu_2"]}
RAN = [("get_weather", {"city": "Paris"}), ("get_time", {"timezone": "Europe/Paris"})]
REFUSED = "etf-otel guard refused to execute a tool call"


def responder(request: RecordedRequest) -> Script | None:
    """The command line server's tool turn; a streamed Responses answer also sends its text as a delta
    (pydantic-ai reads the text of a streamed answer from its deltas only)."""
    script = tool_turn_responder(request)
    if script is None or request.path != "/v1/responses" or not script.events:
        return script
    if any(event.get("type") == "response.output_item.done" for event in script.events if isinstance(event, dict)):
        answered = any(item.get("type") == "function_call_output" for item in request.body.get("input", []))
        if answered:
            message = {**r.message_item("msg_1", ANSWER), "status": "completed"}
            events = r.stream(r.added(0, item=r.message_item("msg_1")), r.text_delta(0, ANSWER),
                              r.item_done(0, item=message), end=r.completed([message]))  # fmt: skip
            return Script(events=events, named=True)
    return script


# --- the application ---------------------------------------------------------------------------------------------


def model(kind: str, server: LocalChatServer) -> Model:
    if kind == "anthropic":
        return AnthropicModel("m", provider=AnthropicProvider(base_url=server.root_url, api_key="x"))
    provider = OpenAIProvider(base_url=server.base_url, api_key="x")
    return (OpenAIChatModel if kind == "chat" else OpenAIResponsesModel)("m", provider=provider)


def agent(kind: str, server: LocalChatServer, ran: list[tuple[str, str | None, dict[str, str]]]) -> Agent[None, str]:
    """An agent with two tools that note what they were run with (name, the framework's id, arguments)."""

    def get_weather(ctx: RunContext[None], city: str) -> str:
        ran.append(("get_weather", ctx.tool_call_id, {"city": city}))
        return "sunny"

    def get_time(ctx: RunContext[None], timezone: str) -> str:
        ran.append(("get_time", ctx.tool_call_id, {"timezone": timezone}))
        return "14:05"

    return Agent(model(kind, server), tools=[get_weather, get_time])


async def arun(app: Agent[None, str], method: str) -> str:
    if method == "run":
        return (await app.run("Weather and time in Paris?")).output
    if method == "run_stream":
        async with app.run_stream("Weather and time in Paris?") as streamed:
            return await streamed.get_output()
    assert method == "run_stream_events"
    output = ""
    async with app.run_stream_events("Weather and time in Paris?") as events:
        async for event in events:
            output = getattr(event, "result", None) and event.result.output or output  # type: ignore[attr-defined]
    return output


def run(app: Agent[None, str], method: str) -> str:
    if method == "run_sync":  # on a loop of ours: pydantic-ai would leave the one it makes open
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            return app.run_sync("Weather and time in Paris?").output
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    return asyncio.run(arun(app, method))


def streamed(method: str) -> bool:
    return method in ("run_stream", "run_stream_events")


# --- the instrumented process and its audit ----------------------------------------------------------------------


class World:
    """The scripted server, the instrumentors exporting to one OTLP JSON file, and the audit of that file."""

    def __init__(self, process: Process, server: LocalChatServer, guard: bool = False) -> None:
        self.process = process
        self.server = server
        self.memory = InMemorySpanExporter()
        process.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        providers = {"tracer_provider": process.provider, "meter_provider": process.meters}
        self.instrumentors = [
            instrument_openai(**providers),
            instrument_anthropic(**providers),
            instrument_pydantic_ai(guard=guard, **providers),
        ]

    def close(self) -> None:
        for instrumentor in self.instrumentors:
            instrumentor.uninstrument()
        self.instrumentors = []

    def spans(self, prefix: str) -> list[ReadableSpan]:
        return [span for span in self.memory.get_finished_spans() if span.name.startswith(prefix)]

    def executions(self) -> list[ReadableSpan]:
        return self.spans(A.SPAN_EXECUTE_TOOL)

    def proposal(self, call_id: str) -> ReadableSpan:
        (span,) = [
            span
            for span in self.spans(A.SPAN_ASSEMBLE_TOOL_CALL)
            if (span.attributes or {}).get(A.GEN_AI_TOOL_CALL_ID) == call_id
        ]
        return span

    def audit(self, *options: str) -> tuple[int, dict[str, Any]]:
        """``etf-otel audit --json`` of the exported file (the process is shut down first: all spans written)."""
        self.close()
        self.process.close()
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["audit", "--json", "--no-progress", *options, str(self.process.path)])
        assert code in (0, 1), err.getvalue()
        return code, json.loads(out.getvalue())


@pytest.fixture
def world(process: Callable[..., Process], server: LocalChatServer) -> Iterator[Callable[..., World]]:
    made: list[World] = []

    def make(guard: bool = False) -> World:
        made.append(World(process(), server, guard))
        return made[-1]

    try:
        yield make
    finally:
        for one in made:
            one.close()


def findings(report: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return sorted(
        (finding["kind"], finding["category"], finding.get("call_id"))
        for trace in report["traces_detail"]
        for finding in trace["findings"]
    )


def divergence(span: ReadableSpan) -> list[object]:
    return [event.attributes.get(A.ETF_DIVERGENCE_KIND) for event in span.events if event.attributes]


def linked(world: World, execution: ReadableSpan) -> list[str]:
    """The call ids of the proposals ``execution`` links to."""
    ids = {span.context.span_id: (span.attributes or {}).get(A.GEN_AI_TOOL_CALL_ID) for span in world.spans("")}
    return [str(ids.get(link.context.span_id)) for link in execution.links]


def tool_results(request_body: dict[str, Any]) -> list[tuple[str, str]]:
    """(call id, content) of each tool result a request sends back, whatever the protocol."""
    out: list[tuple[str, str]] = []
    for item in request_body.get("input") or []:
        if item.get("type") == "function_call_output":
            out.append((item["call_id"], str(item["output"])))
    for message in request_body.get("messages") or []:
        if message.get("role") == "tool":
            out.append((message["tool_call_id"], str(message["content"])))
        if isinstance(message.get("content"), list):
            out += [
                (block["tool_use_id"], json.dumps(block["content"]))
                for block in message["content"]
                if block.get("type") == "tool_result"
            ]
    return out


# --- a clean loop ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_clean_loop_audits_clean_with_both_calls_linked(
    world: Callable[..., World], server: LocalChatServer, kind: str, method: str
) -> None:
    server._responder = responder
    w = world()
    ran: list[tuple[str, str | None, dict[str, str]]] = []
    assert run(agent(kind, server, ran), method) == ANSWER
    assert sorted((name, arguments) for name, _, arguments in ran) == sorted(RAN)  # pydantic-ai runs them in parallel
    executions = sorted(w.executions(), key=lambda span: str(span.attributes[A.GEN_AI_TOOL_CALL_ID]))
    assert [span.attributes[A.GEN_AI_TOOL_CALL_ID] for span in executions] == PROPOSED[kind]
    assert [linked(w, span) for span in executions] == [[call_id] for call_id in PROPOSED[kind]]
    assert all(divergence(span) == [] for span in executions)
    code, report = w.audit()
    assert (code, findings(report)) == (0, [])


def test_the_null_id_continuation_stays_clean(world: Callable[..., World], server: LocalChatServer) -> None:
    """Each call's arguments continue in a fragment with ``id: null`` (the seed's stream): one call each."""
    server.enqueue(
        Script(
            events=c.finished(
                c.chunk(c.fragment(0, "call_1", "get_weather", '{"city":')),
                c.chunk(c.fragment(0, None, arguments='"Paris"}')),
                c.chunk(c.fragment(1, "call_2", "get_time", '{"timezone":')),
                c.chunk(c.fragment(1, None, arguments='"Europe/Paris"}')),
            )
        )
    )
    server._responder = responder  # the answer
    w = world()
    ran: list[tuple[str, str | None, dict[str, str]]] = []
    run(agent("chat", server, ran), "run_stream")
    assert sorted(call_id for _, call_id, _ in ran) == ["call_1", "call_2"]
    assert sorted(linked(w, span) for span in w.executions()) == [["call_1"], ["call_2"]]
    code, report = w.audit()
    assert (code, findings(report)) == (0, [])


# --- the framework's own assembly, judged -------------------------------------------------------------------------

CONFLICTING_ID = c.finished(
    c.chunk(c.fragment(0, "call_1", "get_weather", '{"city":')), c.chunk(c.fragment(0, "call_X9", arguments='"Paris"}'))
)
"""A continuation that changes the id: pydantic-ai runs the call as ``call_X9`` (it keeps the last id)."""
CHAT_REPEATED_NAME = c.finished(
    c.chunk(c.fragment(0, "call_1", "get_weather", '{"city":')),
    c.chunk(c.fragment(0, name="get_weather", arguments='"Paris"}')),
)
REPEATED_NAME = a.stream(
    [a.tool_start(0, "toolu_1", "get_weather"), a.tool_start(0, "toolu_1", "get_weather")],
    a.json_delta(0, '{"city":"Paris"}'),
    a.block_stop(0),
)
"""The block's start sent twice: pydantic-ai dispatches ``get_weatherget_weather`` (no tool has that name)."""
ANTHROPIC_CONFLICT = a.stream(
    [a.tool_start(0, "toolu_1", "get_weather"), a.tool_start(0, "toolu_X9", "get_weather")],
    a.json_delta(0, '{"city":"Paris"}'),
    a.block_stop(0),
)


@pytest.mark.parametrize(
    ("kind", "events", "framework_id", "kinds"),
    [
        ("chat", CONFLICTING_ID, "call_X9", ["id_replaced"]),
        ("chat", CHAT_REPEATED_NAME, "call_1", ["name_concatenated"]),
        ("anthropic", REPEATED_NAME, "toolu_1", ["name_concatenated"]),
        ("anthropic", ANTHROPIC_CONFLICT, "toolu_X9", ["id_replaced", "name_concatenated"]),
    ],
    ids=["chat-conflicting-id", "chat-repeated-name", "anthropic-repeated-name", "anthropic-conflicting-id"],
)
def test_what_the_framework_ran_differs_from_the_proposal_and_the_audit_says_so(
    world: Callable[..., World],
    server: LocalChatServer,
    kind: str,
    events: list[Any],
    framework_id: str,
    kinds: list[str],
) -> None:
    server.enqueue(Script(events=events, named=kind == "anthropic"))
    server._responder = responder
    w = world()
    ran: list[tuple[str, str | None, dict[str, str]]] = []
    assert run(agent(kind, server, ran), "run_stream") == ANSWER
    sent_back = tool_results(server.requests[1].body)
    assert [call_id for call_id, _ in sent_back] == [framework_id]  # what pydantic-ai answered the model with
    (execution,) = w.executions()
    preserved = "call_1" if kind == "chat" else "toolu_1"
    assert execution.attributes[A.GEN_AI_TOOL_CALL_ID] == preserved  # never the framework's
    assert "X9" not in json.dumps(dict(execution.attributes))
    assert linked(w, execution) == [preserved]
    assert sorted(map(str, divergence(execution))) == kinds
    code, report = w.audit()
    assert code == 1
    assert ("divergent_assembly", preserved) in {(category, call_id) for _, category, call_id in findings(report)}


# --- a cut stream and the guard -------------------------------------------------------------------------------------

CUT = {
    "chat": Script(
        events=[
            c.chunk(c.fragment(0, "call_1", "get_weather", '{"city":"Paris"}')),
            c.chunk(c.fragment(1, "call_2", "get_time", '{"timezone":')),
        ]
    ),
    "anthropic": Script(
        events=a.stream(
            a.tool_call(0, "toolu_1", "get_weather", '{"city":"Paris"}'),
            [a.tool_start(1, "toolu_2", "get_time"), a.json_delta(1, '{"timezone":')],
            stop_reason=a.MISSING,
            stop=False,
        ),
        named=True,
    ),
}
"""Two calls, the stream ended in the second's arguments: pydantic-ai runs the first anyway."""


@pytest.mark.parametrize("kind", list(CUT))
def test_a_cut_stream_the_framework_acts_on_is_reported(
    world: Callable[..., World], server: LocalChatServer, kind: str
) -> None:
    server.enqueue(CUT[kind])
    server._responder = responder
    w = world()
    ran: list[tuple[str, str | None, dict[str, str]]] = []
    assert run(agent(kind, server, ran), "run_stream") == ANSWER
    assert [name for name, _, _ in ran] == ["get_weather"]  # pydantic-ai ran the first call of a cut stream
    first, second = PROPOSED[kind]
    executions = {span.attributes[A.GEN_AI_TOOL_CALL_ID]: span for span in w.executions()}
    assert sorted(executions) == [first, second]  # the second was dispatched too: its arguments did not parse
    assert executions[second].attributes[A.ERROR_TYPE] == "ToolRetryError"
    code, report = w.audit()
    assert code == 1
    assert ("executed_rejected", "truncated_stream", first) in findings(report)


@pytest.mark.parametrize(("kind", "cut_after"), [("chat", 2), ("anthropic", 6)])
def test_a_dropped_connection_ends_the_run_as_it_does_without_etf_otel(
    world: Callable[..., World], server: LocalChatServer, kind: str, cut_after: int
) -> None:
    dropped = Script(events=CUT[kind].events, named=CUT[kind].named, cut_after=cut_after)

    def attempt() -> int:
        before = len(server.requests)
        server.enqueue(dropped)
        ran: list[tuple[str, str | None, dict[str, str]]] = []
        with pytest.raises(ModelConnectionError):
            run(agent(kind, server, ran), "run_stream")
        assert ran == []  # pydantic-ai runs nothing of a stream whose connection dropped
        return len(server.requests) - before

    without = attempt()
    w = world()
    assert (attempt(), w.executions()) == (without, [])


@pytest.mark.parametrize("kind", KINDS)
def test_the_guard_lets_a_clean_loop_run(world: Callable[..., World], server: LocalChatServer, kind: str) -> None:
    server._responder = responder
    w = world(guard=True)
    ran: list[tuple[str, str | None, dict[str, str]]] = []
    assert run(agent(kind, server, ran), "run_stream") == ANSWER
    assert sorted((name, arguments) for name, _, arguments in ran) == sorted(RAN)
    assert not any(span.attributes.get(A.ETF_GUARD_REFUSED) for span in w.executions())
    assert (w.audit()[0], len(server.requests)) == (0, 2)


@pytest.mark.parametrize(
    ("kind", "script", "refused", "preserved"),
    [
        ("chat", Script(events=CONFLICTING_ID), ["call_X9"], ["call_1"]),
        ("anthropic", Script(events=ANTHROPIC_CONFLICT, named=True), [], []),  # no tool has the name it ran
        ("chat", CUT["chat"], ["call_1"], ["call_1"]),  # call_2's arguments did not parse: pydantic-ai's error
        ("anthropic", CUT["anthropic"], ["toolu_1"], ["toolu_1"]),
    ],
    ids=["chat-conflicting-id", "anthropic-conflicting-id", "chat-cut", "anthropic-cut"],
)
def test_the_guard_refuses_through_the_frameworks_error_channel_and_the_run_goes_on(
    world: Callable[..., World],
    server: LocalChatServer,
    kind: str,
    script: Script,
    refused: list[str],
    preserved: list[str],
) -> None:
    server.enqueue(script)
    server._responder = responder
    w = world(guard=True)
    ran: list[tuple[str, str | None, dict[str, str]]] = []
    assert run(agent(kind, server, ran), "run_stream") == ANSWER  # the run finished
    assert ran == []  # no tool ran
    sent_back = tool_results(server.requests[1].body)  # what the model got
    assert [call_id for call_id, content in sent_back if REFUSED in content] == refused
    assert len(sent_back) == len(w.executions())  # every call answered with an error
    refused_spans = [span for span in w.executions() if span.attributes.get(A.ETF_GUARD_REFUSED)]
    flagged = [span.attributes[A.GEN_AI_TOOL_CALL_ID] for span in refused_spans]
    assert sorted(map(str, flagged)) == preserved  # the preserved ids, never the framework's
    assert w.audit()[0] == 1


# --- pydantic-ai's own instrumentation co-installed -----------------------------------------------------------------


@pytest.fixture
def instrument_all() -> Iterator[Callable[[World], None]]:
    def install(w: World) -> None:
        Agent.instrument_all(InstrumentationSettings(tracer_provider=w.process.provider))

    try:
        yield install
    finally:
        Agent.instrument_all(False)


@pytest.mark.parametrize(("kind", "method"), [("chat", "run_stream"), ("responses", "run"), ("anthropic", "run_sync")])
def test_with_instrument_all_its_execute_tool_spans_are_enriched_never_doubled(
    world: Callable[..., World],
    server: LocalChatServer,
    instrument_all: Callable[[World], None],
    kind: str,
    method: str,
) -> None:
    server._responder = responder
    w = world()
    instrument_all(w)
    ran: list[tuple[str, str | None, dict[str, str]]] = []
    assert run(agent(kind, server, ran), method) == ANSWER
    executions = sorted(w.executions(), key=lambda span: str(span.attributes[A.GEN_AI_TOOL_CALL_ID]))
    assert len(executions) == 2  # pydantic-ai's, no second one of ours
    assert {span.instrumentation_scope.name for span in executions} == {"pydantic-ai"}  # type: ignore[union-attr]
    assert [linked(w, span) for span in executions] == [[call_id] for call_id in PROPOSED[kind]]
    assert w.spans("chat ") and w.spans("invoke_agent")  # its own spans are all there
    code, report = w.audit()
    assert (code, findings(report), report["unobserved_llm_calls"]) == (0, [], 0)


def test_with_instrument_all_a_divergent_run_is_recorded_on_its_span(
    world: Callable[..., World], server: LocalChatServer, instrument_all: Callable[[World], None]
) -> None:
    server.enqueue(Script(events=CONFLICTING_ID))
    server._responder = responder
    w = world()
    instrument_all(w)
    run(agent("chat", server, []), "run_stream")
    (execution,) = w.executions()
    assert execution.attributes[A.GEN_AI_TOOL_CALL_ID] == "call_1" and linked(w, execution) == ["call_1"]
    assert divergence(execution) == ["id_replaced"]
    code, report = w.audit()
    assert code == 1 and ("recorded_violation", "divergent_assembly", "call_1") in findings(report)


# --- concurrency, and the framework unchanged -----------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "mode"), [("chat", "tasks"), ("anthropic", "tasks"), ("responses", "threads")])
def test_eight_concurrent_identical_runs_stay_clean(
    world: Callable[..., World], server: LocalChatServer, kind: str, mode: str
) -> None:
    server._responder = responder
    w = world()
    ran: list[tuple[str, str | None, dict[str, str]]] = []
    app = agent(kind, server, ran)

    async def main() -> list[str]:  # half streamed, half complete bodies (requested in tasks of their own)
        return await asyncio.gather(*(arun(app, method) for method in ["run", "run_stream"] * 4))

    if mode == "tasks":
        assert asyncio.run(main()) == [ANSWER] * 8
    else:  # threads, half of them in run_sync (complete bodies), half streamed on a loop of their own
        with ThreadPoolExecutor(8) as pool:
            methods = ["run_sync", "run_stream"] * 4
            assert list(pool.map(lambda method: run(app, method), methods)) == [ANSWER] * 8
    assert len(ran) == 16 and len(w.executions()) == 16
    assert all(linked(w, span) == [span.attributes[A.GEN_AI_TOOL_CALL_ID]] for span in w.executions())
    code, report = w.audit()
    assert (code, findings(report)) == (0, [])


def scenario(server: LocalChatServer, kind: str, method: str, first: Script | None) -> tuple[Any, ...]:
    """What the application and the model see of one run: the output, the tools run, the requests sent."""
    before = len(server.requests)
    if first is not None:
        server.enqueue(first)
    ran: list[tuple[str, str | None, dict[str, str]]] = []
    output = run(agent(kind, server, ran), method)
    return output, sorted(map(str, ran)), [request.body for request in server.requests[before:]]


@pytest.mark.parametrize(
    ("kind", "method", "first"),
    [
        ("chat", "run_stream", None),
        ("responses", "run", None),
        ("anthropic", "run_stream_events", None),
        ("chat", "run_stream", Script(events=CONFLICTING_ID)),
        ("anthropic", "run_stream", CUT["anthropic"]),
    ],
    ids=["chat", "responses", "anthropic", "chat-conflicting-id", "anthropic-cut"],
)
def test_the_framework_behaves_the_same_with_and_without_etf_otel(
    world: Callable[..., World], server: LocalChatServer, kind: str, method: str, first: Script | None
) -> None:
    server._responder = responder
    without = scenario(server, kind, method, first)
    w = world()
    assert w.instrumentors and isinstance(w.instrumentors[-1], PydanticAIInstrumentor)
    assert scenario(server, kind, method, first) == without


def test_opentelemetry_instrument_finds_it_by_its_entry_point() -> None:
    pyproject = (Path(__file__).parents[3] / "pyproject.toml").read_text(encoding="utf-8")
    group = pyproject.split("[project.entry-points.opentelemetry_instrumentor]")[1].split("\n[")[0]
    (declared,) = [line for line in group.splitlines() if line.startswith("etf_otel_pydantic_ai = ")]
    module, _, name = declared.split(" = ")[1].strip('"').partition(":")
    assert getattr(importlib.import_module(module), name) is PydanticAIInstrumentor
