"""The audit of Gemini calls without ids, as etf-otel exports them: positional identity is no malformed span.

A Gemini 2.x or Vertex AI response carries no call ids; the adapter identifies each call by its position
(``etf.id.positional`` on the ``assemble_tool_call`` span, no ``gen_ai.tool.call.id``: docs/protocols.md).
Both engines read such a proposal as the instrumentation recorded it: judged by its span (an execution links
to it), never ``malformed_span``. A proposal without id whose protocol identifies calls by id (Chat,
Responses, Anthropic: no ``etf.id.positional``) is still malformed.

The exports come from the real ``google-genai`` client against the scripted server and from
``etf-otel replay --export``; each is audited by the Python engine and by the SQL in embedded chDB.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google import genai
from google.genai import types

from etf_otel import attributes as A
from etf_otel.audit._sources.otlp_json import iter_spans
from etf_otel.cli import main
from etf_otel.cli._audit import run_audit
from etf_otel.integrations.google_genai import instrument_google_genai
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing import gemini as g

from ..conftest import Process
from .test_audit_sql import _attrs, _span

pytest.importorskip("chdb")

pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

MODEL = "gemini-test"
NO_AFC = types.GenerateContentConfig(automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
WEATHER = g.call("get_weather", {"city": "Paris"})
TIME = g.call("get_time", {"tz": "CET"})
ENGINES = ("python", "chdb")


def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


def get_time(tz: str) -> str:
    """The time in a time zone."""
    return "14:05"


AFC = types.GenerateContentConfig(tools=[get_weather, get_time])


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as srv:
        yield srv


@pytest.fixture
def gemini_process(process: Callable[..., Process]) -> Iterator[Process]:
    """A process exporting OTLP JSON lines, its google-genai client instrumented zero code."""
    proc = process("gemini.jsonl")
    instrumentor = instrument_google_genai(tracer_provider=proc.provider, meter_provider=proc.meters)
    try:
        yield proc
    finally:
        instrumentor.uninstrument()


def developer(server: LocalChatServer) -> genai.Client:
    options = types.HttpOptions(base_url=server.root_url, api_version="v1beta")
    return genai.Client(api_key="test", http_options=options)


def audit(paths: list[Path], engine: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, int]]:
    """The exit code and the findings by kind (informational kinds included) of one engine."""
    code = run_audit([str(path) for path in paths], json_output=True, progress=False, engine=engine)
    report = json.loads(capsys.readouterr().out)
    return code, {entry["kind"]: entry["count"] for entry in report["by_kind"]}


def both(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, int]]:
    """What both engines found (they must agree)."""
    python, sql = (audit(paths, engine, capsys) for engine in ENGINES)
    assert python == sql
    return python


def call_spans(path: Path) -> list[dict[str, object]]:
    return [span.attributes for span in iter_spans([str(path)]) if span.name.startswith(A.SPAN_ASSEMBLE_TOOL_CALL)]


# --- the real client ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["stream", "body"])
def test_automatic_function_calling_without_ids_audits_clean_in_both_engines(
    gemini_process: Process, server: LocalChatServer, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    """The SDK runs two id-less parallel calls (executions linked to their call spans) and answers them:
    no malformed span, no orphaned execution, nothing unjudged."""
    if mode == "body":
        server.enqueue(Script(body=g.chunk(WEATHER, TIME, finish_reason="STOP")))
        server.enqueue(Script(body=g.chunk(g.text("sunny, 14:05"), finish_reason="STOP")))
    else:
        server.enqueue(Script(events=g.stream(g.chunk(WEATHER), g.chunk(TIME))))
        server.enqueue(Script(events=g.stream(g.chunk(g.text("sunny, 14:05")))))
    client = developer(server)
    if mode == "body":
        client.models.generate_content(model=MODEL, contents="weather and time?", config=AFC)
    else:
        list(client.models.generate_content_stream(model=MODEL, contents="weather and time?", config=AFC))
    gemini_process.close()
    calls = call_spans(gemini_process.path)
    assert [(c[A.GEN_AI_TOOL_NAME], A.GEN_AI_TOOL_CALL_ID in c, c[A.ETF_ID_POSITIONAL]) for c in calls] == [
        ("get_weather", False, 1),
        ("get_time", False, 1),
    ]
    assert both([gemini_process.path], capsys) == (0, {})


def test_chat_turns_without_ids_audit_clean_in_both_engines(
    gemini_process: Process, server: LocalChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two ``chats`` turns, each an id-less call the SDK runs: each execution judged against its own call."""
    client = developer(server)
    chat = client.chats.create(model=MODEL, config=AFC)
    for city in ("Paris", "Rome"):
        server.enqueue(Script(events=g.stream(g.chunk(g.call("get_weather", {"city": city})))))
        server.enqueue(Script(events=g.stream(g.chunk(g.text("sunny")))))
        list(chat.send_message_stream(f"weather in {city}?"))
    gemini_process.close()
    assert both([gemini_process.path], capsys) == (0, {})


