"""Executions and LLM calls other instrumentations record, and hostile input, from the user's side.

The span shapes are built from the documented attributes of each convention (no framework installed):
pydantic-ai ``Agent.instrument_all()`` (OTel GenAI: ``chat <model>``, ``execute_tool <name>`` with
``gen_ai.tool.call.id``), OpenInference (``openinference.span.kind`` ``LLM``/``TOOL``, ``tool_call.id``; its
langchain instrumentor puts TOOL spans in traces of their own) and OpenLLMetry (``llm.request.type``,
``traceloop.span.kind = tool``, no call id). Every case runs through the console script's ``main`` with the
Python engine and with chDB, which must agree.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from etf_otel.cli import main

ENGINES = [
    "python",
    pytest.param(
        "chdb",
        marks=pytest.mark.skipif(importlib.util.find_spec("chdb") is None, reason="chdb is not installed (chdb extra)"),
    ),
]
_ids = itertools.count(1)


def span_id() -> str:
    return f"{next(_ids):016x}"


def attrs(values: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for key, value in values.items():
        if isinstance(value, bool):
            typed: dict[str, Any] = {"boolValue": value}
        elif isinstance(value, list):
            typed = {"arrayValue": {"values": [{"stringValue": item} for item in value]}}
        else:
            typed = {"stringValue": value}
        out.append({"key": key, "value": typed})
    return out


def span(
    trace: str, sid: str, name: str, parent: str = "", start: int = 1000, links: Any = (), **attributes: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": trace,
        "spanId": sid,
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 100),
        "attributes": attrs({key.replace("__", "."): value for key, value in attributes.items()}),
    }
    if parent:
        out["parentSpanId"] = parent
    if links:
        out["links"] = [{"traceId": t, "spanId": s} for t, s in links]
    return out


def export(path: Path, spans: list[dict[str, Any]], scope: str = "etf_otel") -> Path:
    request = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": scope}, "spans": spans}]}]}
    path.write_text(json.dumps(request) + "\n")
    return path


def observed_turn(trace: str, parent: str, start: int, ids: list[str], answered: list[str] = ()) -> list[Any]:
    """Our ``assemble_response`` (child of ``parent``) proposing ``ids``, each a clean ``assemble_tool_call``."""
    response = span_id()
    spans = [
        span(
            trace,
            response,
            "assemble_response",
            parent,
            start,
            etf__stream__state="completed",
            etf__stream__dispatchable=bool(ids),
            **({"etf.linkage.answered_ids": list(answered)} if answered else {}),
        )
    ]
    for call_id in ids:
        spans.append(
            span(
                trace,
                span_id(),
                "assemble_tool_call get_weather",
                response,
                start + 1,
                etf__tool_call__verdict="proposed",
                gen_ai__tool__call__id=call_id,
            )
        )
    return spans


def audit(capsys: pytest.CaptureFixture[str], engine: str, *paths: Path) -> tuple[int, dict[str, Any], str]:
    code = main(["audit", "--no-progress", "--json", "--engine", engine, *map(str, paths)])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def kinds(report: dict[str, Any]) -> dict[str, int]:
    return {entry["kind"]: entry["count"] for entry in report["by_kind"]}


def pydantic_ai_run(trace: str, *, observed: bool) -> list[Any]:
    """``invoke_agent`` > ``chat gpt-4o`` (our response inside when observed) > two ``execute_tool`` spans with
    ``gen_ai.tool.call.id`` (ours nested in the first, as a host wrapper would), then a second ``chat``."""
    agent, chat, chat2 = span_id(), span_id(), span_id()
    spans = [
        span(trace, agent, "invoke_agent agent", gen_ai__operation__name="invoke_agent"),
        span(trace, chat, "chat gpt-4o", agent, 1100, gen_ai__operation__name="chat"),
        span(trace, chat2, "chat gpt-4o", agent, 1500, gen_ai__operation__name="chat"),
    ]
    if observed:
        spans += observed_turn(trace, chat, 1110, ["call-1", "call-2"])
        spans += observed_turn(trace, chat2, 1510, [], answered=["call-1", "call-2"])
    tool1, tool2 = span_id(), span_id()
    spans += [
        span(
            trace,
            tool1,
            "execute_tool get_weather",
            agent,
            1300,
            gen_ai__operation__name="execute_tool",
            gen_ai__tool__call__id="call-1",
        ),
        span(
            trace,
            tool2,
            "execute_tool get_weather",
            agent,
            1310,
            gen_ai__operation__name="execute_tool",
            gen_ai__tool__call__id="call-2",
        ),
    ]
    if observed:  # ours inside the framework's span of the same call: one execution
        spans.append(
            span(
                trace,
                span_id(),
                "execute_tool get_weather",
                tool1,
                1301,
                gen_ai__operation__name="execute_tool",
                gen_ai__tool__call__id="call-1",
            )
        )
    return spans


# --- clean traffic with co-installed instrumentations ------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_pydantic_ai_instrument_all_clean_run_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    path = export(tmp_path / "run.jsonl", pydantic_ai_run("a1" * 16, observed=True))
    code, report, err = audit(capsys, engine, path)
    assert (code, kinds(report), err) == (0, {}, "")


@pytest.mark.parametrize("engine", ENGINES)
def test_openinference_tool_spans_in_their_own_traces_are_matched_by_unique_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    trace, llm = "b1" * 16, span_id()
    spans = [span(trace, llm, "ChatOpenAI", openinference__span__kind="LLM")]
    spans += observed_turn(trace, "", 1010, ["call-a", "call-b"])  # our response beside, no parent: a root
    spans[1]["parentSpanId"] = llm  # inside the LLM span
    for n, call_id in enumerate(("call-a", "call-b")):  # one trace per run step
        spans.append(
            span(
                f"b{n + 2}" * 16,
                span_id(),
                "get_weather",
                start=1200,
                openinference__span__kind="TOOL",
                tool_call__id=call_id,
            )
        )
    code, report, _ = audit(capsys, engine, export(tmp_path / "oi.jsonl", spans))
    assert (code, kinds(report)) == (0, {})


@pytest.mark.parametrize("engine", ENGINES)
def test_openllmetry_tool_spans_without_id_are_unidentified_never_orphaned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    trace, llm = "c1" * 16, span_id()
    spans = [span(trace, llm, "openai.chat", llm__request__type="chat")]
    spans += observed_turn(trace, llm, 1010, ["call-a", "call-b"])
    for _ in range(2):
        spans.append(span(trace, span_id(), "get_weather.tool", start=1200, traceloop__span__kind="tool"))
    code, report, _ = audit(capsys, engine, export(tmp_path / "ollm.jsonl", spans))
    assert code == 0
    assert kinds(report) == {"unidentified_execution": 2, "unjudged": 2}  # informational: nothing names the calls


# --- what etf-otel did not observe ------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_a_run_whose_llm_call_was_not_observed_is_counted_never_orphaned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    unobserved = json.loads(json.dumps(pydantic_ai_run("d1" * 16, observed=False)).replace("call-", "other-"))
    observed = pydantic_ai_run("d2" * 16, observed=True)
    code, report, _ = audit(capsys, engine, export(tmp_path / "mixed.jsonl", unobserved + observed))
    assert code == 0
    assert kinds(report) == {"response_not_observed": 2, "unobserved_llm_call": 2}
    assert report["unobserved_llm_calls"] == 2
    code = main(["audit", "--no-progress", "--engine", engine, str(tmp_path / "mixed.jsonl")])
    out = capsys.readouterr().out
    assert code == 0 and "2 LLM call(s) recorded by another instrumentation were not observed" in " ".join(out.split())


@pytest.mark.parametrize("engine", ENGINES)
def test_input_with_no_etf_otel_span_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    path = export(tmp_path / "foreign.jsonl", pydantic_ai_run("e1" * 16, observed=False), scope="pydantic-ai")
    code, report, err = audit(capsys, engine, path)
    assert (code, report) == (2, {})
    assert err == "etf-otel audit: 5 span(s), none from etf-otel: is it installed and enabled in this application?\n"


# --- a rejected response, executed or not ---------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_a_rejected_response_nobody_executed_is_a_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    from etf_otel.testing.chat import case_stream

    recording = tmp_path / "conflict.jsonl"  # a second id on the same call: id_conflict, nothing runs
    recording.write_text("".join(json.dumps(event) + "\n" for event in case_stream("call-b")))
    assert main(["replay", "--json", str(recording), "--export", str(tmp_path / "out.jsonl")]) == 1
    capsys.readouterr()
    code, report, _ = audit(capsys, engine, tmp_path / "out.jsonl")
    assert code == 1
    assert kinds(report) == {"recorded_rejection": 1}
    assert report["by_kind"][0]["categories"] == {"id_conflict": 1}


# --- the same spans exported twice ------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_the_same_spans_exported_twice_are_counted_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    once = export(tmp_path / "once.jsonl", pydantic_ai_run("f1" * 16, observed=True))
    twice = tmp_path / "twice.jsonl"
    twice.write_text(once.read_text() * 2)
    code, report, _ = audit(capsys, engine, once)
    code2, report2, _ = audit(capsys, engine, twice)
    assert (code, code2, kinds(report2)) == (0, 0, {})
    assert report2["input"]["spans"] == report["input"]["spans"] == 10
    assert report2["input"]["duplicate_spans"] == 10
    assert main(["audit", "--no-progress", *(["--engine", "chdb"] if engine == "chdb" else []), str(twice)]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.endswith(", 10 duplicate span(s) dropped (exported more than once)"), header
    assert main(["audit", "--no-progress", *(["--engine", "chdb"] if engine == "chdb" else []), str(once)]) == 0
    assert "duplicate" not in capsys.readouterr().out


@pytest.mark.parametrize("engine", ENGINES)
def test_nested_executions_judged_in_another_trace_are_one_execution(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """A framework's tool span around ours, in a trace of its own, both linking to the proposal: one execution."""
    agent, tools = "e1" * 16, "e2" * 16
    spans = observed_turn(agent, "", 1000, ["call-1"])
    link = [{"traceId": agent, "spanId": spans[1]["spanId"]}]
    outer = span(tools, span_id(), "execute_tool f", "", 1200, gen_ai__tool__call__id="call-1")
    inner = span(tools, span_id(), "execute_tool f", outer["spanId"], 1210, gen_ai__tool__call__id="call-1")
    outer["links"], inner["links"] = link, link
    code, report, _ = audit(capsys, engine, export(tmp_path / "nested.jsonl", [*spans, outer, inner]))
    assert "duplicate_execution" not in kinds(report), report["by_kind"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("first_is_kept", [False, True])
def test_of_two_different_copies_of_one_span_both_engines_keep_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str, first_is_kept: bool
) -> None:
    """The copy that started first counts, wherever it is in the input; at the same start and end, the failed one.
    Here the failed copy of an execution is an execution without a result; the other a clean one."""
    trace = "d7" * 16
    spans = observed_turn(trace, "", 1000, ["call-1"])
    execution = span(trace, span_id(), "execute_tool f", "", 1200, gen_ai__tool__call__id="call-1")
    execution["links"] = [{"traceId": trace, "spanId": spans[1]["spanId"]}]
    failed = {**execution, "status": {"code": 2}, "attributes": [*execution["attributes"]]}
    failed["attributes"].append({"key": "error.type", "value": {"stringValue": "ValueError"}})
    if not first_is_kept:  # the failed copy comes first in the input but started later
        failed["startTimeUnixNano"], failed["endTimeUnixNano"] = "1250", "1300"
    code, report, _ = audit(capsys, engine, export(tmp_path / "twice.jsonl", [*spans, failed, execution]))
    assert report["input"]["duplicate_spans"] == 1
    assert ("execution_without_result" in kinds(report)) is first_is_kept, report["by_kind"]


