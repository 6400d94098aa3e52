"""Long soak: 1,000 concurrent asyncio streams plus 8 threads of synchronous streams, for ``--seconds``.

The rig is the one of ``tests/instrumentation/test_soak.py`` (the short form run by pytest): every stream runs in
its own ``consumer`` span and a validating span processor checks, incrementally, that every span
belongs to its own stream and slot, ends exactly once, and that none is left open. With
``tracemalloc`` (the default) it also checks that the memory allocated by ``etf_otel`` code
returns to its post-warm-up baseline when the streams end. It prints the duration, streams,
spans, fragments, throughput (streams/s, fragments/s) and memory.

Run: ``python benchmarks/soak.py --seconds 300 [--tasks 1000] [--threads 8] [--no-tracemalloc] [--json]``.
Exit code 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.instrumentation.test_soak import Soak, soak_with_memory  # noqa: E402 - after the path set-up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--tasks", type=int, default=1000, help="concurrent asyncio streams")
    parser.add_argument("--threads", type=int, default=8, help="threads of synchronous streams")
    parser.add_argument("--abandon", type=float, default=0.1, help="share of streams abandoned midway")
    parser.add_argument("--no-tracemalloc", dest="tracemalloc", action="store_false", help="throughput only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    soak = Soak(tasks=args.tasks, threads=args.threads, abandon_ratio=args.abandon)
    memory = None
    if args.tracemalloc:
        result, memory = soak_with_memory(soak, args.seconds, per_lane=None, warmup_streams=2000)
    else:
        soak.warm_up(2000)
        result = soak.run(args.seconds)
    validator = result.validator
    ok = not validator.errors and not validator.open and validator.started == validator.ended
    if memory is not None:
        ok = ok and memory.after - memory.baseline < 64 * 1024
    report = {
        "seconds": round(result.seconds, 2),
        "streams": result.streams,
        "async_streams": result.async_streams,
        "sync_streams": result.sync_streams,
        "tasks": args.tasks,
        "peak_async_in_flight": soak.peak_in_flight,
        "threads": args.threads,
        "spans": result.spans,
        "call_spans": result.calls,
        "fragments": result.fragments,
        "streams_per_s": round(result.streams / result.seconds, 1),
        "fragments_per_s": round(result.fragments / result.seconds, 1),
        "open_spans": len(validator.open),
        "errors": validator.errors,
        "tracemalloc": args.tracemalloc,
        "etf_memory_baseline_bytes": memory.baseline if memory else None,
        "etf_memory_after_bytes": memory.after if memory else None,
        "peak_traced_bytes": memory.during_peak_total if memory else None,
        "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "ok": ok,
    }
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:26} {value}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
