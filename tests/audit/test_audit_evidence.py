"""The audit judges only on evidence: settlements recorded by the next request, across traces.

A zero-code app (the ``openai`` instrumentor alone, no host wrapper) has no ``execute_tool`` span;
what it has is the next request of each conversation, which settles the previous response: the
proposals it answered go to ``etf.linkage.answered_ids`` on the new ``assemble_response`` span, the
others to ``unanswered_call`` events there. Without an application span around the turns every
request is a trace of its own, so the audit matches that evidence by call id across traces. These
runs use the real ``openai`` client against the local SSE server, in process, exported with the
official OTLP JSON file exporter, and audit the file with the Python engine and with chDB.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from etf_otel.audit import FindingKind, SpanData, check_trace
from etf_otel.audit._checks import Evidence
from etf_otel.audit._model import Role, SpanRecord, to_record
from etf_otel.audit._sources.otlp_json import iter_spans
from etf_otel.cli._audit import run_audit
from etf_otel.core._linkage import Conversation
from etf_otel.integrations.openai._instrumentor import OpenAIInstrumentor, instrument_openai
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing.chat import chunk, finished, fragment
from tests.integrations.test_openai_integration import (
    TEXT_ONLY,
    USER,
    assistant_turn,
    consume,
    proposing,
    tool_message,
)

from ..conftest import Process

ANSWERED_IDS = "etf.linkage.answered_ids"
ANSWERED_DROPPED = "etf.linkage.answered_ids_dropped"
ENGINES = [
    "python",
    pytest.param(
        "chdb",
        marks=pytest.mark.skipif(importlib.util.find_spec("chdb") is None, reason="chdb is not installed (chdb extra)"),
    ),
]


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as srv:
        yield srv


@pytest.fixture
def app(process: Callable[..., Process], server: LocalChatServer) -> Iterator[tuple[Process, openai.OpenAI]]:
    """The openai instrumentor alone (what ``opentelemetry-instrument`` loads), exporting to an OTLP JSON file."""
    proc = process("zero-code.jsonl", "zero-code")
    instrumentor: OpenAIInstrumentor = instrument_openai(tracer_provider=proc.provider, meter_provider=proc.meters)
    try:
        with openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client:
            yield proc, client
    finally:
        instrumentor.uninstrument()


def converse(server: LocalChatServer, client: openai.OpenAI, turns: list[tuple[list[Any], list[Any]]]) -> None:
    """Each ``(messages, response events)`` turn through the real client, every stream consumed; no host."""
    for messages, events in turns:
        server.enqueue(Script(events=events))
        assert consume(client, messages).error is None


def audit(capsys: pytest.CaptureFixture[str], path: Path, engine: str) -> tuple[int, dict[str, Any]]:
    code = run_audit([str(path)], json_output=True, progress=False, engine=engine)
    out, err = capsys.readouterr()
    assert err == ""
    return code, json.loads(out)


def kinds(report: dict[str, Any]) -> dict[str, int]:
    return {entry["kind"]: entry["count"] for entry in report["by_kind"]}


def findings(report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [f for entry in report["traces_detail"] for f in entry["findings"] if f["kind"] == kind]


def responses(path: Path) -> list[Any]:
    return sorted((s for s in iter_spans([str(path)]) if s.name == "assemble_response"), key=lambda s: s.start_ns)


# --- zero code: the next request is the evidence -------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_every_call_answered_in_the_next_request_is_clean(
    app: tuple[Process, openai.OpenAI], server: LocalChatServer, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    proc, client = app
    turn2 = [*USER, assistant_turn("call-a", "call-b"), tool_message("call-a"), tool_message("call-b")]
    turn3 = [*turn2, assistant_turn("call-c"), tool_message("call-c", "saved")]
    converse(server, client, [(USER, proposing("call-a", "call-b")), (turn2, proposing("call-c")), (turn3, TEXT_ONLY)])
    proc.close()

    first, second, third = responses(proc.path)
    assert len({first.trace_id, second.trace_id, third.trace_id}) == 3  # no app span: one trace per request
    assert ANSWERED_IDS not in first.attributes
    assert second.attributes[ANSWERED_IDS] == ["call-a", "call-b"]
    assert third.attributes[ANSWERED_IDS] == ["call-c"]
    assert not any(ANSWERED_DROPPED in span.attributes for span in (first, second, third))
    code, report = audit(capsys, proc.path, engine)
    assert (code, kinds(report)) == (0, {}), report
    assert report["ok"] is True and report["input"]["traces"] == 3


@pytest.mark.parametrize("engine", ENGINES)
def test_an_answer_the_next_request_drops_is_unanswered(
    app: tuple[Process, openai.OpenAI], server: LocalChatServer, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    proc, client = app
    turn2 = [*USER, assistant_turn("call-a", "call-b"), tool_message("call-a")]  # call-b's answer left out
    converse(server, client, [(USER, proposing("call-a", "call-b")), (turn2, TEXT_ONLY)])
    proc.close()

    first, second = responses(proc.path)
    assert second.attributes[ANSWERED_IDS] == ["call-a"]
    code, report = audit(capsys, proc.path, engine)
    # once: not also a recorded_violation; the request the provider would refuse is a finding of its own
    assert (code, kinds(report)) == (1, {"unanswered_call": 1, "request_pairing": 1}), report
    (finding,) = findings(report, "unanswered_call")
    assert finding["call_id"] == "call-b" and finding["category"] == "unanswered_call"
    assert finding["span_id"] == second.span_id  # where the settlement recorded it
    assert report["traces_detail"][0]["trace_id"] == second.trace_id != first.trace_id


@pytest.mark.parametrize("engine", ENGINES)
def test_calls_no_request_ever_settled_are_unjudged(
    app: tuple[Process, openai.OpenAI], server: LocalChatServer, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    proc, client = app
    converse(server, client, [(USER, proposing("call-a", "call-b"))])  # the app stops here
    proc.close()

    code, report = audit(capsys, proc.path, engine)
    assert (code, kinds(report)) == (0, {"unjudged": 2}), report
    assert report["ok"] is True and report["findings"] == 0 and report["traces_with_findings"] == 0
    assert report["traces_detail"] == []  # informational: counted, not listed


@pytest.mark.parametrize("engine", ENGINES)
def test_an_orphaned_result_id_never_reaches_a_span(
    app: tuple[Process, openai.OpenAI], server: LocalChatServer, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    proc, client = app
    turn2 = [*USER, assistant_turn("call-a"), tool_message("call-a"), tool_message("call-zzz-secret")]
    converse(server, client, [(USER, proposing("call-a")), (turn2, TEXT_ONLY)])
    proc.close()

    assert "call-zzz-secret" not in proc.path.read_text()  # no attribute, event or anything else carries it
    second = responses(proc.path)[1]
    assert second.attributes[ANSWERED_IDS] == ["call-a"]
    code, report = audit(capsys, proc.path, engine)
    # and the request its provider would refuse (a result answering no call) is a finding of its own
    assert (code, kinds(report)) == (1, {"recorded_violation": 1, "request_pairing": 1}), report
    (finding,) = findings(report, "recorded_violation")
    assert finding["category"] == "orphaned_result" and "call_id" not in finding


# --- bounds and matching across traces -------------------------------------------------------------------


def many(*ids: str) -> list[Any]:
    return finished(*(chunk(fragment(i, call_id, "read_page", "{}")) for i, call_id in enumerate(ids)))


@pytest.mark.parametrize("engine", ENGINES)
def test_answered_ids_are_bounded_and_the_dropped_ones_stay_unjudged(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    proc = process()
    inst = proc.instrumentation()
    inst.telemetry.max_answered_ids = 2
    conversation = Conversation()
    ids = ["call-1", "call-2", "call-3", "call-4"]
    list(inst.stream(iter(many(*ids)), conversation=conversation))
    list(inst.stream(iter(finished()), conversation=conversation, tool_message_ids=[*ids, "call-zzz"]))
    proc.close()

    second = responses(proc.path)[1]
    assert second.attributes[ANSWERED_IDS] == ["call-1", "call-2"]
    assert second.attributes[ANSWERED_DROPPED] == 2
    code, report = audit(capsys, proc.path, engine)
    # Evidence left off the span is no evidence: the dropped answers are unjudged, never unanswered.
    assert (code, kinds(report)) == (1, {"recorded_violation": 1, "unjudged": 2}), report


@pytest.mark.parametrize("engine", ENGINES)
def test_a_settlement_covers_only_calls_proposed_before_it(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """A server that numbers its calls reuses ids across conversations: a settlement is never taken for a later one."""
    proc = process()
    inst = proc.instrumentation()
    first = Conversation()
    list(inst.stream(iter(many("call_0")), conversation=first))
    list(inst.stream(iter(finished()), conversation=first, tool_message_ids=["call_0"]))
    list(inst.stream(iter(many("call_0")), conversation=Conversation()))  # another conversation, never settled
    proc.close()

    code, report = audit(capsys, proc.path, engine)
    assert (code, kinds(report)) == (0, {"unjudged": 1}), report
    later = responses(proc.path)[2]
    assert report["by_kind"][0]["first_traces"] == [later.trace_id]


@pytest.mark.parametrize("engine", ENGINES)
def test_under_an_application_span_the_evidence_is_the_same(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """One trace for the whole turn: the same settlement, judged the same way."""
    proc = process()
    inst = proc.instrumentation()
    with proc.tracer.start_as_current_span("agent turn"):
        conversation = Conversation()
        list(inst.stream(iter(many("call-a", "call-b")), conversation=conversation))
        list(inst.stream(iter(finished()), conversation=conversation, tool_message_ids=["call-b"]))
    proc.close()

    code, report = audit(capsys, proc.path, engine)
    assert (code, kinds(report)) == (1, {"unanswered_call": 1}), report
    assert findings(report, "unanswered_call")[0]["call_id"] == "call-a"


# --- the documented zero-code path (docs/cli.md) ------------------------------------------------------------

ZERO_CODE_APP = """
import sys
import openai

