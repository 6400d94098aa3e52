"""What requests recorded about their histories, in the audit: drift (``history_drift``) and ``--strict``.

A request whose history holds together but differs from what the model proposed (a framework's own round
answered in the same request, an id made unique, a refused call answered with an error) breaks nothing: the
instrumentation records an ``etf.linkage.drift`` event on the request's ``assemble_response`` span, never a
violation (docs/categories.md, "Violation or drift"). The audit counts each as ``history_drift``, an
informational kind, unless ``--strict`` asks it to fail on drift too. The exports come from the real
``openai`` client against the scripted server, audited by the Python engine and by the SQL in chDB.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from etf_otel import attributes as A
from etf_otel.audit import AuditFinding, AuditReport, FindingKind, audit_spans
from etf_otel.audit._sources.otlp_json import iter_spans
from etf_otel.cli import main
from etf_otel.testing import LocalChatServer
from tests.integrations.test_openai_integration import TEXT_ONLY, USER, assistant_turn, proposing, tool_message

from ..conftest import Process
from .test_audit_evidence import ENGINES, app, converse, findings, kinds, server  # noqa: F401  (fixtures)

FABRICATED = [
    *USER,
    assistant_turn("call-a"),
    tool_message("call-a"),
    assistant_turn("call-own"),  # no response proposed it: the framework's own round, answered right after
    tool_message("call-own", "found"),
]


def run(path: Path, engine: str, capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, dict[str, Any]]:
    code = main(["audit", "--no-progress", "--json", "--engine", engine, *options, str(path)])
    out, err = capsys.readouterr()
    assert err == "", err
    return code, json.loads(out)


def drift_run(app: tuple[Process, openai.OpenAI], server: LocalChatServer) -> Path:  # noqa: F811
    proc, client = app
    converse(server, client, [(USER, proposing("call-a")), (FABRICATED, TEXT_ONLY)])
    proc.close()
    return proc.path


@pytest.mark.parametrize("engine", ENGINES)
def test_a_fabricated_round_is_history_drift_counted_but_not_a_finding(
    app: tuple[Process, openai.OpenAI],  # noqa: F811
    server: LocalChatServer,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    engine: str,
) -> None:
    path = drift_run(app, server)
    (event,) = [attrs for s in iter_spans([str(path)]) for name, attrs in s.events if name == A.EVENT_LINKAGE_DRIFT]
    assert event[A.ETF_DIVERGENCE_KIND] == "call_fabricated" and A.GEN_AI_TOOL_CALL_ID not in event

    code, report = run(path, engine, capsys)
    assert (code, kinds(report), report["ok"], report["findings"]) == (0, {"history_drift": 1}, True, 0), report
    (entry,) = report["by_kind"]
    assert entry["divergence_kinds"] == {"call_fabricated": 1} and entry["categories"] == {}
    assert report["traces_detail"] == []  # informational: counted, not listed


@pytest.mark.parametrize("engine", ENGINES)
def test_strict_makes_history_drift_a_finding(
    app: tuple[Process, openai.OpenAI],  # noqa: F811
    server: LocalChatServer,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    engine: str,
) -> None:
    path = drift_run(app, server)
    code, report = run(path, engine, capsys, "--strict")
    assert (code, kinds(report), report["ok"], report["findings"]) == (1, {"history_drift": 1}, False, 1), report
    (finding,) = findings(report, "history_drift")
    assert finding["detail"] == finding["divergence_kind"] == "call_fabricated"
    assert finding["category"] is None and "call_id" not in finding  # the event named no preserved id
    assert report["traces_with_findings"] == 1


def test_the_table_says_drift_is_not_a_finding_unless_strict(
    app: tuple[Process, openai.OpenAI],  # noqa: F811
    server: LocalChatServer,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = drift_run(app, server)
    assert main(["audit", "--no-progress", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "No linkage problems found. 1 history drift record(s)" in out
    assert "divergence_kind call_fabricated (1)" in out
    assert main(["audit", "--no-progress", "--strict", str(path)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "1 finding(s) in 1 trace(s)." in out and "history drift record" not in out


def test_the_python_api_takes_strict_too(
    app: tuple[Process, openai.OpenAI],  # noqa: F811
    server: LocalChatServer,  # noqa: F811
) -> None:
    path = drift_run(app, server)
    lenient, strict = (audit_spans(iter_spans([str(path)]), strict=value) for value in (False, True))
    assert isinstance(lenient, AuditReport) and lenient.kinds[FindingKind.HISTORY_DRIFT].count == 1
    assert (lenient.has_findings, strict.has_findings) == (False, True)
    (finding,) = strict.details[next(iter(strict.details))]
    kind = "call_fabricated"
    assert finding == AuditFinding(
        FindingKind.HISTORY_DRIFT, finding.trace_id, finding.span_id, detail=kind, divergence=kind
    )


def test_the_sql_engine_knows_every_drift_kind() -> None:
    import re

    from etf_otel.audit._request import DRIFT_KINDS

    sql = (Path(__file__).parents[2] / "etf_otel" / "audit" / "sql" / "audit_findings.sql").read_text()
    drifts = sql[sql.index("-- etf.linkage.drift events") :]
    listed = drifts[drifts.index("a['etf.divergence.kind'] IN (") :].split(")", 1)[0]
    assert set(re.findall(r"'([a-z_]+)'", listed)) == DRIFT_KINDS


# --- the request's pairing --------------------------------------------------------------------------------------
# The live check (docs/protocols.md, "The request before it is sent") records it on the request's assemble_response
# span; these spans carry what it records, in the shapes the OTLP JSON exporter writes (string arrays, a boolean).


def otlp_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [{"stringValue": item} for item in value]}}
    return {"stringValue": value}


def request_span(span: int, **attributes: Any) -> dict[str, Any]:
    recorded = {"etf.stream.state": "completed", "etf.stream.dispatchable": True, **attributes}
    return {
        "traceId": f"{span:032x}",
        "spanId": f"{span:016x}",
        "name": "assemble_response",
        "startTimeUnixNano": str(1_000 * span),
        "endTimeUnixNano": str(1_000 * span + 10),
        "attributes": [{"key": key, "value": otlp_value(value)} for key, value in recorded.items()],
    }


def export(path: Path, spans: list[dict[str, Any]]) -> Path:
    document = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "etf_otel"}, "spans": spans}]}]}
    path.write_text(json.dumps(document) + "\n")
    return path


PAIRING = "etf.request.pairing"
PROBLEMS = "etf.request.pairing_problems"
REASONS = "etf.request.pairing_reasons"
REFUSED = "etf.request.pairing_refused"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_broken_request_is_a_request_pairing_finding_with_its_problems_and_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    spans = [
        request_span(
            1,
            **{
                PAIRING: "broken",
                # as recorded, each once and sorted; an unknown value is not repeated
                PROBLEMS: ["result_without_call", "call_without_result", "result_without_call", "made_up"],
                REASONS: ["history_trimmed", "bogus"],
                REFUSED: True,
            },
        ),
        request_span(2, **{PAIRING: "broken", PROBLEMS: ["duplicate_result"]}),
        request_span(3, **{PAIRING: "refused_unexplained"}),
        request_span(4),  # consistent: nothing recorded
        request_span(5, **{PAIRING: "fine", PROBLEMS: ["duplicate_result"]}),  # no state of the closed list
    ]
    code, report = run(export(tmp_path / "pairing.jsonl", spans), engine, capsys)
    assert (code, kinds(report), report["traces_with_findings"]) == (1, {"request_pairing": 3}, 3), report
    found = {f["span_id"]: f for f in findings(report, "request_pairing")}
    assert {span: f["detail"] for span, f in found.items()} == {
        f"{1:016x}": "broken: call_without_result, result_without_call; reasons history_trimmed"
        "; refused by the provider",
        f"{2:016x}": "broken: duplicate_result",
        f"{3:016x}": "refused_unexplained",
    }
    assert all(f["category"] is None and "call_id" not in f for f in found.values())


@pytest.mark.parametrize("engine", ENGINES)
def test_request_pairing_fails_the_audit_without_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """A broken request is a finding: the provider refuses it (11.8), unlike drift."""
    path = export(tmp_path / "one.jsonl", [request_span(1, **{PAIRING: "broken", PROBLEMS: ["call_without_result"]})])
    code, report = run(path, engine, capsys)
    assert (code, report["ok"], report["findings"]) == (1, False, 1), report


@pytest.mark.parametrize("engine", ENGINES)
def test_a_request_refused_before_any_response_is_no_malformed_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """The span of a request the provider or the request guard refused has no stream: its ``error.type`` says so."""
    refused = request_span(1, **{PAIRING: "broken", PROBLEMS: ["call_without_result"], "error.type": "BadRequestError"})
    unexplained = request_span(2, **{PAIRING: "refused_unexplained", "error.type": "BadRequestError"})
    for one in (refused, unexplained):
        one["attributes"] = [a for a in one["attributes"] if not a["key"].startswith("etf.stream.")]
    no_stream = request_span(3)  # no error.type: a response span without its stream attributes is malformed
    no_stream["attributes"] = [a for a in no_stream["attributes"] if not a["key"].startswith("etf.stream.")]
    code, report = run(export(tmp_path / "refused.jsonl", [refused, unexplained, no_stream]), engine, capsys)
    kinds = {entry["kind"]: entry["count"] for entry in report["by_kind"]}
    assert code == 1 and kinds == {"request_pairing": 2, "malformed_span": 2}, report  # the two of span 3


# --- a refused call answered ------------------------------------------------------------------------------------


def span(trace: int, span_id: int, name: str, start: int, attributes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "traceId": f"{trace:032x}",
        "spanId": f"{span_id:016x}",
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 10),
        "attributes": [{"key": key, "value": otlp_value(value)} for key, value in attributes.items()],
        **extra,
    }


def refused_and_answered(kind: str) -> list[dict[str, Any]]:
    """What a guarded pydantic-ai run exports (tests/integrations/frameworks/test_multi_round.py): a response cut
    in its second call, the framework's failed attempt to run that call, and the next request, a trace of its
    own, whose span records the error result it carried for it as a drift event of ``kind``."""
    rejected = {
        "etf.tool_call.verdict": "rejected",
        "gen_ai.tool.call.id": "call_cut",
        "error.type": "invalid_arguments",
    }
    ran = {"gen_ai.tool.call.id": "call_cut", "error.type": "ToolRetryError"}  # linked to the call, as etf-otel links
    drift = {"etf.divergence.kind": kind, "gen_ai.tool.call.id": "call_cut", "gen_ai.tool.name": "get_weather"}
    return [
        request_span(1, **{"etf.stream.dispatchable": False, "error.type": "truncated_stream"}),
        span(1, 2, "assemble_tool_call get_weather", 1_001, rejected, parentSpanId=f"{1:016x}"),
        span(2, 3, "execute_tool get_weather", 2_000, ran, links=[{"traceId": f"{1:032x}", "spanId": f"{2:016x}"}]),
        {
            **request_span(4),
            "events": [
                {
                    "name": "etf.linkage.drift",
                    "attributes": [{"key": k, "value": otlp_value(v)} for k, v in drift.items()],
                }
            ],
        },
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_refusal_answered_is_the_answer_of_the_call_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """AGENT-STACKS 11.7: a refused call answered with an error result leaves the rejection the stream caused as
    the only finding; the failed attempt to run it is answered, by the drift event, so no execution_without_result."""
    code, report = run(export(tmp_path / "answered.jsonl", refused_and_answered("refusal_answered")), engine, capsys)
    assert (code, kinds(report)) == (
        1,
        {"executed_rejected": 1, "recorded_rejection": 1, "history_drift": 1},
    ), report


@pytest.mark.parametrize("engine", ENGINES)
def test_another_drift_naming_the_call_is_no_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    code, report = run(export(tmp_path / "other.jsonl", refused_and_answered("id_replaced")), engine, capsys)
    assert kinds(report)["execution_without_result"] == 1, report
