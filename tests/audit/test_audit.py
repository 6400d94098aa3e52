"""``etf-otel audit``: inputs written by the real instrumentation and the official OTLP JSON file exporter."""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from etf_otel.audit import AuditReport, FindingKind, Partitioner, SpanData, audit_spans
from etf_otel.audit._sources.otlp_json import iter_spans
from etf_otel.cli._audit import add_audit_arguments, run_audit
from etf_otel.core._linkage import Conversation
from etf_otel.instrumentation import AssemblerAdapter, GuardRefusedError, Instrumentation
from etf_otel.protocols._chat_completions import ReferenceAssembler
from etf_otel.testing.chat import MISSING, case_stream, chunk, finished, fragment

from ..conftest import Process

CALL_A = {"id": "call-a", "function": {"name": "read_page", "arguments": '{"page":1}'}}


def call(call_id: str, name: str = "read_page", arguments: str = '{"page":1}') -> dict[str, Any]:
    return {"id": call_id, "function": {"name": name, "arguments": arguments}}


def consume(stream: Any) -> None:
    for _ in stream:
        pass


def audit(capsys: pytest.CaptureFixture[str], *paths: Path | str) -> tuple[int, dict[str, Any], str]:
    code = run_audit([str(path) for path in paths], json_output=True, progress=False)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def kinds(report: dict[str, Any]) -> dict[str, int]:
    return {entry["kind"]: entry["count"] for entry in report["by_kind"]}


def categories(report: dict[str, Any], kind: str) -> dict[str, int]:
    return next(entry["categories"] for entry in report["by_kind"] if entry["kind"] == kind)


def clean_turn(proc: Process, inst: Instrumentation) -> None:
    with proc.tracer.start_as_current_span("turn"):
        consume(inst.stream(iter(case_stream(None))))
        inst.host(lambda c: "ok")(CALL_A)


# --- clean traces --------------------------------------------------------------------------------


def test_clean_traces_report_nothing(process: Callable[..., Process], capsys: pytest.CaptureFixture[str]) -> None:
    proc = process()
    inst = proc.instrumentation()
    clean_turn(proc, inst)
    clean_turn(proc, inst)  # a second trace reusing the same call id is its own scope
    with proc.tracer.start_as_current_span("turn"):
        consume(inst.stream(iter(case_stream(MISSING))))
        consume(inst.stream(iter(finished(chunk(fragment(0, "call-b", "save", "{}"))))))
        host = inst.host(lambda c: "ok")
        host(CALL_A)
        host(call("call-b", "save", "{}"))
    proc.close()
    code, report, err = audit(capsys, proc.path)
    assert (code, err) == (0, "")
    assert report["ok"] is True and report["findings"] == 0
    assert report["input"]["traces"] == 3 and report["input"]["spans"] == 15


def test_readable_report(process: Callable[..., Process], capsys: pytest.CaptureFixture[str]) -> None:
    proc = process()
    inst = proc.instrumentation()
    clean_turn(proc, inst)
    proc.close()
    assert run_audit([str(proc.path)], json_output=False, progress=True) == 0
    assert "No linkage problems found" in capsys.readouterr().out

    proc2 = process("orphan.jsonl")
    with proc2.tracer.start_as_current_span("turn"):
        proc2.instrumentation().host(lambda c: "ok", record_unverified_ids=True)(call("call-zz"))
    proc2.close()
    assert run_audit([str(proc2.path)], json_output=False, progress=False) == 1
    out = capsys.readouterr().out
    assert "orphaned_execution" in out and "orphaned_result" in out
    trace_id = next(iter_spans([str(proc2.path)])).trace_id
    assert trace_id in out


# --- every finding -----------------------------------------------------------------------------


