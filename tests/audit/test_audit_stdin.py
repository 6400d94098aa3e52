"""``etf-otel audit -``: a zero-code app's stdout, spans and its own output mixed, audited as it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
