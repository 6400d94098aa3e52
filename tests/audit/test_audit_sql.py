"""The audit's checks in SQL (``etf_otel/sql``), run in embedded chDB over the exporter's ``otel_traces``.

Traces come from the real instrumentation and the official OTLP JSON file exporter (as in
``test_audit.py``), plus hand-written OTLP lines for what the instrumentation never emits (malformed spans,
a link into a trace that never arrived). The SQL audit must agree exactly with the Python streaming audit.
"""

from __future__ import annotations

import argparse
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("chdb")

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from etf_otel.audit import AuditReport, audit_spans
from etf_otel.audit._pipeline import sql_audit
from etf_otel.audit._sources.otlp_json import iter_spans
from etf_otel.audit._sources.sql import (
    ChdbEngine,
    SqlAuditError,
    TimeWindow,
    parse_time,
    read_sql,
    to_row,
)
from etf_otel.cli._audit import add_audit_arguments, run_audit, run_sql_audit
from etf_otel.core._linkage import Conversation
from etf_otel.instrumentation import AssemblerAdapter, GuardRefusedError
from etf_otel.protocols._chat_completions import ReferenceAssembler
from etf_otel.testing.chat import MISSING, case_stream, chunk, finished, fragment

from ..conftest import Process
from .test_audit import CALL_A, call, clean_turn, consume

ALL_KINDS = {
    "orphaned_execution",
    "duplicate_execution",
    "unanswered_call",
    "execution_without_result",
    "executed_rejected",
    "refused_execution",
    "orphaned_tool_message",
    "recorded_violation",
    "missing_span",
    "malformed_span",
    "recorded_rejection",
    "unjudged",
    "unidentified_execution",
}


def _span(trace_id: str, span_id: str, name: str, parent: str = "", start: int = 1_000, **extra: Any) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 10),
    }
    if parent:
        span["parentSpanId"] = parent
    span.update(extra)
    return span


def _attrs(**values: Any) -> list[dict[str, Any]]:
    out = []
    for key, value in values.items():
        typed = {"boolValue": value} if isinstance(value, bool) else {"stringValue": value}
        out.append({"key": key.replace("__", "."), "value": typed})
    return out


def handwritten_lines() -> list[str]:
    """What the instrumentation never writes: malformed spans, links into traces that never arrived."""
    t1, t2, t3 = "a1" * 16, "a2" * 16, "a3" * 16
    spans = [
        # malformed: a call without verdict, a response without state/dispatchable, a violation without category
        _span(t1, "1" * 16, "turn"),
        _span(t1, "2" * 16, "assemble_tool_call save", "1" * 16, attributes=_attrs(gen_ai__tool__call__id="c1")),
        _span(t1, "3" * 16, "assemble_response", "1" * 16),
        _span(t1, "4" * 16, "chat", "1" * 16, events=[{"name": "etf.integrity.violation", "attributes": []}]),
        # a proposed call without id; an execution in another trace linking to a span that never arrived
        _span(t1, "5" * 16, "assemble_tool_call x", "1" * 16, attributes=_attrs(etf__tool_call__verdict="proposed")),
        _span(
            t2,
            "6" * 16,
            "execute_tool save",
            links=[{"traceId": t3, "spanId": "7" * 16}],
            attributes=_attrs(gen_ai__tool__call__id="c1"),
        ),
        # a same-trace link to a span that never arrived, and a parent that never arrived
        _span(t2, "8" * 16, "worker", "9" * 16, links=[{"traceId": t2, "spanId": "a" * 16}]),
    ]
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "hand"}}]},
                "scopeSpans": [{"spans": spans}],
            }
        ]
    }
    return [json.dumps(request)]


