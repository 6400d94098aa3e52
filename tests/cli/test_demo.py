"""``etf-otel demo`` as a new user runs it: a subprocess, no server, real openai client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "etf_otel", "demo", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )


def test_demo_runs_every_case_and_says_so() -> None:
    run = _demo()
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "preserved ids identical (call-read-1, call-save-1); report identical" in out
    for category in (
        "initial_null",
        "id_conflict",
        "empty_after_established",
        "unsupported_id_type",
        "invalid_arguments",
        "duplicate_call_id",
        "truncated_stream",
        "orphaned_result",
        "unanswered_call",
        "duplicate_result",
    ):
        assert category in out
    assert "all cases behaved as the rules say" in out
    assert "expected" not in out.replace("as expected", "")


def test_demo_export_writes_otlp_json_lines(tmp_path: Path) -> None:
    target = tmp_path / "demo.jsonl"
    run = _demo("--export", str(target))
    assert run.returncode == 0, run.stdout + run.stderr
    names: list[str] = []
    ids: set[str] = set()
    metric_names: set[str] = set()
    for line in target.read_text().splitlines():
        document = json.loads(line)
        for resource_spans in document.get("resourceSpans", []):
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    names.append(span["name"].split(" ")[0])
                    for attribute in span.get("attributes", []):
                        if attribute["key"] == "gen_ai.tool.call.id":
                            ids.add(attribute["value"]["stringValue"])
        for resource_metrics in document.get("resourceMetrics", []):
            for scope_metrics in resource_metrics["scopeMetrics"]:
                metric_names.update(metric["name"] for metric in scope_metrics["metrics"])
    assert {"assemble_response", "assemble_tool_call", "execute_tool"} <= set(names)
    assert {"call-read-1", "call-save-1"} <= ids
    assert {"etf.tool_call.fragments", "etf.streams", "etf.integrity.violations", "etf.tool_calls"} <= metric_names
    assert "42" not in ids  # the rejected number id never becomes a span's call id
