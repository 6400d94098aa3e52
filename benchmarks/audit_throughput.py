"""Throughput and memory of ``etf-otel audit`` on a 1,000,000-span OTLP JSON export.

Generates, in a temporary directory, OTLP JSON lines in the span schema of etf-otel, as
two services would export them with a ``BatchSpanProcessor`` (512 spans per line):

* ``agent.jsonl``: per trace a ``turn`` span, an ``assemble_response`` span and an
  ``assemble_tool_call`` span (child of the response);
* ``tool-host.jsonl``: per trace one ``execute_tool`` span (another service, so the spans
  of each trace are spread over two files, far apart).

One trace in 1,000 executes an unknown id (``orphaned_execution``), one in 1,000 executes
twice (``duplicate_execution``), one in 1,000 is never executed (``unanswered_call``).
Then it runs ``run_audit`` in a subprocess and prints spans per second, wall time, and
the subprocess's peak resident memory (``ru_maxrss``) against the input's size.

Run: ``python benchmarks/audit_throughput.py [--spans N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BATCH = 512
SPANS_PER_TRACE = 4

_CHILD = """
import json, resource, sys, time
from etf_otel.cli._audit import run_audit
started = time.perf_counter()
code = run_audit(sys.argv[1:], json_output=True, progress=False)
elapsed = time.perf_counter() - started
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"exit": code, "seconds": elapsed, "peak_rss_kib": peak_kib}), file=sys.stderr)
"""


def _kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, list):
        return {"key": key, "value": {"arrayValue": {"values": [{"stringValue": item} for item in value]}}}
    return {"key": key, "value": {"stringValue": value}}


def _span(
    trace_id: str,
    span_id: str,
    parent: str | None,
    name: str,
    start: int,
    attributes: dict[str, Any],
    links: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "flags": 256,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1_000_000),
        "attributes": [_kv(key, value) for key, value in attributes.items()],
        "status": {},
    }
    if parent is not None:
        span["parentSpanId"] = parent
    if links:
        span["links"] = links
    return span


def _line(service: str, spans: list[dict[str, Any]]) -> str:
    request = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        _kv("service.name", service),
                        _kv("telemetry.sdk.language", "python"),
                        _kv("telemetry.sdk.name", "opentelemetry"),
                    ]
                },
                "scopeSpans": [{"scope": {"name": "etf_otel", "version": "0.1.0"}, "spans": spans}],
            }
        ]
    }
    return json.dumps(request, separators=(",", ":")) + "\n"


def _traces(count: int, rng: random.Random) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(agent spans, host spans) of each trace."""
    now = 1_700_000_000_000_000_000
    for number in range(count):
        trace_id = f"{rng.getrandbits(128):032x}"
        turn, response, call, execute = (f"{rng.getrandbits(64):016x}" for _ in range(4))
        start = now + number * 10_000_000
        call_id = f"call_{number:08d}"
        agent = [
            _span(
                trace_id,
                call,
                response,
                "assemble_tool_call read_page",
                start + 100,
                {
                    "etf.choice.index": 0,
                    "etf.tool_call.index": 0,
                    "etf.tool_call.fragments": 7,
                    "etf.tool_call.verdict": "proposed",
                    "gen_ai.tool.name": "read_page",
                    "gen_ai.tool.call.id": call_id,
                    "etf.id.kept_null": 6,
                },
            ),
            _span(
                trace_id,
                response,
                turn,
                "assemble_response",
                start + 50,
                {
                    "etf.stream.state": "completed",
                    "gen_ai.response.finish_reasons": ["tool_calls"],
                    "etf.stream.slots": 1,
                    "etf.stream.fragments": 7,
                    "etf.stream.dispatchable": True,
                },
            ),
            _span(trace_id, turn, None, "turn", start, {}),
        ]
        kind = number % 1000
        executed_id = "call_unknown" if kind == 1 else call_id
        host: list[dict[str, Any]] = []
        if kind != 3:
            for _ in range(2 if kind == 2 else 1):
                host.append(
                    _span(
                        trace_id,
                        execute if not host else f"{rng.getrandbits(64):016x}",
                        turn,
                        "execute_tool read_page",
                        start + 5_000_000,
                        {
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.type": "function",
                            "gen_ai.tool.name": "read_page",
                            "gen_ai.tool.call.id": executed_id,
                        },
                    )
                )
        yield agent, host


def generate(directory: Path, spans: int, seed: int = 7) -> tuple[list[Path], int]:
    rng = random.Random(seed)
    agent_path, host_path = directory / "agent.jsonl", directory / "tool-host.jsonl"
    written = 0
    with agent_path.open("w") as agent_out, host_path.open("w") as host_out:
        agent_batch: list[dict[str, Any]] = []
        host_batch: list[dict[str, Any]] = []
        for agent, host in _traces(spans // SPANS_PER_TRACE, rng):
            agent_batch.extend(agent)
            host_batch.extend(host)
            written += len(agent) + len(host)
            if len(agent_batch) >= BATCH:
                agent_out.write(_line("agent", agent_batch))
                agent_batch = []
            if len(host_batch) >= BATCH:
                host_out.write(_line("tool-host", host_batch))
                host_batch = []
        if agent_batch:
            agent_out.write(_line("agent", agent_batch))
        if host_batch:
            host_out.write(_line("tool-host", host_batch))
    return [agent_path, host_path], written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000, help="spans to generate (default 1,000,000)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="etf-otel-audit-bench-") as tmp:
        started = time.perf_counter()
        paths, spans = generate(Path(tmp), args.spans)
        generated = time.perf_counter() - started
        size = sum(path.stat().st_size for path in paths)
        root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        started = time.perf_counter()
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, *map(str, paths)], capture_output=True, text=True, env=env, check=False
        )
        wall = time.perf_counter() - started
        if child.returncode != 0:
            print(child.stderr, file=sys.stderr)
            return 2
        measured = json.loads(child.stderr.strip().splitlines()[-1])
        report = json.loads(child.stdout)
        figures = {
            "spans": spans,
            "input_mib": round(size / 2**20, 1),
            "generate_seconds": round(generated, 1),
            "audit_seconds": round(measured["seconds"], 2),
            "wall_seconds_with_startup": round(wall, 2),
            "spans_per_second": round(spans / measured["seconds"]),
            "peak_rss_mib": round(measured["peak_rss_kib"] / 1024, 1),
            "exit": measured["exit"],
            "findings": {entry["kind"]: entry["count"] for entry in report["by_kind"]},
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "self_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>28}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