def every_finding(process: Callable[..., Process], tmp_path: Path) -> list[Path]:
    """Exports holding every finding kind, and clean traces, written by the real instrumentation."""
    proc = process("agent.jsonl")
    inst = proc.instrumentation()
    clean_turn(proc, inst)
    clean_turn(proc, inst)
    with proc.tracer.start_as_current_span("orphaned and duplicate"):
        consume(inst.stream(iter(case_stream(MISSING))))
        host = inst.host(lambda c: "ok")
        host(CALL_A)
        host(CALL_A)
        inst.host(lambda c: "ok", record_unverified_ids=True)(call("call-unknown"))
        host(call("call-unknown-2"))
    with proc.tracer.start_as_current_span("unanswered, recorded by the conversation too"):
        conversation = Conversation()
        consume(inst.stream(iter(case_stream(None)), conversation=conversation))
        inst.end_conversation(conversation)
    with proc.tracer.start_as_current_span("truncated turn"):
        consume(inst.stream(iter([chunk(fragment(0, "call-t", "read_page", '{"page":1}'))])))
        inst.host(lambda c: "ok")(call("call-t"))
    with proc.tracer.start_as_current_span("sibling turn"):
        stream = finished(
            chunk(fragment(0, "call-ok", "read_page", '{"page":1}')),
            chunk(fragment(1, "call-bad", "save", "{not json")),
        )
        consume(inst.stream(iter(stream)))
        inst.host(lambda c: "ok")(call("call-ok"))
    guarded = proc.instrumentation(guard=True)
    with proc.tracer.start_as_current_span("refused"):
        consume(guarded.stream(iter([chunk(fragment(0, "call-g", "read_page", '{"page":1}'))])))
        with pytest.raises(GuardRefusedError):
            guarded.host(lambda c: "ok")(call("call-g"))

    def failing(c: Any) -> None:
        raise TimeoutError("tool down")

    with proc.tracer.start_as_current_span("failed execution"):
        consume(inst.stream(iter(case_stream(None))))
        with pytest.raises(TimeoutError):
            inst.host(failing)(CALL_A)
    with proc.tracer.start_as_current_span("failed execution answered by a tool message"):
        consume(inst.stream(iter(case_stream(None))))
        with pytest.raises(TimeoutError):
            inst.host(failing)(CALL_A)
        messages = [{"role": "tool", "tool_call_id": "call-a", "content": "error: tool down"}]
        proc.tracer.start_span("chat", attributes={"gen_ai.input.messages": json.dumps(messages)}).end()
    with proc.tracer.start_as_current_span("orphaned tool messages"):
        consume(inst.stream(iter(case_stream(None))))
        inst.host(lambda c: "ok")(CALL_A)
        semconv = [
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call-a", "response": "ok"}]},
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call-ghost", "response": "?"}]},
        ]
        with proc.tracer.start_as_current_span("chat", attributes={"gen_ai.input.messages": json.dumps(semconv)}):
            trace.get_current_span().add_event("gen_ai.tool.message", {"id": "call-phantom"})
    with proc.tracer.start_as_current_span("divergent assembler"):
        assembler = inst.assembler(
            ReferenceAssembler(), adapter=AssemblerAdapter(calls=lambda result: [("other-id", "read_page", "{}")])
        )
        for item in case_stream(None):
            if item == "[DONE]":
                assembler.feed_done()
            else:
                assembler.feed(item)
        assembler.finish()
        inst.host(lambda c: "ok")(CALL_A)
    turn = proc.tracer.start_span("started, never exported")
    token = otel_context.attach(trace.set_span_in_context(turn))
    try:
        consume(inst.stream(iter(case_stream(None))))
        inst.host(lambda c: "ok")(CALL_A)
    finally:
        otel_context.detach(token)
    with proc.tracer.start_as_current_span("turn"):
        consume(inst.stream(iter(case_stream(None))))
    with proc.tracer.start_as_current_span("worker in another trace (cross-trace link, clean)"):
        inst.host(lambda c: "ok")(CALL_A)
    # An agent and a separate tool-host service under the propagated context (clean).
    host_process = process("tool-host.jsonl", "tool-host")
    carrier: dict[str, str] = {}
    with proc.tracer.start_as_current_span("turn"):
        consume(inst.stream(iter(case_stream(None))))
        TraceContextTextMapPropagator().inject(carrier)
    token = otel_context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        host_process.instrumentation().host(lambda c: "ok", record_unverified_ids=True)(CALL_A)
    finally:
        otel_context.detach(token)
    proc.close()
    host_process.close()
    hand = tmp_path / "hand.jsonl"
    hand.write_text("\n".join(handwritten_lines()) + "\n")
    return [proc.path, host_process.path, hand]


