"""Google ADK: its agents' tool runs as executions of the preserved calls (issue 39, AGENT-STACKS 11.4).

The real ``google-adk`` (``LlmAgent``, ``Runner`` / ``InMemoryRunner``, ``FunctionTool`` sync and async,
``StreamingMode.NONE`` and ``SSE``) drives the real ``google-genai`` client against the scripted Gemini
server on 127.0.0.1, for two rounds of calls then a text answer; the calls carry ids on the wire (as
Gemini 3 sends them) or none (Gemini 2.x and Vertex AI), when ADK makes up ``adk-<uuid>`` ids of its own.
Each run is exported to an OTLP JSON file that ``etf-otel audit`` reads.

google-adk pins google-genai below 3, so these tests run in the agents leg (``.venv-agents``, built from
constraints-agents.txt by scripts/test, which sets ``ETF_REQUIRE_AGENTS_LEG=1``); in the main venv they
are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("ETF_REQUIRE_AGENTS_LEG"):
    pytest.importorskip("google.adk", reason="google-adk runs in the agents leg (scripts/test, .venv-agents)")

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.models import Gemini
from google.adk.runners import InMemoryRunner, Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from etf_otel import attributes as A
from etf_otel.cli import main
from etf_otel.integrations.adk import instrument_adk
from etf_otel.integrations.google_genai import instrument_google_genai
from etf_otel.testing import LocalChatServer
from etf_otel.testing._rounds import tool_rounds_responder
from etf_otel.testing._scripted import ANSWER
from tests.conftest import Process

ROUNDS = [[("weather", {"city": "Paris"}), ("clock", {"tz": "CET"})], [("weather", {"city": "Rome"})]]
"""Round one: two calls ADK runs in parallel (one sync, one async function); round two: one call."""


def weather(city: str) -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "sky": "sunny"}


async def clock(tz: str) -> dict[str, Any]:
    """The time in a time zone."""
    return {"tz": tz, "time": "14:05"}


async def run_agent(base_url: str, streamed: bool, runner_class: str = "InMemoryRunner") -> list[Any]:
    """One agent run to its answer: what it saw (calls, responses and text of its final events)."""
    agent = LlmAgent(name="a", model=Gemini(model="gemini-test", base_url=base_url), tools=[weather, clock])
    runner: Runner
    if runner_class == "InMemoryRunner":
        runner = InMemoryRunner(agent=agent, app_name="app")
    else:
        runner = Runner(agent=agent, app_name="app", session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    config = RunConfig(streaming_mode=StreamingMode.SSE if streamed else StreamingMode.NONE)
    message = types.Content(role="user", parts=[types.Part(text="Weather and time?")])
    seen: list[Any] = []
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message, run_config=config):
        if event.partial:
            continue
        seen += [("call", call.name, call.args) for call in event.get_function_calls()]
        seen += [("response", response.name, response.response) for response in event.get_function_responses()]
        seen += [("text", part.text) for part in (event.content.parts if event.content else None) or () if part.text]
    await runner.close()
    return seen


class World:
    """The scripted server, both instrumentors exporting to one OTLP JSON file (and memory), the audit."""

    def __init__(self, process: Process, ids: bool, guard: bool = False, responder: Any = None) -> None:
        self.process = process
        self.server = LocalChatServer(responder=responder or tool_rounds_responder(ROUNDS, gemini_ids=ids))
        self.memory = InMemorySpanExporter()
        process.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        providers = {"tracer_provider": process.provider, "meter_provider": process.meters}
        self.instrumentors = [instrument_google_genai(**providers), instrument_adk(guard=guard, **providers)]

    def run(self, streamed: bool, runner_class: str = "InMemoryRunner") -> list[Any]:
        return asyncio.run(run_agent(self.server.root_url, streamed, runner_class))

    def close(self) -> None:
        for instrumentor in self.instrumentors:
            instrumentor.uninstrument()
        self.instrumentors = []
        self.server.close()

    def spans(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.memory.get_finished_spans() if span.name.startswith(name)]

    def audit(self) -> tuple[int, int, dict[str, Any]]:
        """``etf-otel audit --json`` of the exported file: its exit code, its findings, what it counted by kind
        (the divergence kinds of ``history_drift``, informational)."""
        self.close()
        self.process.close()
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["audit", "--json", "--no-progress", str(self.process.path)])
        assert code in (0, 1), err.getvalue()
        report = json.loads(out.getvalue())
        kinds = {entry["kind"]: entry.get("divergence_kinds") or entry["count"] for entry in report["by_kind"]}
        return code, report["findings"], kinds


@pytest.fixture
def world(process: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key")  # the Developer API client wants one; nothing checks it
    made: list[World] = []

    def make(ids: bool, guard: bool = False, responder: Any = None) -> World:
        made.append(World(process(), ids, guard, responder))
        return made[-1]

    try:
        yield make
    finally:
        for one in made:
            one.close()


def linked_names(world: World, execution: ReadableSpan) -> list[str]:
    """The names of the proposals ``execution`` links to."""
    calls = {span.context.span_id: span for span in world.spans(A.SPAN_ASSEMBLE_TOOL_CALL)}
    return [str((calls[link.context.span_id].attributes or {}).get(A.GEN_AI_TOOL_NAME)) for link in execution.links]


def drift(span: ReadableSpan) -> list[object]:
    return [event.attributes.get(A.ETF_DIVERGENCE_KIND) for event in span.events if event.name == A.EVENT_LINKAGE_DRIFT]


def no_adk_ids(spans: list[ReadableSpan]) -> bool:
    """No span or event carries an id ADK made up."""
    values = [v for s in spans for a in (s.attributes, *(e.attributes for e in s.events)) for v in (a or {}).values()]
    return not any(isinstance(value, str) and value.startswith("adk-") for value in values)


WIRE = pytest.mark.parametrize("ids", [False, True], ids=["no-ids", "ids"])
MODES = pytest.mark.parametrize("streamed", [False, True], ids=["whole", "sse"])


@WIRE
@MODES
@pytest.mark.parametrize("runner_class", ["InMemoryRunner", "Runner"])
def test_a_clean_two_round_loop_is_linked_and_audits_clean(world: Any, ids: bool, streamed: bool, runner_class: str):
    w = world(ids)
    seen = w.run(streamed, runner_class)
    assert seen[-1] == ("text", ANSWER)
    assert [entry[1] for entry in seen if entry[0] == "response"] == ["weather", "clock", "weather"]
    executions = w.spans(A.SPAN_EXECUTE_TOOL)
    assert [linked_names(w, span) for span in executions] == [["weather"], ["clock"], ["weather"]]
    calls = {span.context.span_id: span.attributes or {} for span in w.spans(A.SPAN_ASSEMBLE_TOOL_CALL)}
    proposed = [calls[span.links[0].context.span_id].get(A.GEN_AI_TOOL_CALL_ID) for span in executions]
    if ids:  # the wire's ids, found by id
        assert [(s.attributes or {}).get(A.GEN_AI_TOOL_CALL_ID) for s in executions] == proposed
        assert all(str(call_id).startswith("call_") for call_id in proposed)
        assert [drift(span) for span in executions] == [[], [], []]
    else:  # by name and order: the slot, no id, ADK's id as drift
        assert [(s.attributes or {}).get(A.GEN_AI_TOOL_CALL_ID) for s in executions] == [None, None, None]
        assert [(s.attributes or {}).get(A.ETF_TOOL_CALL_INDEX) for s in executions] == [0, 1, 0]
        assert [drift(span) for span in executions] == [["id_invented"]] * 3
    assert no_adk_ids(w.memory.get_finished_spans())
    audited = w.audit()  # each made-up id: informational drift, never a violation
    assert audited == (0, 0, {} if ids else {"history_drift": {"id_invented": 3}})


def test_the_follow_ups_settle_in_sse_mode_as_in_whole_mode(world: Any):
    """Issue 39: with ids on the wire, ADK's SSE follow-ups answered 0 of 2 calls where whole mode had 2 of 2
    (its streamed model turn is a ``ModelContent``, whose role the SDK sends but the object was not given)."""
    settled = []
    for streamed in (False, True):
        w = world(True)
        w.run(streamed)
        spans = sorted(w.spans(A.SPAN_ASSEMBLE_RESPONSE), key=lambda s: s.start_time or 0)
        settled.append([len((s.attributes or {}).get(A.ETF_LINKAGE_ANSWERED_IDS, ())) for s in spans])
        w.close()
    assert settled == [[0, 2, 1], [0, 2, 1]]


_TRACED_RUN = """
import asyncio, sys
from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from etf_otel.integrations.adk import instrument_adk
from etf_otel.integrations.google_genai import instrument_google_genai
from etf_otel.testing import LocalChatServer
from etf_otel.testing._rounds import tool_rounds_responder
from tests.integrations.frameworks.test_adk import ROUNDS, run_agent

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(sys.argv[1])))
trace.set_tracer_provider(provider)  # ADK's own tracing: its spans are recorded
instrument_google_genai()
instrument_adk()
with LocalChatServer(responder=tool_rounds_responder(ROUNDS, gemini_ids=sys.argv[3] == "ids")) as server:
    print(asyncio.run(run_agent(server.root_url, sys.argv[2] == "sse"))[-1][0])