# --- hostile input: one line or a verdict, never an internal error ----------------------------------------


def one_line(err: str) -> bool:
    return err.startswith("etf-otel audit: ") and err.count("\n") == 1 and "bug in etf-otel" not in err


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("value", ["1e400", "Infinity", "-1e400"])
def test_times_and_status_beyond_64_bits_are_no_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str, value: str
) -> None:
    spans = observed_turn("a9" * 16, "", 1000, ["call-x"])
    text = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
    text = text.replace('"startTimeUnixNano": "1000"', f'"startTimeUnixNano": {value}', 1)
    text = text.replace('"endTimeUnixNano": "1100"', f'"endTimeUnixNano": {value}, "status": {{"code": {value}}}', 1)
    path = tmp_path / "huge.jsonl"
    path.write_text(text + "\n")
    code, report, err = audit(capsys, engine, path)
    assert code in (0, 1) and report["input"]["spans"] == 2, err


def test_stdin_span_without_valid_ids_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    line = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "1", "name": "x"}]}]}]})
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(f"app output\n{line}\n".encode())))
    code = main(["audit", "--no-progress", "-"])
    err = capsys.readouterr().err
    assert code == 2 and one_line(err) and err.startswith("etf-otel audit: -:2: malformed trace id")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_lone_surrogate_in_an_attribute_is_read_by_both_engines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    spans = observed_turn("a8" * 16, "", 1000, ["call-x"])
    spans[1]["attributes"].append({"key": "gen_ai.tool.name", "value": {"stringValue": "PLACEHOLDER"}})
    path = tmp_path / "surrogate.jsonl"
    text = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).replace("PLACEHOLDER", "\\ud800")
    path.write_text(text + "\n")
    code, report, err = audit(capsys, engine, path)
    assert (code, report["input"]["spans"], err) == (0, 2, "")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_file_in_a_traces_directory_that_is_not_traces_is_skipped_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    export(traces / "run.jsonl", pydantic_ai_run("a7" * 16, observed=True))
    (traces / "notes.txt").write_text("remember to rotate the logs\n")
    code, report, err = audit(capsys, engine, traces)
    assert (code, kinds(report), err) == (0, {}, "")
    assert report["input"]["files"] == 1
    [skipped] = report["input"]["skipped_files"]
    assert skipped.startswith(str(traces / "notes.txt"))
    code, report, err = audit(capsys, engine, traces / "notes.txt")  # named on its own: an error, as before
    assert code == 2 and one_line(err)