def test_an_execution_without_id_is_unidentified_never_orphaned(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str]
) -> None:
    proc = process()
    inst = proc.instrumentation()
    with proc.tracer.start_as_current_span("turn"):
        consume(inst.stream(iter(case_stream(None))))
        host = inst.host(lambda c: "ok")
        host(CALL_A)
        inst.host(lambda c: "ok", record_unverified_ids=True)(call("call-unknown"))  # id recorded, no proposal
        host(call("call-unknown-2"))  # neither id nor link recorded
    proc.close()
    code, report, _ = audit(capsys, proc.path)
    assert code == 1
    assert kinds(report) == {"orphaned_execution": 1, "unidentified_execution": 1}
    assert categories(report, "orphaned_execution") == {"orphaned_result": 1}
    findings = report["traces_detail"][0]["findings"]  # informational kinds are not listed per trace
    assert [finding.get("call_id") for finding in findings] == ["call-unknown"]


def test_duplicate_execution(process: Callable[..., Process], capsys: pytest.CaptureFixture[str]) -> None:
    proc = process()
    inst = proc.instrumentation()
    with proc.tracer.start_as_current_span("turn"):
        consume(inst.stream(iter(case_stream(None))))
        host = inst.host(lambda c: "ok")
        host(CALL_A)
        host(CALL_A)
    proc.close()
    code, report, _ = audit(capsys, proc.path)
    assert code == 1
    assert kinds(report) == {"duplicate_execution": 1}
    assert categories(report, "duplicate_execution") == {"duplicate_result": 1}
    assert report["traces_detail"][0]["findings"][0]["call_id"] == "call-a"


def test_unanswered_call_and_recorded_violation_deduplicated(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str]
) -> None:
    proc = process()
    inst = proc.instrumentation()
    with proc.tracer.start_as_current_span("turn"):
        conversation = Conversation()
        consume(inst.stream(iter(case_stream(None)), conversation=conversation))
        inst.end_conversation(conversation)  # records its own unanswered_call event for call-a
    proc.close()
    code, report, _ = audit(capsys, proc.path)
    assert code == 1
    assert kinds(report) == {"unanswered_call": 1}  # the recorded event is the same finding


def test_executed_rejected_truncated_and_sibling(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str]
) -> None:
    proc = process()
    inst = proc.instrumentation()
    with proc.tracer.start_as_current_span("truncated turn"):
        consume(inst.stream(iter([chunk(fragment(0, "call-t", "read_page", '{"page":1}'))])))  # no terminal event
        inst.host(lambda c: "ok")(call("call-t"))
    with proc.tracer.start_as_current_span("sibling turn"):
        stream = finished(
            chunk(fragment(0, "call-ok", "read_page", '{"page":1}')),
            chunk(fragment(1, "call-bad", "save", "{not json")),
        )
        consume(inst.stream(iter(stream)))
        inst.host(lambda c: "ok")(call("call-ok"))  # valid itself, but its sibling blocks the response
    proc.close()
    code, report, _ = audit(capsys, proc.path)
    assert code == 1
    assert kinds(report) == {"executed_rejected": 2, "recorded_rejection": 2}
    assert categories(report, "executed_rejected") == {"truncated_stream": 1, "invalid_arguments": 1}
    assert categories(report, "recorded_rejection") == {"truncated_stream": 1, "invalid_arguments": 1}


def test_refused_execution(process: Callable[..., Process], capsys: pytest.CaptureFixture[str]) -> None:
    proc = process()
    inst = proc.instrumentation(guard=True)
    with proc.tracer.start_as_current_span("turn"):
        consume(inst.stream(iter([chunk(fragment(0, "call-t", "read_page", '{"page":1}'))])))
        with pytest.raises(GuardRefusedError):
            inst.host(lambda c: "ok")(call("call-t"))
    proc.close()
    code, report, _ = audit(capsys, proc.path)
    assert code == 1
    assert kinds(report) == {"refused_execution": 1, "recorded_rejection": 1}
    assert categories(report, "refused_execution") == {"truncated_stream": 1}


