"""Section 1 of benchmarks/overhead.py: the real clients end to end, etf-otel beside its floor and its peers.

Every configuration (benchmarks/overhead_worker.py: the bare clients, etf-otel, the floor, the
peer instrumentations) runs in a worker process of its own, started once. For each case (a
protocol and a response shape) the parent runs rounds; in each round every configuration that
instruments the case's API reads one batch of responses, one configuration at a time, in an
order rotated every round, so that drift and the noise of other processes hit all of them
alike. A configuration's figure is the median over the rounds of its batch time divided by the
bare client's batch time of the same round, measured in the same venv (the peers run in their
own venv, beside a bare client of their own), with the 25th-75th percentile of those ratios.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from overhead_streams import PROTOCOL_LABELS, Case, case_body  # type: ignore[import-not-found]
from overhead_worker import CONFIGS, Config  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().with_name("overhead_worker.py")
PEERS_VENV_VARIABLE = "ETF_BENCH_PEERS_VENV"


def peers_venv() -> Path:
    """The peers' venv: ``$ETF_BENCH_PEERS_VENV``, else ``.bench-venv`` in the repository.

    OpenTelemetry google-genai's venv is ``otel-genai`` inside it (scripts/install-bench-peers).
    """
    return Path(os.environ.get(PEERS_VENV_VARIABLE) or ROOT / ".bench-venv")


class Worker:
    """One configuration's worker process and the pipe to it."""

    def __init__(self, config: Config, cases: Sequence[Case]) -> None:
        self.config = config
        self.status = "starting"
        self.error = ""
        self.python = {
            "project": sys.executable,
            "peers": str(peers_venv() / "bin" / "python"),
            "otel_genai": str(peers_venv() / "otel-genai" / "bin" / "python"),
        }[config.venv]
        self.ready: dict[str, Any] = {}
        self._process: subprocess.Popen[str] | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+")
        if not Path(self.python).exists():
            self.status = "not installed"
            self.error = f"no {self.python} (scripts/install-bench-peers installs the peers' venvs)"
            return
        self._process = subprocess.Popen(
            [self.python, str(WORKER), config.key, *(case.key for case in cases)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            cwd=ROOT,
        )

    def _read(self) -> dict[str, Any]:
        assert self._process is not None and self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self._process.wait()
            self._stderr.seek(0)
            tail = self._stderr.read().strip().splitlines()[-3:]
            raise RuntimeError(f"worker {self.config.key} exited {self._process.returncode}: {' | '.join(tail)}")
        message: dict[str, Any] = json.loads(line)
        return message

    def wait_ready(self) -> None:
        if self._process is None:
            return
        try:
            self.ready = self._read()
        except RuntimeError as error:
            self.status, self.error = "failed", str(error)
            return
        if self.ready.get("ok"):
            self.status = "ok"
        else:
            self.status, self.error = self.ready.get("status", "failed"), self.ready.get("error", "")
            self.close()

    def run(self, case: Case, batch: int) -> float:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(json.dumps({"run": case.key, "batch": batch}) + "\n")
        self._process.stdin.flush()
        return float(self._read()["seconds"])

    def close(self) -> None:
        if self._process is not None:
            if self._process.stdin is not None and not self._process.stdin.closed:
                try:
                    self._process.stdin.write("\n")
                    self._process.stdin.close()
                except BrokenPipeError:
                    pass
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        self._stderr.close()


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


@dataclass
class CaseResult:
    """Every configuration's per-round seconds for one case, and what follows from them."""

    case: Case
    events: int
    rounds: int
    batch: int
    seconds: dict[str, list[float]] = field(default_factory=dict)
    spans: dict[str, int] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)

    def ratios(self, key: str) -> list[float] | None:
        bare = CONFIGS[key].bare
        if key not in self.seconds or bare not in self.seconds:
            return None
        return [mine / theirs for mine, theirs in zip(self.seconds[key], self.seconds[bare], strict=True)]

    def figure(self, key: str) -> dict[str, Any]:
        """One configuration's result: its status, and when measured its median ms and ratio (IQR)."""
        out: dict[str, Any] = {"status": self.status.get(key, "not measured")}
        if key in self.seconds:
            out["ms"] = statistics.median(self.seconds[key]) * 1e3
            out["spans_per_response"] = self.spans.get(key)
            ratios = self.ratios(key)
            if ratios is not None and key != CONFIGS[key].bare:
                q1, median, q3 = quartiles(ratios)
                out.update(ratio=median, spread=(q1, q3), against=CONFIGS[key].bare)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "protocol": self.case.protocol,
            "calls": self.case.calls,
            "fragments": self.case.fragments,
            "events": self.events,
            "rounds": self.rounds,
            "batch": self.batch,
            "configurations": {key: self.figure(key) for key in CONFIGS},
        }


def run_case(workers: Sequence[Worker], case: Case, rounds: int, batch: int) -> CaseResult:
    result = CaseResult(case, case_body(case)[1], rounds, batch)
    running = []
    for worker in workers:
        key = worker.config.key
        if case.protocol not in worker.config.protocols:
            result.status[key] = "does not instrument this API"
        elif worker.status != "ok":
            result.status[key] = worker.status
        else:
            running.append(worker)
            result.status[key] = "measured"
            result.seconds[key] = []
            result.spans[key] = worker.ready["spans"][case.key]
    for round_ in range(rounds):
        shift = round_ % len(running)
        for worker in running[shift:] + running[:shift]:
            result.seconds[worker.config.key].append(worker.run(case, batch))
    return result


def bench_clients(
    cases: Sequence[Case], rounds: dict[str, int], batch_seconds: float
) -> tuple[list[CaseResult], dict[str, dict[str, Any]]]:
    """Every case, every configuration; ``rounds`` by shape (``"4x50"``).

    A batch is as many responses as the bare client reads in about ``batch_seconds`` (the best
    of three short probes), the same number for every configuration of the case. Returns
    the results and, per configuration, where it ran and with which versions (or why not).
    """
    workers = [Worker(config, cases) for config in CONFIGS.values()]  # they start side by side
    try:
        for worker in workers:
            worker.wait_ready()
        bare = next(worker for worker in workers if worker.config.key == "bare")
        if bare.status != "ok":
            raise RuntimeError(f"the bare client's worker {bare.status}: {bare.error}")
        results = []
        for case in cases:
            # Calibrated once every worker is up, so that none of them competes with this probe.
            batch = max(1, min(200, round(batch_seconds / min(bare.run(case, 2) for _ in range(3)))))
            results.append(run_case(workers, case, rounds[f"{case.calls}x{case.fragments}"], batch))
    finally:
        for worker in workers:
            worker.close()
    configurations = {
        worker.config.key: {
            "label": worker.config.label,
            "venv": worker.config.venv,
            "python": worker.python,
            "protocols": list(worker.config.protocols),
            "status": worker.status,
            "error": worker.error,
            "versions": worker.ready.get("versions", {}),
        }
        for worker in workers
    }
    return results, configurations


def case_label(case: Case, events: int) -> str:
    if not case.streamed:
        return f"{PROTOCOL_LABELS[case.protocol]} body (not streamed), {case.calls} calls"
    return f"{PROTOCOL_LABELS[case.protocol]} stream, {case.calls} calls x {case.fragments} fragments ({events} events)"
