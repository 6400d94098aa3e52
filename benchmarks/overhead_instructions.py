"""Instructions per response, counted by Valgrind: the noise-free companion of overhead.py (issue 20).

overhead.py's clients section reads wall-clock ratios, which move on this machine by one or two
hundredths from one run to the next: as much as the margins issue 20 asks for (0.01 and 0.025
above the floor). The number of instructions the CPU executes for a response moves far less:
Valgrind's ``callgrind`` counts them (two runs of the same code agreed within 0.05-0.17 % of the
bare client's count on the ``openai`` cases and within 0.7-1.0 % on the ``anthropic`` ones). This script runs the
configurations of overhead.py that live in the project's venv (the bare client, the floor, the
floor plus identity tracking per index, etf-otel; benchmarks/overhead_worker.py builds them) on
its cases, each in a process of its own under ``callgrind``: the process instruments once, reads
three responses to warm up, then ``N`` more inside one call of ``functools.reduce``, and only that
call is counted (``--toggle-collect``): no start-up, no imports. What the batch span processor's
own thread does (exporting, here to nowhere) is not counted; what a span costs the application's
thread (creating, ending, queueing it) is.

What a count does not see: cache and branch-predictor misses. Code that runs once per response
inside the client's loop runs colder than in a tight loop, so the wall-clock share of the same
instructions is larger (about 1.5-3x here); the ratios below are a lower bound of the wall-clock
ones, and an instruction saved is a change that is real whatever the noise.

Cases (``--cases``, benchmarks/overhead_streams.py builds them): for each of the four protocols
(``chat``, ``responses``, ``anthropic``, ``gemini``) a stream of 4 calls x 50 argument fragments
(``gemini:4:50``) and one of 2 calls x 5 (``gemini:2:5``), both through the client's streaming
call; and a whole body with 2 calls read with the non-streaming call (``gemini:2:0``: 0 fragments
means not streamed), where the floor emits its spans when the call returns and the tracker reads
each call's id and arguments once.

Run: ``python benchmarks/overhead_instructions.py [--quick] [--json] [--jobs N] [--cases ...]``
(needs Debian's ``valgrind``; ``scripts/test`` installs it). About 20 minutes on 2 cores;
``--quick`` counts one case of two configurations with a few responses (a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from overhead_streams import ALL_PROTOCOLS  # type: ignore[import-not-found]  # noqa: E402

CONFIGURATIONS = ("bare", "floor", "tracker", "etf_otel")
LABELS = {
    "bare": "bare client, instructions per response",
    "floor": "floor: etf-otel's spans, only",
    "tracker": "floor + identity tracking per index",
    "etf_otel": "etf-otel",
}
STREAMED = tuple(f"{protocol}:{shape}" for protocol in ALL_PROTOCOLS for shape in ("4:50", "2:5"))
BODIES = tuple(f"{protocol}:2:0" for protocol in ALL_PROTOCOLS)
"""A whole body with 2 calls, read with the non-streaming call (overhead_streams.py: 0 fragments)."""
CASES = STREAMED + BODIES
RESPONSES = {"4x50": 10, "2x5": 30, "2x0": 30}
MARGIN_OVER_FLOOR = {"4x50": 0.01, "2x5": 0.025, "2x0": 0.025}
"""Issue 31's margins; it names none for bodies: a 2-call body is held to the 2-call stream's."""
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
_COUNTED_FUNCTION = "functools_reduce"
"""CPython's C function behind ``functools.reduce``: callgrind counts only while it runs."""


def child(configuration: str, case_key: str, responses: int) -> None:
    """One process: instrument, warm up, then read ``responses`` responses inside ``functools.reduce``."""
    import functools
    import logging

    from overhead_streams import Case, consumer  # type: ignore[import-not-found]
    from overhead_worker import INSTRUMENT, Providers  # type: ignore[import-not-found]

    logging.getLogger("opentelemetry").setLevel(logging.ERROR)
    protocol, calls, fragments = case_key.split(":")
    case = Case(protocol, int(calls), int(fragments))
    providers = Providers.create()
    instrumented = INSTRUMENT[configuration](providers, [case])
    getattr(instrumented, "select", lambda key: None)(case.key)
    read = consumer(case)
    for _ in range(3):
        read()
    functools.reduce(lambda _, __: read(), range(responses), None)  # the one call callgrind counts