provider.shutdown()
"""


@WIRE
@MODES
def test_with_adks_own_tracing_its_spans_are_enriched_and_its_merged_span_is_no_orphan(
    tmp_path: Path, ids: bool, streamed: bool
):
    """ADK's ``execute_tool`` spans carry the link (never a second execution span, never ADK's made-up id), and
    its ``execute_tool (merged)`` span of the parallel round, under an id no model sent, is no finding."""
    path = tmp_path / "traces.jsonl"
    args = [str(path), "sse" if streamed else "whole", "ids" if ids else "no-ids"]
    env = {**os.environ, "GOOGLE_API_KEY": "test-key", "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", _TRACED_RUN, *args], capture_output=True, text=True, env=env)
    assert (done.returncode, done.stdout.strip()) == (0, "text"), done.stderr[-3000:]
    spans = [span for line in path.read_text().splitlines() for span in _spans(json.loads(line))]
    executions = [span for span in spans if span["name"].startswith(A.SPAN_EXECUTE_TOOL)]
    assert sorted(span["name"] for span in executions) == [
        "execute_tool (merged)",
        "execute_tool clock",
        "execute_tool weather",
        "execute_tool weather",
    ]
    assert [len(span.get("links", [])) for span in executions if "merged" not in span["name"]] == [1, 1, 1]
    call_ids = [_attribute(span, A.GEN_AI_TOOL_CALL_ID) for span in executions if "merged" not in span["name"]]
    assert all(str(call_id).startswith("call_") for call_id in call_ids) if ids else call_ids == [None] * 3
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["audit", "--json", "--no-progress", str(path)])
    report = json.loads(out.getvalue())
    assert (code, report["findings"]) == (0, 0), report


def _spans(record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for resource in record.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            yield from scope.get("spans", [])


def _attribute(span: dict[str, Any], key: str) -> object:
    for attribute in span.get("attributes", []):
        if attribute["key"] == key:
            return next(iter(attribute["value"].values()))
    return None


RAN: list[str] = []


def cut(rounds: Any) -> Any:
    """The model, with every streamed turn of calls ending without its ``finishReason`` chunk (a cut stream)."""

    def respond(request: Any) -> Any:
        script = rounds(request)
        if script is not None and script.events and "functionCall" in json.dumps(script.events):
            return type(script)(events=script.events[:-1])
        return script

    return respond


@pytest.mark.parametrize("guard", [False, True], ids=["unguarded", "guarded"])
def test_the_guard_refuses_a_cut_streams_calls_through_adks_tool_error_channel(world: Any, guard: bool):
    """A cut stream's calls are not dispatchable: ADK runs them anyway; the guard refuses each run with ADK's own
    error result (the model gets it as the tool's answer) and the agent goes on to its answer."""
    w = world(False, guard, cut(tool_rounds_responder(ROUNDS)))
    seen = w.run(True)
    assert seen[-1] == ("text", ANSWER)
    responses = [entry[2] for entry in seen if entry[0] == "response"]
    refused = [sorted(response) == ["error"] and "truncated_stream" in response["error"] for response in responses]
    assert refused == [guard] * 3
    code, findings, _ = w.audit()
    assert code == 1 and findings > 0  # the cut stream is a real finding, refused or not


def _ran(server: LocalChatServer, seen: list[Any]) -> str:
    """What a run did and sent, without what differs from run to run anyway (the responder's response numbers
    in its ids and response ids)."""
    return re.sub(r"(call_|resp-gemini-)\d+", r"\1N", json.dumps([seen, [r.body for r in server.requests]]))


@WIRE
@MODES
def test_the_agent_behaves_the_same_with_and_without_etf_otel(world: Any, ids: bool, streamed: bool):
    w = world(ids)
    with_etf = _ran(w.server, w.run(streamed))
    w.close()
    with LocalChatServer(responder=tool_rounds_responder(ROUNDS, gemini_ids=ids)) as server:
        without = _ran(server, asyncio.run(run_agent(server.root_url, streamed)))
    assert with_etf == without


def test_opentelemetry_instrument_finds_it_by_its_entry_point() -> None:
    (found,) = [point for point in entry_points(group="opentelemetry_instrumentor") if point.name == "etf_otel_adk"]
    assert found.load().__name__ == "ADKInstrumentor"


@WIRE
def test_eight_concurrent_identical_runs_stay_clean(world: Any, ids: bool):
    """Each run's tool tasks see the responses of their own run only: with id-less calls, matched by name and
    order, eight identical runs at once would otherwise take each other's calls."""
    w = world(ids)

    async def together() -> list[list[Any]]:
        return await asyncio.gather(*(run_agent(w.server.root_url, streamed=i % 2 == 1) for i in range(8)))

    assert all(seen[-1] == ("text", ANSWER) for seen in asyncio.run(together()))
    executions = w.spans(A.SPAN_EXECUTE_TOOL)
    assert len(executions) == 24 and all(len(span.links) == 1 for span in executions)
    names = {span.context.span_id: (span.attributes or {}).get(A.GEN_AI_TOOL_NAME) for span in w.spans("assemble")}
    linked = [span.links[0].context.span_id for span in executions]
    assert [names[call] for call in linked] == [(span.attributes or {}).get(A.GEN_AI_TOOL_NAME) for span in executions]
    assert len(set(linked)) == 24  # every proposal ran once, none twice
    assert w.audit() == (0, 0, {} if ids else {"history_drift": {"id_invented": 24}})


_APP = """
import asyncio, os, sys
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.models import Gemini
from google.adk.runners import InMemoryRunner
from google.genai import types

def weather(city: str) -> dict:
    '''The weather in a city.'''
    return {"city": city, "sky": "sunny"}

async def clock(tz: str) -> dict:
    '''The time in a time zone.'''
    return {"tz": tz, "time": "14:05"}

async def main() -> None:
    agent = LlmAgent(name="a", model=Gemini(model="gemini-test", base_url=os.environ["GEMINI_URL"]),
                     tools=[weather, clock])
    runner = InMemoryRunner(agent=agent, app_name="app")
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    mode = StreamingMode.SSE if sys.argv[1] == "sse" else StreamingMode.NONE
    message = types.Content(role="user", parts=[types.Part(text="Weather and time?")])
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message,
                                        run_config=RunConfig(streaming_mode=mode)):
        if event.is_final_response():
            print("answered", file=sys.stderr)
    await runner.close()

asyncio.run(main())
"""


@WIRE
@MODES
def test_zero_code_opentelemetry_instrument_records_a_clean_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ids: bool, streamed: bool
):
    """``opentelemetry-instrument python app.py``, an app with no etf-otel import: the entry points record
    the model calls and ADK's tool runs on ADK's own spans (the distro sets a global provider), audited clean."""
    app = tmp_path / "app.py"
    app.write_text(_APP)
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update(GOOGLE_API_KEY="test-key", OTEL_TRACES_EXPORTER="otlp_json_file", OTEL_METRICS_EXPORTER="none")
    env.update(OTEL_LOGS_EXPORTER="none")
    launcher = Path(sys.executable).parent / "opentelemetry-instrument"
    with LocalChatServer(responder=tool_rounds_responder(ROUNDS, gemini_ids=ids)) as server:
        env["GEMINI_URL"] = server.root_url
        argv = [str(launcher), sys.executable, str(app), "sse" if streamed else "whole"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, "answered" in done.stderr) == (0, True), done.stderr[-3000:]
    spans = tmp_path / "spans.jsonl"
    spans.write_text(done.stdout)
    exported = [span for line in done.stdout.splitlines() for span in _spans(json.loads(line))]
    linked = sorted(span["name"] for span in exported if span["name"].startswith("execute_tool ") and span.get("links"))
    assert linked == ["execute_tool clock", "execute_tool weather", "execute_tool weather"]  # ADK's own, enriched
    assert main(["audit", "--json", "--no-progress", str(spans)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["findings"] == 0
