"""What one chunk costs on the wrapped-assembler path against the stream path (frames, and instructions).

Three ways of handing the same Chat Completions chunks (plain dicts, one call's argument
fragments) to the identity rules:

* ``bare``: a :class:`~etf_otel.ReferenceAssembler` fed by hand, uninstrumented: what an
  application's own assembler costs (the reference assembler stands in for it).
* ``assembler``: the same assembler wrapped by ``Instrumentation.assembler`` and fed through
  the proxy (``observed.feed(chunk)``): the application's assembler, the proxy's ``feed`` and
  the rules' own.
* ``stream``: the chunks read through ``Instrumentation.stream`` (the proxy's generator, then
  the rules' ``feed``).

Frames are Python ``call`` events seen by ``sys.setprofile`` per chunk. With ``--instructions``
each way also runs in a process of its own under Valgrind's ``callgrind``, counting only the
instructions of a loop of ``--chunks`` feeds (``functools.reduce``, as
``overhead_instructions.py`` does). What etf-otel adds per chunk is ``assembler`` minus ``bare``
on the wrapped path and ``stream`` minus the loop (``loop``: the same chunks, nothing done) on
the stream path.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

WAYS = ("loop", "bare", "assembler", "stream")
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def _chunks(count: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from etf_otel.testing.chat import chunk, fragment

    return chunk(fragment(0, "call_1", "get_weather", '{"a":')), [
        chunk(fragment(0, arguments='"x",')) for _ in range(count)
    ]


def _way(way: str, count: int) -> tuple[Callable[[Any], object], Iterator[Any]]:
    """``(step, chunks)``: the loop calls ``step`` on each of ``chunks`` (the first chunk already fed)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    from etf_otel import ReferenceAssembler
    from etf_otel.instrumentation import Instrumentation

    first, chunks = _chunks(count)
    etf = Instrumentation(TracerProvider(), MeterProvider())
    if way == "loop":
        return (lambda chunk: None), iter(chunks)
    if way == "stream":
        observed = etf.stream(iter([first, *chunks]))
        stream = iter(observed)
        next(stream)
        kept = (observed, stream)  # the response goes on after the measured chunks: not finished in the loop
        return (lambda chunk, kept=kept: None), itertools.islice(stream, count)
    assembler = ReferenceAssembler() if way == "bare" else etf.assembler(ReferenceAssembler())
    assembler.feed(first)
    return (lambda chunk: assembler.feed(chunk)), iter(chunks)


def frames(way: str, count: int) -> float:
    step, chunks = _way(way, count)
    calls = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(profile)
    try:
        for chunk in chunks:
            step(chunk)
    finally:
        sys.setprofile(None)
    return (calls - count) / count  # the loop's own lambda excluded


def child(way: str, count: int) -> None:
    step, chunks = _way(way, count)
    functools.reduce(lambda _, chunk: step(chunk), chunks, None)  # the one call callgrind counts


def instructions(way: str, count: int) -> int:
    command = [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        "--toggle-collect=functools_reduce",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        way,
        "--chunks",
        str(count),
    ]
    completed = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, check=False
    )
    found = _COLLECTED.search(completed.stderr)
    if completed.returncode != 0 or found is None:
        raise RuntimeError(f"{way}: {completed.stderr.strip()[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--instructions", action="store_true", help="also count instructions under callgrind")
    parser.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    options = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if options.child:
        child(options.child, options.chunks)
        return
    print(f"{'way':10} {'frames/chunk':>12}" + (f" {'instructions/chunk':>19}" if options.instructions else ""))
    for way in WAYS:
        line = f"{way:10} {frames(way, options.chunks):12.2f}"
        if options.instructions:
            line += f" {instructions(way, options.chunks) / options.chunks:19,.0f}"
        print(line)


if __name__ == "__main__":
    main()