def instructions(configuration: str, case_key: str, responses: int) -> int:
    """The instructions ``responses`` responses execute in a child process, counted by callgrind."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        f"--toggle-collect={_COUNTED_FUNCTION}",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        configuration,
        case_key,
        str(responses),
    ]
    completed = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, check=False
    )
    found = _COLLECTED.search(completed.stderr)
    if completed.returncode != 0 or found is None or int(found.group(1)) == 0:
        raise RuntimeError(f"{configuration} {case_key}: {completed.stderr.strip()[-2000:]}")
    return int(found.group(1))


def measure(cases: list[str], configurations: tuple[str, ...], quick: bool, jobs: int) -> dict[str, Any]:
    runs = []
    for case_key in cases:
        shape = "x".join(case_key.split(":")[1:])
        count = 3 if quick else RESPONSES[shape]
        runs.extend((configuration, case_key, count) for configuration in configurations)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        counted = dict(zip(runs, pool.map(lambda run: instructions(*run), runs), strict=True))
    results: dict[str, Any] = {}
    for case_key in cases:
        shape = "x".join(case_key.split(":")[1:])
        count = 3 if quick else RESPONSES[shape]
        per_response = {
            configuration: counted[configuration, case_key, count] / count for configuration in configurations
        }
        bare = per_response["bare"]
        ratios = {configuration: value / bare for configuration, value in per_response.items()}
        key = case_key.split(":")[0] + "_" + shape
        results[key] = {
            "responses": count,
            "instructions_per_response": per_response,
            "ratios": ratios,
            "margin_over_floor": MARGIN_OVER_FLOOR[shape],
        }
        if "floor" in ratios:
            results[key]["above_floor"] = {
                configuration: ratios[configuration] - ratios["floor"]
                for configuration in configurations
                if configuration not in ("bare", "floor")
            }
    return results


def print_table(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="instructions per response (callgrind): instrumented / bare client")
    table.add_column("configuration")
    for key in results:
        table.add_column(key.replace("_2x0", " body 2") if key.endswith("_2x0") else key, justify="right")
    configurations = list(next(iter(results.values()))["ratios"])
    for configuration in configurations:
        cells = []
        for result in results.values():
            if configuration == "bare":
                cells.append(f"{result['instructions_per_response']['bare'] / 1e6:.2f} M")
            else:
                cells.append(f"{result['ratios'][configuration]:.3f}x")
        table.add_row(LABELS[configuration], *cells)
    for configuration in ("tracker", "etf_otel"):
        if configuration in configurations and "floor" in configurations:
            table.add_row(
                f"{LABELS[configuration]}: above the floor",
                *(f"+{result['above_floor'][configuration]:.3f}" for result in results.values()),
            )
    if "floor" in configurations:
        table.add_row("issue 31's margin over the floor", *(f"{r['margin_over_floor']}" for r in results.values()))
    console = Console()
    (console if console.is_terminal else Console(width=160)).print(table)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2], int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run: one case, two configurations")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="valgrind processes at once")
    parser.add_argument(
        "--configurations",
        default=",".join(CONFIGURATIONS),
        help=f"comma-separated, bare included (default: all of {', '.join(CONFIGURATIONS)})",
    )
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated (default: all of {', '.join(CASES)})"
    )
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    if set(cases) - set(CASES):
        parser.error(f"--cases: any of {', '.join(CASES)}")
    chosen = tuple(name for name in CONFIGURATIONS if name in args.configurations.split(","))
    if "bare" not in chosen or set(args.configurations.split(",")) - set(CONFIGURATIONS):
        parser.error(f"--configurations: bare and any of {', '.join(CONFIGURATIONS)}")
    if shutil.which("valgrind") is None:
        print("overhead_instructions: valgrind not found (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    if args.quick:
        results = measure(["anthropic:2:5"], ("bare", "etf_otel"), quick=True, jobs=args.jobs)
    else:
        results = measure(cases, chosen, quick=False, jobs=args.jobs)
    if args.json:
        print(json.dumps({"mode": "quick" if args.quick else "full", "cases": results}, indent=2))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