def test_execution_without_result(process: Callable[..., Process], capsys: pytest.CaptureFixture[str]) -> None:
    def failing(c: Any) -> None:
        raise TimeoutError("tool down")

    proc = process()
    inst = proc.instrumentation()
    with proc.tracer.start_as_current_span("turn"):
        consume(inst.stream(iter(case_stream(None))))
        with pytest.raises(TimeoutError):
            inst.host(failing)(CALL_A)
    with proc.tracer.start_as_current_span("turn answered by a tool message"):
        consume(inst.stream(iter(case_stream(None))))
        with pytest.raises(TimeoutError):
            inst.host(failing)(CALL_A)
        messages = [{"role": "tool", "tool_call_id": "call-a", "content": "error: tool down"}]
        proc.tracer.start_span("chat", attributes={"gen_ai.input.messages": json.dumps(messages)}).end()
    proc.close()
    code, report, _ = audit(capsys, proc.path)
    assert code == 1
    assert kinds(report) == {"execution_without_result": 1}
    assert categories(report, "execution_without_result") == {"unanswered_call": 1}


def test_orphaned_tool_message(process: Callable[..., Process], capsys: pytest.CaptureFixture[str]) -> None:
    proc = process()
    inst = proc.instrumentation()
    with proc.tracer.start_as_current_span("turn"):
        consume(inst.stream(iter(case_stream(None))))
        inst.host(lambda c: "ok")(CALL_A)
        semconv = [
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call-a", "response": "ok"}]},
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call-ghost", "response": "?"}]},
        ]
        with proc.tracer.start_as_current_span("chat", attributes={"gen_ai.input.messages": json.dumps(semconv)}):
            trace.get_current_span().add_event("gen_ai.tool.message", {"id": "call-phantom"})
    proc.close()
    code, report, _ = audit(capsys, proc.path)
    assert code == 1
    assert kinds(report) == {"orphaned_tool_message": 2}
    ids = {finding["call_id"] for finding in report["traces_detail"][0]["findings"]}
    assert ids == {"call-ghost", "call-phantom"}


def test_recorded_violation_surfaced(process: Callable[..., Process], capsys: pytest.CaptureFixture[str]) -> None:
    proc = process()
    inst = proc.instrumentation()
    with proc.tracer.start_as_current_span("turn"):
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
    proc.close()
    code, report, _ = audit(capsys, proc.path)
    assert code == 1
    assert kinds(report) == {"recorded_violation": 2}  # the id and the arguments diverge
    assert categories(report, "recorded_violation") == {"divergent_assembly": 2}


def test_missing_span_started_never_exported(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str]
) -> None:
    proc = process()
    inst = proc.instrumentation()
    turn = proc.tracer.start_span("turn")  # started, never ended: never exported
    token = otel_context.attach(trace.set_span_in_context(turn))
    try:
        consume(inst.stream(iter(case_stream(None))))
        inst.host(lambda c: "ok")(CALL_A)
    finally:
        otel_context.detach(token)
    proc.close()
    code, report, _ = audit(capsys, proc.path)
    assert code == 1
    assert kinds(report) == {"missing_span": 1}
    finding = report["traces_detail"][0]["findings"][0]
    assert finding["span_id"] == format(turn.get_span_context().span_id, "016x")
    assert finding["category"] is None


