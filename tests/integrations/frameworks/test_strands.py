"""Strands Agents, zero code: its ``BedrockModel`` loop recorded, its tool runs linked, guarded, and unchanged.

A real Strands ``Agent`` on a real ``BedrockModel`` (boto3 against the scripted server's Converse
endpoints) runs three tool rounds (two parallel calls in the first two) before its text answer, with
every etf-otel instrumentor installed from its ``opentelemetry_instrumentor`` entry point, as
``opentelemetry-instrument`` does: ``etf_otel_bedrock`` records the model calls, ``etf_otel_strands``
the tool runs. Judged as for the other frameworks (``test_multi_round.World``): no violation live, the
counter at 0, ``etf-otel audit`` of the OTLP JSON export at exit 0, each follow-up settling its round.

With Strands' own tracing on, its ``execute_tool`` span is the execution (enriched, never doubled);
in guard mode a call of a cut stream (Strands runs it: it takes a stream without ``messageStop`` for
a finished turn) is refused through Strands' error result and the agent goes on; and what the agent
sends and answers is the same with and without etf-otel.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from etf_otel import attributes as A
from etf_otel.testing import Script
from etf_otel.testing._rounds import tool_rounds_responder
from etf_otel.testing._scripted import ANSWER
from tests.integrations.frameworks.test_multi_round import (
    ETF_OTEL,
    ROUNDS,
    STATELESS,
    World,
    clock,
    guard,
    only,
    served,
    stack,
    weather,
    world,
)

FIXTURES = (served, stack, guard, world)
"""The loop world of the other frameworks' tests: its fixtures, used here by name."""

strands = pytest.importorskip("strands")
strands_bedrock = pytest.importorskip("strands.models.bedrock")
strands_tracer = pytest.importorskip("strands.telemetry.tracer")
boto3 = pytest.importorskip("boto3")
botocore_config = pytest.importorskip("botocore.config")

MODEL_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


@pytest.fixture(autouse=True)
def aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """No profile, no bearer token (botocore would refuse the plain-HTTP endpoint)."""
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


def agent_of(world: World, streaming: bool = True, ran: list[str] | None = None) -> Any:
    """A Strands agent on ``BedrockModel`` at the scripted server, with the two tools (each notes its run)."""

    @strands.tool(context=True)
    def get_weather(city: str, tool_context: strands.ToolContext) -> str:
        """The weather in a city."""
        world.note(tool_context.tool_use["toolUseId"], "get_weather", city)
        return weather(city)

    @strands.tool(context=True)
    def get_time(tz: str, tool_context: strands.ToolContext) -> str:
        """The time in a time zone."""
        world.note(tool_context.tool_use["toolUseId"], "get_time", tz)
        return clock(tz)

    session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    model = strands_bedrock.BedrockModel(
        model_id=MODEL_ID,
        boto_session=session,
        endpoint_url=world.server.root_url,
        boto_client_config=botocore_config.Config(retries={"total_max_attempts": 1}),
        streaming=streaming,
    )
    return strands.Agent(model=model, tools=[get_weather, get_time], callback_handler=None)


