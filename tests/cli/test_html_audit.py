"""``etf-otel audit --html``: the page's content, privacy, bounds and errors, without a browser."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from etf_otel.cli.html._audit import MAX_TRACES

from .test_cli_replay import ROOT, run
from .test_html_replay import elements

CANARY = "call-CANARY-9f3e1"
SHIPPED = ROOT / "docs" / "images" / "audit-traces.jsonl"


def _string(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def _span(trace: str, span: str, parent: str | None, name: str, start: int, attributes: list[Any], **extra: Any) -> Any:
    out = {
        "traceId": trace,
        "spanId": span,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1000),
        "attributes": attributes,
        "status": {},
        **extra,
    }
    if parent is not None:
        out["parentSpanId"] = parent
    return out


def orphaned_turn(number: int, executed_id: str = CANARY) -> list[Any]:
    """A trace whose one proposal is ``call-ok-N`` and whose execution runs ``executed_id``: orphaned."""
    trace = f"{number:032x}"
    base = 1_700_000_000_000_000_000 + number * 10_000
    return [
        _span(
            trace,
            f"{1:016x}",
            None,
            "assemble_response",
            base,
            [
                _string("etf.stream.state", "completed"),
                {"key": "etf.stream.dispatchable", "value": {"boolValue": True}},
            ],
        ),
        _span(
            trace,
            f"{2:016x}",
            f"{1:016x}",
            "assemble_tool_call read_page",
            base + 10,
            [_string("etf.tool_call.verdict", "proposed"), _string("gen_ai.tool.call.id", f"call-ok-{number}")],
        ),
        _span(
            trace,
            f"{3:016x}",
            None,
            "execute_tool read_page",
            base + 2000,
            [_string("gen_ai.operation.name", "execute_tool"), _string("gen_ai.tool.call.id", executed_id)],
        ),
    ]


def write_traces(path: Path, spans: list[Any]) -> Path:
    document = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}
    path.write_text(json.dumps(document) + "\n", encoding="utf-8")
    return path


def audit_page(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[int, str]:
    out = tmp_path / "audit.html"
    code, _, err = run(["audit", *argv, "--no-progress", "--html", str(out)], capsys)
    assert err == "", err
    return code, out.read_text(encoding="utf-8")


def test_the_shipped_traces_have_a_summary_and_a_timeline_per_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = audit_page(capsys, tmp_path, str(SHIPPED))
    code_json, out, _ = run(["audit", str(SHIPPED), "--json"], capsys)
    report = json.loads(out)
    assert code == code_json == 1
    found = elements(document)
    kinds = [attrs["data-kind"] for tag, attrs in found if tag == "tr" and "data-kind" in attrs]
    assert kinds == [entry["kind"] for entry in report["by_kind"]]
    traces = [attrs["data-trace"] for tag, attrs in found if tag == "details"]
    assert traces == [entry["trace_id"] for entry in report["traces_detail"]]
    badges = [attrs["data-finding"] for _, attrs in found if "data-finding" in attrs]
    expected = [finding["kind"] for entry in report["traces_detail"] for finding in entry["findings"]]
    assert sorted(badges) == sorted(expected)
    assert document.index("Findings by kind") < document.index("<details")  # summary first
    roles = {attrs["data-role"] for _, attrs in found if "data-role" in attrs}
    assert {"response", "call", "execution"} <= roles
    assert re.search(r'linked to <a href="#s-[0-9a-f]{16}">row \d+</a>', document)  # execution -> its call


def test_an_orphaned_execution_never_shows_the_id_it_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traces = write_traces(tmp_path / "t.jsonl", orphaned_turn(1))
    code, document = audit_page(capsys, tmp_path, str(traces))
    assert code == 1
    assert 'data-finding="orphaned_execution"' in document
    assert CANARY not in document
    assert "call-ok-1" in document  # the preserved id of the proposal is shown
    assert "runs an id no call proposed (not shown)" in document


def test_thousands_of_findings_stay_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spans = [span for number in range(1, 3001) for span in orphaned_turn(number, f"call-x-{number}")]
    traces = write_traces(tmp_path / "many.jsonl", spans)
    code, document = audit_page(capsys, tmp_path, str(traces))
    assert code == 1
    assert document.count("<details") == MAX_TRACES
    assert f"{3000 - MAX_TRACES} more trace(s) with findings not drawn" in document
    assert len(document.encode()) < 2_000_000
    assert 'data-finding="orphaned_execution"' in document and "3000" in document


def test_sql_engines_refuse_html_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["audit", str(SHIPPED), "--engine", "chdb", "--html", str(tmp_path / "x.html")], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "--html" in err


@pytest.mark.parametrize(
    ("target", "reason"), [(".", "is a directory"), ("nowhere/a.html", "no directory"), ("", "empty file name")]
)
def test_an_unwritable_html_path_is_one_line_and_exit_2(
    target: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["audit", str(SHIPPED), "--no-progress", "--html", target], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and reason in err, err


def test_the_page_is_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, first = audit_page(capsys, tmp_path, str(SHIPPED))
    _, second = audit_page(capsys, tmp_path, str(SHIPPED))
    assert first == second


def test_a_piped_input_gives_the_same_page_as_the_file(tmp_path: Path) -> None:
    """``audit - --html``: the page reads the spans a second time, from a copy of standard input."""
    pages = []
    for source, stdin in (("-", SHIPPED.read_bytes()), (str(SHIPPED), b"")):
        out = tmp_path / f"page{len(pages)}.html"
        done = subprocess.run(
            [sys.executable, "-m", "etf_otel", "audit", source, "--no-progress", "--html", str(out)],
            input=stdin,
            capture_output=True,
            check=False,
        )
        assert done.returncode == 1, done.stderr
        pages.append(out.read_text(encoding="utf-8").replace(str(SHIPPED), "-"))
    assert pages[0] == pages[1]
    assert pages[0].count('data-role="execution"') > 0  # the timelines are drawn, not empty