def test_id_less_calls_the_application_answers_itself_are_unjudged_not_malformed(
    gemini_process: Process, server: LocalChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """No execution span (the application runs the tools itself) and a next request answering by name: the
    settlement names ids only, so the calls are ``unjudged`` (informational), and the audit exits 0."""
    client = developer(server)
    server.enqueue(Script(events=g.stream(g.chunk(WEATHER, TIME))))
    list(client.models.generate_content_stream(model=MODEL, contents="hi", config=NO_AFC))
    model_turn = server.requests[0].body["contents"] + [
        {"role": "model", "parts": [{"functionCall": WEATHER["functionCall"]}, {"functionCall": TIME["functionCall"]}]}
    ]
    answers = {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"result": "sunny"}}},
            {"functionResponse": {"name": "get_time", "response": {"result": "14:05"}}},
        ],
    }
    server.enqueue(Script(events=g.stream(g.chunk(g.text("done")))))
    list(client.models.generate_content_stream(model=MODEL, contents=[*model_turn, answers], config=NO_AFC))
    gemini_process.close()
    assert both([gemini_process.path], capsys) == (0, {"unjudged": 2})


def test_an_id_less_call_left_unanswered_is_still_reported(
    gemini_process: Process, server: LocalChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Positional identity is no pass: the next request answers one of two id-less calls, the instrumentation
    records ``unanswered_call`` by name, and the audit reports it."""
    client = developer(server)
    server.enqueue(Script(events=g.stream(g.chunk(WEATHER, TIME))))
    list(client.models.generate_content_stream(model=MODEL, contents="hi", config=NO_AFC))
    history = server.requests[0].body["contents"] + [
        {"role": "model", "parts": [{"functionCall": WEATHER["functionCall"]}, {"functionCall": TIME["functionCall"]}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"result": "sunny"}}}]},
    ]
    server.enqueue(Script(events=g.stream(g.chunk(g.text("done")))))
    list(client.models.generate_content_stream(model=MODEL, contents=history, config=NO_AFC))
    gemini_process.close()
    # The event names the call by name only (no id): a recorded_violation. The settlement evidence the audit
    # matches (etf.linkage.answered_ids) holds ids only, so both calls stay unjudged besides. The request,
    # whose call lacks its functionResponse, is one the provider refuses: request_pairing.
    expected = {"recorded_violation": 1, "request_pairing": 1, "unjudged": 2}
    assert both([gemini_process.path], capsys) == (1, expected)


# --- replay --export -----------------------------------------------------------------------------------------


def test_replay_export_of_an_id_less_stream_audits_clean_in_both_engines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = tmp_path / "gemini.jsonl"
    recording.write_text("".join(json.dumps(chunk) + "\n" for chunk in g.stream(g.chunk(WEATHER), g.chunk(TIME))))
    export = tmp_path / "export.jsonl"
    assert main(["replay", str(recording), "--export", str(export)]) == 0
    capsys.readouterr()
    assert [A.GEN_AI_TOOL_CALL_ID in c for c in call_spans(export)] == [False, False]
    assert both([export], capsys) == (0, {"unjudged": 2})


def test_replay_export_under_require_call_id_is_a_rejection_not_a_malformed_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The strict option makes the same calls ``missing_id``: rejected spans, judged as such."""
    recording = tmp_path / "gemini.jsonl"
    recording.write_text("".join(json.dumps(chunk) + "\n" for chunk in g.stream(g.chunk(WEATHER))))
    export = tmp_path / "export.jsonl"
    assert main(["replay", str(recording), "--require-call-id", "--export", str(export)]) == 1
    capsys.readouterr()
    assert both([export], capsys) == (1, {"recorded_rejection": 1})


# --- the rule: only positional identity excuses a missing id -----------------------------------------------


def _call_without_id(trace_id: str, protocol: str, **extra: Any) -> list[dict[str, Any]]:
    """A dispatchable response of ``protocol`` with one proposal that has no ``gen_ai.tool.call.id``."""
    response = _span(
        trace_id,
        "1" * 16,
        "assemble_response",
        attributes=_attrs(etf__stream__state="completed", etf__stream__dispatchable=True, etf__protocol=protocol),
    )
    call = _span(
        trace_id,
        "2" * 16,
        "assemble_tool_call get_weather",
        "1" * 16,
        start=1_001,
        attributes=_attrs(etf__tool_call__verdict="proposed", gen_ai__tool__name="get_weather"),
    )
    call["attributes"] += [{"key": key, "value": value} for key, value in extra.items()]
    return [response, call]


@pytest.mark.parametrize(
    ("protocol", "positional", "malformed"),
    [
        ("chat_completions", None, True),
        ("responses", None, True),
        ("anthropic_messages", None, True),
        ("gemini", {"intValue": "1"}, False),
        ("gemini", {"stringValue": "1"}, False),  # as a source that keeps only strings has it
        ("gemini", {"doubleValue": 1.0}, False),
        ("gemini", {"intValue": "0"}, True),
        ("gemini", {"boolValue": True}, True),
        ("gemini", {"stringValue": "one"}, True),
        ("gemini", {"doubleValue": 1.5}, True),
    ],
)
def test_a_proposal_without_id_is_malformed_unless_its_identity_is_positional(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], protocol: str, positional: Any, malformed: bool
) -> None:
    extra = {} if positional is None else {"etf.id.positional": positional}
    spans = _call_without_id("ab" * 16, protocol, **extra)
    path = tmp_path / "hand.jsonl"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n")
    expected = (1, {"malformed_span": 1, "unjudged": 1}) if malformed else (0, {"unjudged": 1})
    assert both([path], capsys) == expected