def finding_set(report: AuditReport) -> list[tuple[Any, ...]]:
    return sorted(
        (f.kind.value, f.trace_id, f.span_id, f.category, f.call_id, f.detail, f.reason)
        for findings in report.details.values()
        for f in findings
    )


def summary(report: AuditReport) -> dict[str, Any]:
    data = report.to_dict()
    for entry in data["by_kind"]:
        entry["first_traces"] = sorted(entry["first_traces"])
    data["traces_detail"] = sorted(
        (entry["trace_id"], sorted(json.dumps(f, sort_keys=True) for f in entry["findings"]))
        for entry in data["traces_detail"]
    )
    return data


@pytest.fixture
def chdb_engine() -> Iterator[Callable[[list[Path]], ChdbEngine]]:
    made: list[ChdbEngine] = []

    def make(paths: list[Path]) -> ChdbEngine:
        engine = ChdbEngine()
        made.append(engine)
        engine.load(iter_spans([str(path) for path in paths]))
        return engine

    yield make
    for engine in made:
        engine.close()


def python_report(paths: list[Path], window: TimeWindow | None = None) -> AuditReport:
    spans = list(iter_spans([str(path) for path in paths]))
    selected = window.selects(spans) if window else spans
    report = audit_spans(selected)
    report.spans = len(selected)  # run_audit fills it from the reader's counts
    return report


# --- agreement --------------------------------------------------------------------------------------


def test_every_finding_kind_agrees_with_the_python_audit(
    process: Callable[..., Process], tmp_path: Path, chdb_engine: Callable[[list[Path]], ChdbEngine]
) -> None:
    paths = every_finding(process, tmp_path)
    expected = python_report(paths)
    got = sql_audit(chdb_engine(paths))
    assert {kind.value for kind in expected.kinds} == ALL_KINDS  # the input really has every kind
    assert finding_set(got) == finding_set(expected)
    assert summary(got) == summary(expected)
    assert got.traces == expected.traces and got.spans == expected.spans


def test_clean_traces_report_nothing(
    process: Callable[..., Process], chdb_engine: Callable[[list[Path]], ChdbEngine]
) -> None:
    proc = process()
    inst = proc.instrumentation()
    clean_turn(proc, inst)
    clean_turn(proc, inst)
    proc.close()
    report = sql_audit(chdb_engine([proc.path]))
    assert (report.findings, report.traces, report.spans) == (0, 2, 8)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orphaned and duplicate", {"duplicate_execution": 1, "orphaned_execution": 1, "unidentified_execution": 1}),
        ("truncated turn", {"executed_rejected": 1, "recorded_rejection": 1}),
        ("sibling turn", {"executed_rejected": 1, "recorded_rejection": 1}),
        ("refused", {"refused_execution": 1, "recorded_rejection": 1}),
        ("failed execution", {"execution_without_result": 1}),
        ("failed execution answered by a tool message", {}),
        ("orphaned tool messages", {"orphaned_tool_message": 2}),
        ("divergent assembler", {"recorded_violation": 2}),
        ("unanswered, recorded by the conversation too", {"unanswered_call": 1}),
        ("started, never exported", {"missing_span": 1}),
    ],
)
def test_each_finding_kind_on_its_own_trace(
    process: Callable[..., Process],
    tmp_path: Path,
    chdb_engine: Callable[[list[Path]], ChdbEngine],
    name: str,
    expected: dict[str, int],
) -> None:
    paths = every_finding(process, tmp_path)
    spans = list(iter_spans([str(path) for path in paths]))
    roots = {span.trace_id for span in spans if span.name == name}
    if name == "started, never exported":  # its root never arrived: the trace whose spans name it as parent
        missing = [
            span
            for span in spans
            if span.name == "assemble_response" and span.parent_span_id not in {s.span_id for s in spans}
        ]
        roots = {missing[0].trace_id}
    assert len(roots) == 1
    only = tmp_path / "only.jsonl"
    lines = [line for path in paths for line in path.read_text().splitlines() if next(iter(roots)) in line]
    only.write_text("\n".join(lines) + "\n")
    report = sql_audit(chdb_engine([only]))
    assert {kind.value: s.count for kind, s in report.kinds.items()} == expected
    assert finding_set(report) == finding_set(python_report([only]))


