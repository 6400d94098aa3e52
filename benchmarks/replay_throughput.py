"""Throughput of ``etf-otel replay`` on one large recorded response.

Generates a JSON-lines recording of ``--fragments`` tool-call fragments (default
100,000): four parallel calls interleaved at random, realistic argument pieces of a few
characters, the id on each call's first fragment only, continuations that omit the id or
carry ``id: null``, then ``finish_reason`` and ``[DONE]``. Then it measures

* end to end: ``python -m etf_otel replay FILE --json`` as a subprocess (wall time,
  including interpreter start-up and writing the JSON report with one diagnostic per
  fragment);
* in-process: reading the recording and assembling it (``read_chunks`` + the reference
  assembler + ``finish()``), and assembling already parsed chunks alone;

and prints fragments per second for each (median of ``--runs`` runs).

Run: ``python benchmarks/replay_throughput.py [--fragments N] [--runs R] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from etf_otel import DONE, ReferenceAssembler, __version__
from etf_otel.recordings import read_chunks
from etf_otel.testing import chat

CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("search_documents", {"query": "", "filters": {"lang": "en", "year": [2021, 2022, 2023]}, "limit": 25}),
    ("read_page", {"url": "", "page": 3, "include_images": False}),
    ("save_report", {"title": "", "sections": [], "format": "markdown"}),
    ("send_email", {"to": ["ops@example.com"], "subject": "", "body": ""}),
)
WORDS = (
    "latency regression observed after deploy of the streaming gateway between regions "
    "tool call identity preserved across null continuations while arguments keep growing "
    "throughput median percentile budget customer report summary appendix table figure"
).split()


def _arguments_text(template: dict[str, Any], length: int, rng: random.Random) -> str:
    """A JSON object of about ``length`` characters, shaped like the tool's real arguments."""
    words: list[str] = []
    size = len(json.dumps(template))
    while size < length:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    payload = dict(template)
    text_field = next(key for key, value in payload.items() if value == "")
    payload[text_field] = " ".join(words)
    return json.dumps(payload)


def _pieces(text: str, count: int, rng: random.Random) -> list[str]:
    """``text`` cut into exactly ``count`` non-empty pieces at random places."""
    cuts = sorted(rng.sample(range(1, len(text)), count - 1))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _chunk(tool_call: dict[str, Any] | None, finish_reason: str | None = None) -> dict[str, Any]:
    tool_calls = None if tool_call is None else [tool_call]
    return chat.chunk(tool_calls=tool_calls, finish_reason=finish_reason, id="chatcmpl-bench", model="bench-model")


def generate(path: Path, fragments: int, *, seed: int = 7) -> None:
    """Write a recording of exactly ``fragments`` fragments to ``path``."""
    rng = random.Random(seed)
    calls = len(CALLS)
    if fragments < calls:
        raise ValueError(f"need at least {calls} fragments")
    counts = [fragments // calls + (1 if k < fragments % calls else 0) for k in range(calls)]
    pieces = [
        _pieces(_arguments_text(template, 5 * count + 16, rng), count, rng)
        for (_, template), count in zip(CALLS, counts, strict=True)
    ]
    order = [k for k, count in enumerate(counts) for _ in range(count)]
    rng.shuffle(order)
    position = [0] * calls
    with path.open("w", encoding="utf-8") as out:
        for k in order:
            n = position[k]
            position[k] += 1
            fragment: dict[str, Any] = {"index": k, "function": {"arguments": pieces[k][n]}}
            if n == 0:
                fragment["id"] = f"call_{k}_{rng.getrandbits(64):016x}"
                fragment["type"] = "function"
                fragment["function"]["name"] = CALLS[k][0]
            elif rng.random() < 0.2:
                fragment["id"] = None  # the null-continuation providers send
            out.write(json.dumps(_chunk(fragment), separators=(",", ":")) + "\n")
        out.write(json.dumps(_chunk(None, "tool_calls"), separators=(",", ":")) + "\n")
        out.write(json.dumps(DONE) + "\n")


def _median_seconds(action: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _end_to_end(path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "etf_otel", "replay", str(path), "--json"],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"replay exited {done.returncode}: {done.stderr.decode(errors='replace').strip()}")


def _read_and_assemble(path: Path) -> None:
    assembler = ReferenceAssembler()
    for chunk in read_chunks(path):
        assembler.feed(chunk)
    assembler.finish()


def _assemble(chunks: list[object]) -> None:
    assembler = ReferenceAssembler()
    for chunk in chunks:
        assembler.feed(chunk)
    assembler.finish()


def _check(path: Path, fragments: int) -> None:
    """The generated recording must assemble to four proposals: otherwise the figures mean nothing."""
    assembler = ReferenceAssembler()
    for chunk in read_chunks(path):
        assembler.feed(chunk)
    result = assembler.finish()
    if result.fragments != fragments or not result.dispatchable or len(result.proposals) != len(CALLS):
        raise SystemExit(f"generated recording did not assemble as expected: {result.categories}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--fragments", type=int, default=100_000, help="fragments in the recording (default 100000)")
    parser.add_argument("--runs", type=int, default=5, help="in-process runs; the median is reported (default 5)")
    parser.add_argument("--cli-runs", type=int, default=3, help="end-to-end subprocess runs (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args(argv)
    if args.fragments < len(CALLS) or args.runs < 1 or args.cli_runs < 1:
        parser.error(f"--fragments must be at least {len(CALLS)}; --runs and --cli-runs at least 1")

    with tempfile.TemporaryDirectory(prefix="etf-otel-bench-") as tmp:
        path = Path(tmp) / "recording.jsonl"
        started = time.perf_counter()
        generate(path, args.fragments)
        generate_s = time.perf_counter() - started
        _check(path, args.fragments)
        size = path.stat().st_size

        end_to_end_s = _median_seconds(lambda: _end_to_end(path), args.cli_runs)
        read_assemble_s = _median_seconds(lambda: _read_and_assemble(path), args.runs)
        chunks = list(read_chunks(path))
        assemble_s = _median_seconds(lambda: _assemble(chunks), args.runs)

    n = args.fragments
    figures = {
        "etf_otel_version": __version__,
        "python": platform.python_version(),
        "fragments": n,
        "calls": len(CALLS),
        "recording_bytes": size,
        "generate_seconds": round(generate_s, 3),
        "end_to_end": {
            "runs": args.cli_runs,
            "median_seconds": round(end_to_end_s, 4),
            "fragments_per_second": round(n / end_to_end_s),
        },
        "read_and_assemble": {
            "runs": args.runs,
            "median_seconds": round(read_assemble_s, 4),
            "fragments_per_second": round(n / read_assemble_s),
        },
        "assemble_only": {
            "runs": args.runs,
            "median_seconds": round(assemble_s, 4),
            "fragments_per_second": round(n / assemble_s),
        },
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"etf-otel {__version__}, Python {figures['python']}: {n:,} fragments, {len(CALLS)} interleaved calls, "
            f"{size / 1e6:.1f} MB recording"
        )
        rows = (
            ("replay FILE --json (subprocess, wall)", "end_to_end"),
            ("read + assemble (in-process)", "read_and_assemble"),
            ("assemble parsed chunks (in-process)", "assemble_only"),
        )
        for label, key in rows:
            figure = figures[key]
            assert isinstance(figure, dict)
            print(
                f"  {label:<40} {figure['median_seconds']:>8.3f} s  "
                f"{figure['fragments_per_second']:>12,} fragments/s  (median of {figure['runs']})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