client = openai.OpenAI(max_retries=0)
messages = [{"role": "user", "content": "read page 1 and 2"}]
calls = {}
for chunk in client.chat.completions.create(model="m", messages=messages, stream=True):
    for delta in chunk.choices[0].delta.tool_calls or []:
        empty = {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        call = calls.setdefault(delta.index, empty)
        call["id"] = delta.id or call["id"]
        call["function"]["name"] += (delta.function and delta.function.name) or ""
        call["function"]["arguments"] += (delta.function and delta.function.arguments) or ""
messages.append({"role": "assistant", "content": None, "tool_calls": list(calls.values())})
answered = list(calls.values())[: int(sys.argv[1])]
messages += [{"role": "tool", "tool_call_id": call["id"], "content": "ok"} for call in answered]
for _ in client.chat.completions.create(model="m", messages=messages, stream=True):
    pass
print(f"{len(answered)} of {len(calls)} answered", file=sys.stderr)  # stdout carries the spans
"""


@pytest.mark.parametrize(
    ("answers", "expected"), [(2, (0, {})), (1, (1, {"unanswered_call": 1, "request_pairing": 1}))]
)
def test_the_zero_code_export_command_feeds_the_audit(
    server: LocalChatServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    answers: int,
    expected: tuple[int, dict[str, int]],
) -> None:
    """``OTEL_TRACES_EXPORTER=otlp_json_file opentelemetry-instrument python app.py > spans.jsonl``, audited."""
    from tests.test_examples import BIN, clean_env, run

    launcher = BIN / "opentelemetry-instrument"
    if not launcher.exists() or importlib.util.find_spec("opentelemetry.distro") is None:
        pytest.skip("needs opentelemetry-instrument and opentelemetry-distro (test extra)")
    app_path = tmp_path / "app.py"
    app_path.write_text(ZERO_CODE_APP)
    server.enqueue(Script(events=proposing("call_1", "call_2")), Script(events=TEXT_ONLY))
    env = clean_env(
        OPENAI_BASE_URL=server.base_url,
        OPENAI_API_KEY="local",
        OTEL_TRACES_EXPORTER="otlp_json_file",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    done = run([str(launcher), sys.executable, str(app_path), str(answers)], env)
    assert f"{answers} of 2 answered" in done.stderr
    spans = tmp_path / "spans.jsonl"
    spans.write_text(done.stdout)
    code, report = audit(capsys, spans, "python")
    assert (code, kinds(report)) == expected, report
    assert report["input"]["traces"] == 2  # one per request: the settlement crossed traces


def test_evidence_is_bounded_and_a_settlement_counts_only_after_the_proposal() -> None:
    evidence = Evidence(max_ids=1)
    evidence.note("call-a", 10)
    evidence.note("call-b", 30)  # past the bound: counted, not kept
    evidence.note("call-a", 20)  # a later settlement of a kept id moves its time
    assert (evidence.settled, evidence.dropped) == ({"call-a": 20}, 1)
    proposal = SpanRecord("t" * 32, "s" * 16, None, Role.CALL, start_ns=5, end_ns=20, call_id="call-a")
    assert evidence.settles(proposal)
    later = SpanRecord("t" * 32, "u" * 16, None, Role.CALL, start_ns=21, end_ns=25, call_id="call-a")
    assert not evidence.settles(later)
    assert not evidence.settles(SpanRecord("t" * 32, "v" * 16, None, Role.CALL, end_ns=1, call_id="call-b"))


def test_a_trace_checked_alone_counts_only_its_own_events() -> None:
    trace_id = "1" * 32
    response = {"etf.stream.state": "completed", "etf.stream.dispatchable": True}
    proposal = {"etf.tool_call.verdict": "proposed", "gen_ai.tool.call.id": "call-a"}
    spans = [
        SpanData(trace_id, "a" * 16, None, "assemble_response", 1, 10, response),
        SpanData(trace_id, "b" * 16, "a" * 16, "assemble_tool_call f", 2, 9, proposal),
        SpanData(trace_id, "c" * 16, None, "assemble_response", 11, 20, {**response, ANSWERED_IDS: ["call-a"]}),
    ]
    records = [to_record(span) for span in spans]
    alone = check_trace(trace_id, records)  # without Evidence the answered ids of the input are not known
    assert [finding.kind for finding in alone] == [FindingKind.UNJUDGED]
    evidence = Evidence()
    for span, record in zip(spans, records, strict=True):
        evidence.add(span, record)
    assert check_trace(trace_id, records, evidence) == []