def test_handwritten_malformed_and_missing(tmp_path: Path, chdb_engine: Callable[[list[Path]], ChdbEngine]) -> None:
    hand = tmp_path / "hand.jsonl"
    hand.write_text("\n".join(handwritten_lines()) + "\n")
    report = sql_audit(chdb_engine([hand]))
    details = sorted(f.detail or "" for fs in report.details.values() for f in fs if f.kind.value == "malformed_span")
    assert details == [
        "missing etf.integrity.violation event without etf.error.category",
        "missing etf.stream.dispatchable",
        "missing etf.stream.state",
        "missing etf.tool_call.verdict",
        "missing gen_ai.tool.call.id",
    ]
    missing = sorted(f.detail or "" for fs in report.details.values() for f in fs if f.kind.value == "missing_span")
    assert missing == [
        "link target of 6666666666666666, in trace " + "a3" * 16,
        "link target of 8888888888888888",
        "parent of 8888888888888888",
    ]
    assert finding_set(report) == finding_set(python_report([hand]))


def test_an_execution_that_is_its_own_parent_is_judged_alike(
    tmp_path: Path, chdb_engine: Callable[[list[Path]], ChdbEngine]
) -> None:
    """Found by the fuzz test: a span naming itself as parent is no nested execution (no span wraps itself);
    the SQL had dropped it, the Python audit judged it through its link into the proposal's trace."""
    t1, t2 = "b1" * 16, "b2" * 16
    spans = [
        _span(t2, "1" * 16, "assemble_response", attributes=_attrs(etf__stream__state="completed")),
        _span(
            t2,
            "2" * 16,
            "assemble_tool_call f",
            "1" * 16,
            attributes=_attrs(etf__tool_call__verdict="proposed", gen_ai__tool__call__id="call-1"),
        ),
        _span(
            t1,
            "3" * 16,
            "f",
            "3" * 16,
            start=2_000,
            links=[{"traceId": t2, "spanId": "9" * 16}],
            attributes=_attrs(openinference__span__kind="TOOL", tool_call__id="call-1"),
            status={"code": 2},
        ),
    ]
    spans[0]["attributes"].append({"key": "etf.stream.dispatchable", "value": {"boolValue": True}})
    hand = tmp_path / "self-parent.jsonl"
    hand.write_text(json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}) + "\n")
    expected = python_report([hand])
    assert {kind.value for kind in expected.kinds} == {"execution_without_result", "missing_span"}
    assert finding_set(sql_audit(chdb_engine([hand]))) == finding_set(expected)


# --- time window --------------------------------------------------------------------------------------


