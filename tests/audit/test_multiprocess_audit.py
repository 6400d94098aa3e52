"""The audit over traces from two real OS processes: an agent and a separate tool host, each
with its own exporter, sending to one OTLP receiver, the trace context passed between them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from etf_otel.cli._audit import run_audit

from ..support.otlp_receiver import OtlpReceiver

PROCESSES = Path(__file__).resolve().parents[1] / "support" / "processes"
RECORDINGS = Path(__file__).resolve().parents[2] / "examples" / "recordings"


def _run(script: str, *args: str, stdin: str = "") -> str:
    done = subprocess.run(
        [sys.executable, str(PROCESSES / script), *args], input=stdin, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _audit(path: Path, capsys: Any) -> tuple[int, dict[str, Any]]:
    code = run_audit([str(path)], json_output=True, progress=False)
    return code, json.loads(capsys.readouterr().out)


def test_agent_and_tool_host_processes_are_audited_as_one_trace(tmp_path: Path, capsys: Any) -> None:
    received = tmp_path / "received.jsonl"
    with OtlpReceiver(json_lines_path=received) as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        proposals = _run("agent.py", endpoint, str(RECORDINGS / "case-control.jsonl"))
        assert [json.loads(line)["id"] for line in proposals.splitlines()] == ["call-a"]
        _run("tool_host.py", endpoint, "call-a", stdin=proposals)
    code, report = _audit(received, capsys)
    assert code == 0, report
    services = {
        attribute["value"]["stringValue"]
        for line in received.read_text().splitlines()
        for resource_spans in json.loads(line)["resourceSpans"]
        for attribute in resource_spans["resource"]["attributes"]
        if attribute["key"] == "service.name"
    }
    assert services == {"agent", "tool-host"}
    assert report["input"]["traces"] == 1


def test_findings_across_processes(tmp_path: Path, capsys: Any) -> None:
    received = tmp_path / "received.jsonl"
    with OtlpReceiver(json_lines_path=received) as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        proposals = _run(
            "agent.py", endpoint, str(RECORDINGS / "case-control.jsonl"), str(RECORDINGS / "case-target.jsonl")
        )
        # Both turns propose call-a: the host runs the first twice and something nobody proposed.
        first_turn = proposals.splitlines()[0] + "\n"
        _run("tool_host.py", endpoint, "call-a", "call-a", "call-zzz", stdin=first_turn)
    code, report = _audit(received, capsys)
    assert code == 1
    counts = {entry["kind"]: entry["count"] for entry in report["by_kind"]}
    # The second turn's call-a: never executed, and no later request settled it either way.
    assert counts == {"duplicate_execution": 1, "orphaned_execution": 1, "unjudged": 1}, report["by_kind"]
