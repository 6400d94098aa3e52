"""``etf-otel audit -``: a zero-code app's stdout, spans and its own output mixed, audited as it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from etf_otel.testing import QUIRK_STREAMS


def _export(tmp_path: Path) -> list[str]:
    """The OTLP JSON lines ``replay --export`` writes for a clean stream (spans and metrics)."""
    recording = tmp_path / "clean.jsonl"
    recording.write_text("".join(json.dumps(event) + "\n" for event in QUIRK_STREAMS["clean multi-call stream"]))
    export = tmp_path / "export.jsonl"
    subprocess.run(
        [sys.executable, "-m", "etf_otel", "replay", str(recording), "--export", str(export)],
        capture_output=True,
        check=True,
        timeout=120,
    )
    return export.read_text().splitlines()


def _audit_stdin(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "etf_otel", "audit", "-", "--json"],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_mixed_stdout_is_audited_and_what_is_not_a_trace_export_is_counted(tmp_path: Path) -> None:
    lines = _export(tmp_path)
    mixed = "\n".join(["agent: reading source.txt", *lines, "agent: done {not json", ""])
    done = _audit_stdin(mixed)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["input"]["spans"] > 0
    metric_lines = sum(1 for line in lines if '"resourceMetrics"' in line)
    assert report["input"]["skipped_records"] == 2 + metric_lines


def test_stdin_without_any_trace_export_is_refused(tmp_path: Path) -> None:
    done = _audit_stdin("just the app talking\n")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no OTLP trace spans" in done.stderr


def _audit_file(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "etf_otel", "audit", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_same_mixed_stdout_redirected_to_a_file_is_audited_as_on_stdin(tmp_path: Path) -> None:
    """``app > out.jsonl; etf-otel audit out.jsonl`` is ``app | etf-otel audit -``: the same report."""
    lines = _export(tmp_path)
    mixed = "\n".join(["agent: reading source.txt", *lines, "agent: done {not json", ""])
    redirected = tmp_path / "out.jsonl"
    redirected.write_text(mixed)
    from_file, from_stdin = _audit_file(redirected), _audit_stdin(mixed)
    assert (from_file.returncode, from_file.stderr) == (from_stdin.returncode, from_stdin.stderr) == (0, "")
    file_report, stdin_report = json.loads(from_file.stdout), json.loads(from_stdin.stdout)
    assert file_report["input"]["skipped_records"] == stdin_report["input"]["skipped_records"] > 2
    assert file_report["by_kind"] == stdin_report["by_kind"]


CONSOLE_SPAN = """{
    "name": "assemble_tool_call read_page",
    "context": {
        "trace_id": "0x5b8aa5a2d2c872e8321cf37308d69df2",
        "span_id": "0x051581bf3cb55c13",
        "trace_state": "[]"
    },
    "kind": "SpanKind.INTERNAL",
    "parent_id": null,
    "attributes": {}
}
"""


@pytest.mark.parametrize(
    "output",
    [CONSOLE_SPAN + CONSOLE_SPAN, "tool call read_page id=call_1\n" + CONSOLE_SPAN + "done\n"],
    ids=["spans-only", "app-output-between"],
)
@pytest.mark.parametrize("where", ["file", "stdin"])
def test_the_console_exporters_output_is_named_with_what_to_use_instead(
    tmp_path: Path, output: str, where: str
) -> None:
    path = tmp_path / "console.txt"
    path.write_text(output)
    done = _audit_file(path) if where == "file" else _audit_stdin(output)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1, done.stderr
    assert "console exporter" in done.stderr and "OTEL_TRACES_EXPORTER=otlp_json_file" in done.stderr


@pytest.mark.parametrize("where", ["file", "stdin"])
def test_an_app_that_prints_an_opening_brace_first_is_still_read_as_lines(tmp_path: Path, where: str) -> None:
    """A first line that opens JSON which never decodes is the app's output, not a pretty-printed document."""
    lines = _export(tmp_path)
    mixed = "\n".join(["{", "  config: loaded", *lines, ""])
    path = tmp_path / "out.jsonl"
    path.write_text(mixed)
    done = _audit_file(path) if where == "file" else _audit_stdin(mixed)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert json.loads(done.stdout)["input"]["spans"] > 0