def test_time_window_selects_whole_traces(
    process: Callable[..., Process], tmp_path: Path, chdb_engine: Callable[[list[Path]], ChdbEngine]
) -> None:
    paths = every_finding(process, tmp_path)
    spans = list(iter_spans([str(path) for path in paths if path.name != "hand.jsonl"]))
    starts = sorted({min(s.start_ns for s in spans if s.trace_id == t) for t in {s.trace_id for s in spans}})
    middle = starts[len(starts) // 2]
    engine = chdb_engine(paths[:2])
    for window in (TimeWindow(since_ns=middle), TimeWindow(until_ns=middle), TimeWindow(middle, starts[-1])):
        got = sql_audit(engine, window=window)
        expected = python_report(paths[:2], window)
        assert 0 < got.traces < len(starts) + 1
        assert finding_set(got) == finding_set(expected)
        assert summary(got) == summary(expected)
    assert sql_audit(engine, window=TimeWindow(0, 1)).traces == 0


def test_parse_time() -> None:
    assert parse_time("1970-01-01T00:00:01Z") == 1_000_000_000
    assert parse_time("1970-01-01T01:00:00+01:00") == 0
    assert parse_time("1970-01-01 00:00:00.5") == 500_000_000  # naive: UTC
    assert parse_time("2h", now=7200.0) == 0
    assert parse_time("30m", now=3600.0) == 1800 * 10**9
    with pytest.raises(SqlAuditError, match="bad time"):
        parse_time("yesterday")
    with pytest.raises(SqlAuditError, match="empty time window"):
        TimeWindow.parse("2025-01-02", "2025-01-01")


# --- command line --------------------------------------------------------------------------------------


def test_command_line_chdb_matches_python_json(
    process: Callable[..., Process], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [str(path) for path in every_finding(process, tmp_path)]
    assert run_audit(paths, json_output=True, progress=False) == 1
    python_json = json.loads(capsys.readouterr().out)
    assert run_audit(paths, json_output=True, progress=False, engine="chdb") == 1
    sql_json = json.loads(capsys.readouterr().out)
    for data in (python_json, sql_json):
        data["traces_detail"] = sorted(
            (e["trace_id"], sorted(json.dumps(f, sort_keys=True) for f in e["findings"])) for e in data["traces_detail"]
        )
        for entry in data["by_kind"]:
            entry["first_traces"] = sorted(entry["first_traces"])
    assert sql_json == python_json
    assert run_audit(paths[:1], json_output=False, progress=False, engine="chdb", since="2000-01-01") == 1
    assert "orphaned_execution" in capsys.readouterr().out


def test_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_audit_arguments(parser)
    args = parser.parse_args(["a.jsonl", "--engine", "chdb", "--since", "2h", "--until", "2025-01-01T00:00:00Z"])
    assert (args.paths, args.engine, args.since, args.until) == (["a.jsonl"], "chdb", "2h", "2025-01-01T00:00:00Z")
    args = parser.parse_args(["--clickhouse", "http://localhost:8123", "--database", "traces"])
    assert (args.paths, args.clickhouse, args.database, args.engine) == (
        [],
        "http://localhost:8123",
        "traces",
        "python",
    )


def _refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"paths": [], "engine": "chdb"}, "no PATH given"),
        ({"paths": ["x"], "engine": "python", "clickhouse": "http://h:8123"}, "give no PATH"),
        ({"paths": [], "engine": "chdb", "clickhouse": "http://h:8123"}, "exclude each other"),
        ({"paths": [], "engine": "python", "clickhouse": "ftp://h"}, "bad --clickhouse URL"),
        ({"paths": ["x"], "engine": "chdb", "database": "d"}, "--database applies to --clickhouse only"),
        ({"paths": ["nope.jsonl"], "engine": "chdb"}, "no such file"),
        ({"paths": ["x"], "engine": "chdb", "since": "soon"}, "bad time"),
        ({"paths": [], "engine": "python", "clickhouse": "http://127.0.0.1:{port}"}, "cannot connect to ClickHouse"),
        (
            {"paths": [], "engine": "python", "clickhouse": "http://u:secret@127.0.0.1:{port}/"},
            "http://u:***@127.0.0.1",
        ),
    ],
)
def test_bad_usage_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kwargs: dict[str, Any], reason: str
) -> None:
    pytest.importorskip("clickhouse_connect")
    if "clickhouse" in kwargs:
        kwargs["clickhouse"] = kwargs["clickhouse"].format(port=_refused_port())
    code = run_sql_audit(json_output=True, **kwargs)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("etf-otel audit: ") and reason in err, err
    assert "secret" not in err


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"resourceSpans":[]}\n', "no OTLP trace spans"),
        ("not json\n", "not valid JSON"),
        (
            '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"00f067aa0ba902b7"}]}]}]}\n',
            "malformed trace id",
        ),
    ],
)
def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, reason: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert run_sql_audit([str(bad)], json_output=True, engine="chdb") == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and reason in err, err


def test_sql_is_shipped_and_rows_follow_the_exporter() -> None:
    text = read_sql("audit_findings.sql")
    assert "{since_ns:Int64}" in text and "{until_ns:Int64}" in text
    assert "SpanAttributes Map(LowCardinality(String), String)" in read_sql("otel_traces.sql")
    from etf_otel.audit import SpanData

    row = to_row(
        SpanData(
            "1" * 32,
            "2" * 16,
            None,
            "x",
            1_500_000_000,
            1_500_000_010,
            attributes={"b": True, "i": 3, "f": 0.5, "l": ["a", "b"], "s": "v"},
            status_code=2,
        )
    )
    assert row["TimestampNs"] == 1_500_000_000 and row["Duration"] == 10 and row["StatusCode"] == "Error"
    assert row["SpanAttributes"] == {"b": "true", "i": "3", "f": "0.5", "l": '["a","b"]', "s": "v"}
    assert row["ParentSpanId"] == ""
