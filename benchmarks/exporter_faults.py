"""Consumption latency of an instrumented application while the collector misbehaves.

For each transport (gRPC, HTTP) and each collector condition (``none``: a healthy OTLP
receiver; ``down``: connection refused; ``blackhole``: accepts and never answers; ``error``:
503 / ``UNAVAILABLE``; ``raising``: exporters that raise), it builds the real pipeline of
``tests/instrumentation/test_exporter_faults.py`` (``BatchSpanProcessor`` + official OTLP exporter with a
0.5 s timeout, ``PeriodicExportingMetricReader``), consumes ``--streams`` instrumented
responses (3 calls each, executed through an instrumented host), and records the
consumption time; ``--runs`` runs per case, round robin across cases (so load drift hits every
case alike), the median is compared with the median of the no-fault run of the same transport.
Each collector runs in its own process, as a remote collector would: its CPU is not the
application's. It also reports ``shutdown()`` time and what the SDK
and our counting exporter say about spans that could not be exported.

Run: ``python benchmarks/exporter_faults.py [--streams 2000] [--runs 7] [--json]``.
Exit code 1 when a fault case is more than ``--tolerance`` (default 10 %) slower than no fault.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "true")

from tests.instrumentation.test_exporter_faults import (  # noqa: E402 - after the path and environment set-up
    FAULTS,
    TRANSPORTS,
    Collector,
    build_pipeline,
    run_application,
    start_collector,
)


def _serve(transport: str, fault: str, connection: Any) -> None:
    """Child process: run one collector condition until told to stop (the collector is remote)."""
    collector = start_collector(transport, fault)
    connection.send((collector.grpc_endpoint, collector.http_endpoint))
    connection.recv()
    collector.close()


class RemoteCollector:
    def __init__(self, transport: str, fault: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(transport, fault, child), daemon=True)
        self._process.start()
        grpc_endpoint, http_endpoint = self._connection.recv()
        self.collector = Collector(transport, fault, grpc_endpoint, http_endpoint)

    def close(self) -> None:
        self._connection.send("stop")
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()


def one_run(collector: Collector, streams: int, offset: int, queue: int, interval_ms: float) -> dict[str, Any]:
    pipeline = build_pipeline(collector, max_queue_size=queue, metric_interval_ms=interval_ms)
    try:
        elapsed, _ = run_application(pipeline.instrumentation(), streams, offset=offset)
    finally:
        shutdown = pipeline.shutdown()
    return {
        "elapsed": elapsed,
        "shutdown": shutdown,
        "spans": pipeline.ended[0],
        "exported": pipeline.spans.exported,
        "failed": pipeline.spans.failed,
        "raised": pipeline.spans.raised,
        "sdk": pipeline.sdk_counts(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--queue", type=int, default=2048, help="BatchSpanProcessor max_queue_size")
    parser.add_argument("--metric-interval-ms", type=float, default=1000)
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    cases = [(t, f) for t in TRANSPORTS for f in FAULTS if not (f == "raising" and t == "http")]
    remotes = {case: RemoteCollector(*case) for case in cases}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {case: [] for case in cases}
    try:
        for case in cases:  # warm-up: imports, channels, first connections
            one_run(remotes[case].collector, 50, 10**8, args.queue, args.metric_interval_ms)
        for run in range(args.runs):  # round robin: load drift hits every case alike
            for case in cases:
                runs[case].append(
                    one_run(
                        remotes[case].collector, args.streams, run * args.streams, args.queue, args.metric_interval_ms
                    )
                )
    finally:
        for remote in remotes.values():
            remote.close()

    results: list[dict[str, Any]] = []
    for transport, fault in cases:
        measured = runs[transport, fault]
        baseline = statistics.median(r["elapsed"] for r in runs[transport, "none"])
        median = statistics.median(r["elapsed"] for r in measured)
        result = {
            "transport": transport,
            "fault": fault,
            "median_s": median,
            "relative": median / baseline,
            "runs_s": [r["elapsed"] for r in measured],
            "shutdown_median_s": statistics.median(r["shutdown"] for r in measured),
            "shutdown_max_s": max(r["shutdown"] for r in measured),
            **{key: measured[-1][key] for key in ("spans", "exported", "failed", "raised", "sdk")},
        }
        results.append(result)
        if not args.json:
            print(
                f"{transport:4} {fault:9} median {median * 1000:8.1f} ms "
                f"({result['relative'] * 100:6.1f} % of no fault)"
                f"  shutdown median {result['shutdown_median_s']:.2f}s max {result['shutdown_max_s']:.2f}s  "
                f"last run: spans {result['spans']} exported {result['exported']} failed {result['failed']} "
                f"raised {result['raised']} sdk {result['sdk']}",
                flush=True,
            )
    slow = [r for r in results if r["fault"] != "none" and r["relative"] > 1 + args.tolerance]
    if args.json:
        print(json.dumps({"streams": args.streams, "runs": args.runs, "results": results, "slow": len(slow)}))
    elif slow:
        print(f"{len(slow)} case(s) slower than no fault by more than {args.tolerance:.0%}")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