@pytest.mark.parametrize("layout", ["sse", "jsonl"])
def test_a_recording_given_to_audit_gets_a_hint_naming_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    from etf_otel.testing.chat import case_stream

    events = case_stream("call-b")
    path = tmp_path / f"stream.{layout}"
    if layout == "sse":
        path.write_text("".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n")
    else:
        path.write_text("".join(json.dumps(event) + "\n" for event in events))
    code = main(["audit", "--no-progress", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and one_line(err) and "etf-otel replay" in err


@pytest.mark.parametrize(
    "body",
    [
        {"id": "c", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant"}}]},
        {"id": "resp_1", "object": "response", "status": "completed", "output": []},
        {"id": "msg_1", "type": "message", "role": "assistant", "content": []},
    ],
    ids=["chat", "responses", "anthropic"],
)
@pytest.mark.parametrize("engine", ["python", "chdb"])
def test_a_complete_body_given_to_audit_gets_the_hint_naming_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: dict[str, Any], engine: str
) -> None:
    """A pretty-printed response body (what ``replay`` now judges) is no trace export: one line naming replay."""
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body, indent=2))
    code = main(["audit", "--no-progress", "--engine", engine, str(path)])
    err = capsys.readouterr().err
    assert code == 2 and one_line(err) and "check it with etf-otel replay" in err


# --- an execution that differs from its proposal ----------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_an_execution_that_differs_from_its_proposal_is_reported_with_its_divergence_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """What a framework integration records when it ran a call under another id, and a kind outside the list."""
    trace = "f3" * 16
    spans = observed_turn(trace, "", 1000, ["call-1"])
    execution = span(trace, span_id(), "execute_tool f", "", 1200, gen_ai__tool__call__id="call-1")
    execution["links"] = [{"traceId": trace, "spanId": spans[1]["spanId"]}]
    execution["events"] = [
        {"name": "etf.integrity.violation", "attributes": attrs({"etf.error.category": "divergent_assembly", **kind})}
        for kind in ({"etf.divergence.kind": "id_replaced"}, {"etf.divergence.kind": "call_X9"}, {})
    ]
    code, report, _ = audit(capsys, engine, export(tmp_path / "divergent.jsonl", [*spans, execution]))
    (violation,) = [entry for entry in report["by_kind"] if entry["kind"] == "recorded_violation"]
    assert (code, violation["categories"], violation["divergence_kinds"]) == (
        1,
        {"divergent_assembly": 3},
        {"id_replaced": 1},  # a value outside the closed list is not repeated
    )
    main(["audit", "--no-progress", "--engine", engine, str(tmp_path / "divergent.jsonl")])
    out = capsys.readouterr().out
    assert "divergence_kind id_replaced (1)" in out and "call_X9" not in out


def test_the_sql_engine_knows_every_divergence_kind() -> None:
    from etf_otel.audit._model import DIVERGENCE_KINDS

    sql = (Path(__file__).parents[2] / "etf_otel" / "audit" / "sql" / "audit_findings.sql").read_text()
    listed = sql[sql.index("a['etf.divergence.kind'] IN (") :].split(")", 1)[0]
    assert set(re.findall(r"'([a-z_]+)'", listed)) == DIVERGENCE_KINDS


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("server_traced", [True, False])
def test_a_framework_span_around_an_mcp_call_is_one_execution(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str, server_traced: bool
) -> None:
    """A framework's execute_tool span, the mcp SDK's CLIENT span inside it and, from a traced server, its SERVER
    span: one execution of the proposal, never a duplicate_execution."""
    trace = "f4" * 16
    spans = observed_turn(trace, "", 1000, ["call-1"])
    link = [{"traceId": trace, "spanId": spans[1]["spanId"]}]
    framework = span(trace, span_id(), "execute_tool f", "", 1200, gen_ai__tool__call__id="call-1")
    client = span(
        trace,
        span_id(),
        "MCP send tools/call",
        framework["spanId"],
        1210,
        mcp__method__name="tools/call",
        gen_ai__tool__call__id="call-1",
        etf__mcp__match="explicit",
    )
    server = span(trace, span_id(), "tools/call f", client["spanId"], 1220, gen_ai__operation__name="execute_tool")
    framework["links"], client["links"] = link, link
    spans += [framework, client, *([server] if server_traced else [])]
    code, report, _ = audit(capsys, engine, export(tmp_path / "mcp.jsonl", spans))
    assert (code, set(kinds(report)) - {"unjudged"}) == (0, set()), report["by_kind"]


@pytest.mark.parametrize("engine", ENGINES)
def test_adks_merged_execute_tool_span_is_no_orphaned_execution(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """Google ADK (2.14, its own tracing on) ends a round of parallel calls with an ``execute_tool (merged)``
    span under the id of its merged response event, which no model sent: structure, not an execution."""
    trace, root = "ad" * 16, span_id()
    turn = observed_turn(trace, root, 1000, ["call_1", "call_2"])
    spans = [span(trace, root, "invoke_agent a"), *turn]
    for call_id, sid in zip(["call_1", "call_2"], [record["spanId"] for record in turn[1:]], strict=True):
        spans.append(
            span(
                trace,
                span_id(),
                "execute_tool get_weather",
                root,
                2000,
                links=[(trace, sid)],
                gen_ai__operation__name="execute_tool",
                gen_ai__tool__call__id=call_id,
            )
        )
    merged = {"gen_ai.tool.name": "(merged tools)", "gen_ai.tool.call.id": "5b0c7c7e-1b43-4a8e-9d34-3a3f0e1d2c11"}
    spans.append(span(trace, span_id(), "execute_tool (merged)", root, 3000, gen_ai__operation__name="execute_tool"))
    spans[-1]["attributes"] += attrs(merged)
    code, report, err = audit(capsys, engine, export(tmp_path / "adk.jsonl", spans))
    assert (code, kinds(report), err) == (0, {}, "")