@pytest.fixture
def strands_traced(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Strands' own tracing on the test's provider (what a global SDK provider or ``StrandsTelemetry`` gives)."""
    monkeypatch.setattr(strands_tracer.get_tracer(), "tracer", world.capture.tracer_provider.get_tracer("strands"))
    yield


def executions(world: World) -> list[Any]:
    return [s for s in world.capture.spans() if (s.attributes or {}).get(A.GEN_AI_OPERATION_NAME) == "execute_tool"]


def assert_linked(world: World) -> None:
    """Every execution carries a preserved id and links to that call's ``assemble_tool_call`` span."""
    calls = {
        (span.attributes or {}).get(A.GEN_AI_TOOL_CALL_ID): span.context.span_id
        for span in world.capture.spans()
        if span.name.startswith("assemble_tool_call ")
    }
    runs = executions(world)
    assert len(runs) == sum(map(len, ROUNDS))
    for run in runs:
        call_id = (run.attributes or {}).get(A.GEN_AI_TOOL_CALL_ID)
        assert [link.context.span_id for link in run.links] == [calls[call_id]], run.name


@only(ETF_OTEL)
@pytest.mark.parametrize("streaming", [True, False], ids=["converse_stream", "converse"])
def test_strands_three_rounds_judge_nothing_wrong(world: World, streaming: bool) -> None:
    world.model()
    assert str(agent_of(world, streaming)("Weather and time, three places?")).strip() == ANSWER
    assert world.sent() == STATELESS
    world.assert_clean()
    assert_linked(world)
    assert {span.name for span in executions(world)} == {"execute_tool get_weather", "execute_tool get_time"}


@only(ETF_OTEL)
@pytest.mark.usefixtures("strands_traced")
def test_strands_own_execute_tool_spans_are_enriched_not_doubled(world: World) -> None:
    world.model()
    assert str(agent_of(world)("Weather and time, three places?")).strip() == ANSWER
    world.assert_clean()
    assert_linked(world)  # one execution per run: Strands' span, carrying the link
    scopes = {span.instrumentation_scope.name for span in executions(world) if span.instrumentation_scope}
    assert scopes == {"strands"}
    chats = [s for s in world.capture.spans() if (s.attributes or {}).get(A.GEN_AI_OPERATION_NAME) == "chat"]
    assert len(chats) == len(ROUNDS) + 1  # Strands' model spans, each holding our assemble_response


def first_round(world: World, kind: str) -> None:
    """The model: ``clean`` (the three rounds), ``cut`` (round one's stream ends without ``messageStop``:
    Strands takes it for a finished turn and runs nothing) or ``duplicate`` (round one's two calls share one
    id: Strands runs both); the answer follows once results come back."""
    if kind == "clean":
        world.model()
        return
    rounds = tool_rounds_responder(ROUNDS[:1])

    def respond(request: Any) -> Script | None:
        script = rounds(request)
        if script is None or not script.events or "toolUse" not in str(script.events):
            return script
        if kind == "cut":
            return Script(events=[e for e in script.events if "messageStop" not in e and "metadata" not in e])
        return Script(events=_same_id(script.events))

    world.switch.current = respond


def _same_id(events: list[Any]) -> list[Any]:
    """``events`` with every call's ``toolUseId`` the first call's."""
    starts = [e["contentBlockStart"]["start"]["toolUse"] for e in events if "contentBlockStart" in e]
    for start in starts:
        start["toolUseId"] = starts[0]["toolUseId"]
    return events


@only(ETF_OTEL)
@pytest.mark.parametrize("guard", [True], indirect=True)
def test_a_guarded_refusal_is_an_error_result_the_agent_survives(world: World) -> None:
    """Two calls with one id (``duplicate_call_id``): Strands would run both; the guard refuses both through
    Strands' error result, Converse gets an answer for each, and the agent goes on to its answer."""
    first_round(world, "duplicate")
    agent = agent_of(world)
    assert str(agent("Weather and time?")).strip() == ANSWER
    assert world.ran == []  # neither tool ran
    refused = executions(world)
    assert len(refused) == 2 and all((s.attributes or {}).get(A.ETF_GUARD_REFUSED) is True for s in refused)
    results = [block["toolResult"] for block in world.requests()[1].body["messages"][-1]["content"]]
    assert [result["status"] for result in results] == ["error", "error"]
    assert all("duplicate_call_id" in result["content"][0]["text"] for result in results)


@only(ETF_OTEL)
def test_running_both_calls_of_one_id_is_found_live_and_by_the_audit(world: World) -> None:
    """Unguarded, Strands runs both calls that share one id: the response was rejected (``duplicate_call_id``)
    and the audit says its calls were executed (exit 1)."""
    first_round(world, "duplicate")
    assert str(agent_of(world)("Weather and time?")).strip() == ANSWER
    assert len(world.ran) == 2
    code, findings = world.audit()
    assert code == 1
    assert {(kind, category) for kind, category, _ in findings} >= {("executed_rejected", "duplicate_call_id")}


@only(ETF_OTEL)
@pytest.mark.parametrize("guard", [True], indirect=True)
def test_a_direct_tool_call_is_the_applications_and_never_refused(world: World) -> None:
    world.model()
    agent = agent_of(world)
    result = agent.tool.get_weather(city="Oslo", record_direct_tool_call=False)
    assert result["status"] == "success" and executions(world) == []


def transcript(world: World, kind: str) -> Any:
    """What one agent run answered, what it kept in its messages, and every request the server got; the
    parts that differ from run to run anyway (the responder's response numbers in the ids, Strands'
    ``tracking_id`` and latency metrics) left out."""
    first_round(world, kind)
    first = len(world.server.requests)
    agent = agent_of(world)
    answer = str(agent("Weather and time, three places?"))
    ran = json.dumps([answer, agent.messages, [request.body for request in world.server.requests[first:]]])
    return json.loads(re.sub(r"tooluse_\d+", "tooluse_N", ran), object_hook=_stable)


def _stable(value: dict[str, Any]) -> dict[str, Any]:
    return {key: item for key, item in value.items() if key not in ("tracking_id", "metrics")}


@only(ETF_OTEL)
@pytest.mark.parametrize(("kind", "runs"), [("clean", 10), ("cut", 0), ("duplicate", 4)])
def test_the_agent_does_and_sends_the_same_with_and_without_etf(world: World, kind: str, runs: int) -> None:
    with_etf = transcript(world, kind)
    world.close()  # every instrumentor off
    without = transcript(world, kind)
    assert with_etf == without
    assert len(world.ran) == runs  # the tools ran as often with etf-otel as without (5 or 2 or 0 calls, twice)


def test_the_entry_point_imports_no_strands_and_uninstrument_restores_it() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    script = (
        "import sys, wrapt\n"
        "from importlib.metadata import entry_points\n"
        "(point,) = [p for p in entry_points(group='opentelemetry_instrumentor') if p.name == 'etf_otel_strands']\n"
        "instrumentor = point.load()()\n"
        "instrumentor.instrument()\n"
        "print('strands' in sys.modules)\n"
        "import strands.tools.executors._executor as executor\n"
        "wrapped = [isinstance(vars(executor)[n], wrapt.FunctionWrapper) for n in ('_run_tool', "
        "'_make_execute_tool_terminal')]\n"
        "instrumentor.uninstrument()\n"
        "print(wrapped, [isinstance(vars(executor)[n], wrapt.FunctionWrapper) for n in ('_run_tool', "
        "'_make_execute_tool_terminal')])\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = root
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["False", "[True, True] [False, False]"]