def test_malformed_span_reported(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    proc = process()
    clean_turn(proc, proc.instrumentation())
    proc.close()
    lines = proc.path.read_text().splitlines()
    edited = []
    for line in lines:
        request = json.loads(line)
        for span in request["resourceSpans"][0]["scopeSpans"][0]["spans"]:
            span["attributes"] = [kv for kv in span.get("attributes", []) if kv["key"] != "etf.tool_call.verdict"]
        edited.append(json.dumps(request))
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("\n".join(edited) + "\n")
    code, report, _ = audit(capsys, damaged)
    assert code == 1
    # Without its verdict the proposal cannot be judged: reported as such, and never as clean.
    assert kinds(report) == {"malformed_span": 1}
    assert report["traces_detail"][0]["findings"][0]["detail"] == "missing etf.tool_call.verdict"


# --- several processes, formats and layouts -------------------------------------------------------


def two_processes(process: Callable[..., Process]) -> tuple[Process, Process]:
    """An agent process streams; a separate tool-host service executes under the propagated context."""
    agent = process("agent.jsonl", "agent")
    host_process = process("tool-host.jsonl", "tool-host")
    agent_inst = agent.instrumentation()
    host_inst = host_process.instrumentation()
    propagator = TraceContextTextMapPropagator()
    carrier: dict[str, str] = {}
    with agent.tracer.start_as_current_span("turn"):
        consume(agent_inst.stream(iter(case_stream(None))))
        propagator.inject(carrier)
    token = otel_context.attach(propagator.extract(carrier))
    try:
        host_inst.host(lambda c: "ok", record_unverified_ids=True)(CALL_A)
    finally:
        otel_context.detach(token)
    agent.close()
    host_process.close()
    return agent, host_process


def test_two_processes_merged_by_trace(process: Callable[..., Process], capsys: pytest.CaptureFixture[str]) -> None:
    agent, host_process = two_processes(process)
    code, report, _ = audit(capsys, agent.path, host_process.path)
    assert code == 0, report
    assert report["input"]["files"] == 2 and report["input"]["traces"] == 1

    code, report, _ = audit(capsys, host_process.path)  # the host alone: nothing proposed it
    assert code == 1
    assert kinds(report) == {"orphaned_execution": 1, "missing_span": 1}

    code, report, _ = audit(capsys, agent.path)  # the agent alone: no execution, and no settlement either way
    assert (code, kinds(report)) == (0, {"unjudged": 1})
    assert report["ok"] is True and report["findings"] == 0 and report["traces_detail"] == []


def test_cross_trace_link(process: Callable[..., Process], capsys: pytest.CaptureFixture[str]) -> None:
    """The host runs outside the turn's trace: its span links into the proposal's trace."""
    proc = process()
    inst = proc.instrumentation()
    with proc.tracer.start_as_current_span("turn"):
        consume(inst.stream(iter(case_stream(None))))
    with proc.tracer.start_as_current_span("tool worker"):
        inst.host(lambda c: "ok")(CALL_A)
    proc.close()
    code, report, _ = audit(capsys, proc.path)
    assert code == 0, report
    spans = list(iter_spans([str(proc.path)]))
    execution = next(span for span in spans if span.name.startswith("execute_tool"))
    assert execution.links and execution.links[0][0] != execution.trace_id

    # The same with the proposal's trace lost: the link's target never arrived.
    kept = [line for line in proc.path.read_text().splitlines() if execution.trace_id in line]
    only_host = proc.path.with_name("host-only.jsonl")
    only_host.write_text("\n".join(kept) + "\n")
    code, report, _ = audit(capsys, only_host)
    assert code == 1
    assert kinds(report) == {"missing_span": 1}
    assert report["by_kind"][0]["first_traces"] == [execution.trace_id]


def test_gzip_and_directory_inputs(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    agent, host_process = two_processes(process)
    tree = tmp_path / "exports"
    (tree / "host" / "nested").mkdir(parents=True)
    (tree / "agent.jsonl.gz").write_bytes(gzip.compress(agent.path.read_bytes()))
    (tree / "host" / "nested" / "spans").write_bytes(host_process.path.read_bytes())  # no extension needed
    (tree / ".hidden").write_text("not json")  # hidden files are skipped
    code, report, _ = audit(capsys, tree)
    assert code == 0, report
    assert report["input"]["files"] == 2 and report["input"]["spans"] == 4

    code, report, _ = audit(capsys, tree / "host")  # the directory alone: the host's side only
    assert code == 1


def test_whole_documents_and_protobuf_json_mapping(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    agent, host_process = two_processes(process)
    # A pretty-printed document holding an array of requests.
    requests = [json.loads(line) for line in agent.path.read_text().splitlines()]
    (tmp_path / "agent.json").write_text(json.dumps(requests, indent=2))
    # The plain protobuf JSON mapping (base64 ids, snake_case names), concatenated documents.
    documents = []
    for line in host_process.path.read_text().splitlines():
        message = json.loads(line)
        for resource in message["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = __import__("base64").b64encode(bytes.fromhex(span[key])).decode()
        parsed = json_format.ParseDict(message, ExportTraceServiceRequest())
        documents.append(json_format.MessageToJson(parsed, preserving_proto_field_name=True))
    (tmp_path / "host.json").write_text("\n".join(documents))
    code, report, _ = audit(capsys, tmp_path / "agent.json", tmp_path / "host.json")
    assert code == 0, report
    assert report["input"]["spans"] == 4


def test_other_signals_are_skipped_and_counted(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    proc = process()
    clean_turn(proc, proc.instrumentation())
    proc.close()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"resourceMetrics":[]}\n\n' + proc.path.read_text() + '{"resourceLogs":[]}\n')
    code, report, _ = audit(capsys, mixed)
    assert code == 0
    assert report["input"]["skipped_records"] == 2


# --- bad input: exit 2 with one line, never a crash --------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        pytest.param('{"hello": "world"}\n', "(line 1: not an OTLP trace export", id="json-not-otlp"),
        pytest.param("this is a log file\nnot json at all\n", "(line 1: not valid JSON)", id="text"),
        pytest.param('{"resourceSpans": 3}\n', "resourceSpans is not a list", id="wrong-type"),
        pytest.param(
            '{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x","spanId":"00f067aa0ba902b7"}]}]}]}\n',
            "without a valid traceId",
            id="span-without-trace-id",
        ),
        pytest.param(
            '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"00f067aa0ba902b7"}]}]}]}\n',
            "malformed trace id",
            id="bad-trace-id",
        ),
        pytest.param('{"resourceSpans":[]}\n', "no OTLP trace spans", id="no-spans"),
        pytest.param("", "no OTLP trace spans", id="empty"),
        pytest.param("[1, 2]", "not an OTLP trace export", id="array-of-numbers"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    process: Callable[..., Process],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    content: str,
    reason: str,
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    code, report, err = audit(capsys, bad)
    assert code == 2 and report == {}
    assert err.count("\n") == 1 and err.startswith("etf-otel audit: ") and reason in err, err


def test_a_truncated_line_is_skipped_and_counted_as_on_standard_input(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A file is read by the rules of ``audit -``: a line cut in half (an exporter killed mid-write) is no export."""
    proc = process()
    clean_turn(proc, proc.instrumentation())
    proc.close()
    text = proc.path.read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text + text[: text.index("\n") // 2])
    code, report, _ = audit(capsys, cut)
    whole = audit(capsys, proc.path)[1]
    assert code == 0
    assert report["input"]["skipped_records"] == whole["input"]["skipped_records"] + 1
    assert report["input"]["spans"] == whole["input"]["spans"]


def test_truncated_gzip_and_missing_path(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    proc = process()
    clean_turn(proc, proc.instrumentation())
    proc.close()
    compressed = gzip.compress(proc.path.read_bytes() * 20)
    (tmp_path / "cut.gz").write_bytes(compressed[: len(compressed) // 2])
    code, _, err = audit(capsys, tmp_path / "cut.gz")
    assert code == 2 and err.count("\n") == 1
    code, _, err = audit(capsys, tmp_path / "nope.jsonl")
    assert code == 2 and "no such file" in err


# --- scaling: the spilled path agrees with the in-memory one ----------------------------------


def test_spilled_partitions_give_the_same_findings(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    proc = process()
    inst = proc.instrumentation()
    for turn in range(12):
        with proc.tracer.start_as_current_span("turn"):
            consume(inst.stream(iter(case_stream(None))))
            host = inst.host(lambda c: "ok")
            if turn % 3 == 0:
                host(CALL_A)
                host(CALL_A)
            elif turn % 3 == 1:
                host(call("call-nope"))
    with proc.tracer.start_as_current_span("turn"):
        consume(inst.stream(iter(case_stream(None))))
    with proc.tracer.start_as_current_span("worker in another trace"):
        inst.host(lambda c: "ok")(CALL_A)
    proc.close()

    def run(partitioner: Partitioner | None) -> AuditReport:
        return audit_spans(iter_spans([str(proc.path)]), partitioner=partitioner)

    in_memory = run(None)
    spilled_partitioner = Partitioner(memory_spans=5, bucket_spans=4, directory=str(tmp_path))
    spilled = run(spilled_partitioner)
    assert spilled_partitioner.buckets >= 8
    assert list(tmp_path.glob("etf-otel-audit-*")) == []  # temporary files removed
    summary = {kind.value: summary.count for kind, summary in in_memory.kinds.items()}
    assert summary == {"duplicate_execution": 4, "unidentified_execution": 4, "unjudged": 8}
    assert {kind.value: s.count for kind, s in spilled.kinds.items()} == summary
    assert spilled.traces == in_memory.traces == 14
    assert sorted(spilled.details) == sorted(in_memory.details)


def test_other_span_sources_feed_the_same_checker() -> None:
    """A source other than OTLP JSON (e.g. Phoenix) only has to produce SpanData."""
    trace_id = "1" * 32
    spans = [
        SpanData(trace_id, "a" * 16, None, "turn"),
        SpanData(trace_id, "b" * 16, "a" * 16, "execute_tool save", attributes={"gen_ai.tool.call.id": "c1"}),
    ]
    report = audit_spans(spans)
    assert {kind: summary.count for kind, summary in report.kinds.items()} == {FindingKind.ORPHANED_EXECUTION: 1}


def test_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_audit_arguments(parser)
    args = parser.parse_args(["a.jsonl", "dir", "--json"])
    assert (args.paths, args.json, args.progress) == (["a.jsonl", "dir"], True, True)
    assert parser.parse_args(["x", "--no-progress"]).progress is False


def test_any_value_decoding() -> None:
    from etf_otel.audit._sources.otlp_json import decode_any_value

    assert decode_any_value({"stringValue": "x"}) == "x"
    assert decode_any_value({"boolValue": True}) is True
    assert decode_any_value({"intValue": "12"}) == 12
    assert decode_any_value({"int_value": "nope"}) is None
    assert decode_any_value({"doubleValue": 1.5}) == 1.5
    assert decode_any_value({"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": 1}]}}) == ["a", 1]
    assert decode_any_value({"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": False}}]}}) == {"k": False}
    assert decode_any_value({"bytesValue": "AAE="}) == "AAE="
    assert decode_any_value({}) is None and decode_any_value("junk") is None


def test_report_details_are_bounded() -> None:
    spans = [
        SpanData(f"{n:032x}", "b" * 16, None, "execute_tool save", attributes={"gen_ai.tool.call.id": "c"})
        for n in range(1, 8)
    ]
    report = audit_spans(spans, report=AuditReport(max_details=3))
    assert report.traces_with_findings == 7 and len(report.details) == 3 and report.details_dropped == 4
    summary = report.to_dict()["by_kind"][0]
    assert summary["count"] == 7 and len(summary["first_traces"]) == 5


def test_the_progress_bar_counts_bytes_read_and_groups_of_traces_checked(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal: the checking row counts groups of traces, never bytes ("1/1 bytes" for a tiny input)."""
    import io

    from rich.console import Console

    from etf_otel.cli import _audit

    proc = process()
    clean_turn(proc, proc.instrumentation())
    proc.close()
    terminal = io.StringIO()
    monkeypatch.setattr(_audit, "Console", lambda stderr: Console(file=terminal, force_terminal=True, width=120))
    assert run_audit([str(proc.path)], json_output=True, progress=True) == 0
    capsys.readouterr()
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.getvalue())
    size = proc.path.stat().st_size
    assert f"{size}/{size} bytes" in shown or f"{size / 1000:.1f}/{size / 1000:.1f} kB" in shown, shown
    assert "1/1 groups of traces" in shown and "1/1 bytes" not in shown, shown
