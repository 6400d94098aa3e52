"""Instructions per response, counted by Valgrind: the noise-free companion of overhead.py (issue 20).

overhead.py's clients section reads wall-clock ratios, which move on this machine by one or two
hundredths from one run to the next: as much as the margins issue 20 asks for (0.01 and 0.025
above the floor). The number of instructions the CPU executes for a response moves far less:
Valgrind's ``callgrind`` counts them (two runs of the same code agreed within 0.05-0.17 % of the
bare client's count on the ``openai`` cases and within 0.7-1.0 % on the ``anthropic`` ones). This script runs the
configurations of overhead.py that live in the project's venv (the bare client, the floor, the
floor plus identity tracking per index, etf-otel; benchmarks/overhead_worker.py builds them) on
its cases, one process per configuration under ``callgrind`` (the configurations run side by side,
``--jobs`` at once): the process instruments once for every case, then per case reads three
responses to warm up and ``N`` more inside one call of ``functools.reduce``; only those calls are
counted (``--toggle-collect``), and callgrind dumps a count after each (``--dump-after``): no
start-up, no imports, paid once per configuration rather than once per case. With
``--configurations ...,etf_otel_compiled --compiled DIR`` it also counts etf-otel's optional
compiled build, whose extension modules sit in the source tree ``DIR``. What the batch span processor's
own thread does (exporting, here to nowhere) is not counted; what a span costs the application's
thread (creating, ending, queueing it) is.

What a count does not see: cache and branch-predictor misses. Code that runs once per response
inside the client's loop runs colder than in a tight loop, so the wall-clock share of the same
instructions is larger (about 1.5-3x here); the ratios below are a lower bound of the wall-clock
ones, and an instruction saved is a change that is real whatever the noise.

Cases (``--cases``, benchmarks/overhead_streams.py builds them): for each of the five protocols
(``chat``, ``responses``, ``anthropic``, ``gemini``, ``bedrock``: Bedrock Converse through a real
``boto3`` client answered in memory by a botocore ``before-send`` handler) a stream of 4 calls x 50 argument fragments
(``gemini:4:50``) and one of 2 calls x 5 (``gemini:2:5``), both through the client's streaming
call; and a whole body with 2 calls read with the non-streaming call (``gemini:2:0``: 0 fragments
means not streamed), where the floor emits its spans when the call returns and the tracker reads
each call's id and arguments once.

Run: ``python benchmarks/overhead_instructions.py [--quick] [--json] [--jobs N] [--cases ...]``
(needs Debian's ``valgrind``; ``scripts/test`` installs it). About 10 minutes on 2 idle cores;
``--quick`` counts two cases of two configurations with a few responses (a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from overhead_streams import PROJECT_PROTOCOLS  # type: ignore[import-not-found]  # noqa: E402

CONFIGURATIONS = ("bare", "floor", "tracker", "etf_otel", "etf_otel_compiled")
LABELS = {
    "bare": "bare client, instructions per response",
    "floor": "floor: etf-otel's spans, only",
    "tracker": "floor + identity tracking per index",
    "etf_otel": "etf-otel",
    "etf_otel_compiled": "etf-otel, compiled build",
}
ETF_OTEL = ("etf_otel", "etf_otel_compiled")
STREAMED = tuple(f"{protocol}:{shape}" for protocol in PROJECT_PROTOCOLS for shape in ("4:50", "2:5"))
BODIES = tuple(f"{protocol}:2:0" for protocol in PROJECT_PROTOCOLS)
"""A whole body with 2 calls, read with the non-streaming call (overhead_streams.py: 0 fragments)."""
CASES = STREAMED + BODIES
RESPONSES = {"4x50": 10, "2x5": 30, "2x0": 30}
MARGIN_OVER_FLOOR = {"4x50": 0.01, "2x5": 0.025, "2x0": 0.025}
"""Issue 31's margins; it names none for bodies: a 2-call body is held to the 2-call stream's."""
_TOTALS = re.compile(r"^totals:\s*(\d+)", re.MULTILINE)
_COUNTED_FUNCTION = "functools_reduce"
"""CPython's C function behind ``functools.reduce``: callgrind counts only while it runs."""


def child(configuration: str, runs: list[tuple[str, int]]) -> None:
    """One process: instrument once for every case, then per case warm up and read its responses inside one
    ``functools.reduce`` (callgrind dumps a count after each)."""
    import functools
    import logging

    from overhead_streams import Case, consumer  # type: ignore[import-not-found]
    from overhead_worker import INSTRUMENT, Providers  # type: ignore[import-not-found]

    logging.getLogger("opentelemetry").setLevel(logging.ERROR)
    if configuration == "etf_otel_compiled":
        import etf_otel.core

        if not getattr(etf_otel.core, "COMPILED", False):
            raise SystemExit(f"etf_otel_compiled: {etf_otel.core.__file__} is not the compiled build")
    cases = [
        Case(protocol, int(calls), int(fragments)) for protocol, calls, fragments in (key.split(":") for key, _ in runs)
    ]
    providers = Providers.create()
    instrumented = INSTRUMENT["etf_otel" if configuration == "etf_otel_compiled" else configuration](providers, cases)
    select = getattr(instrumented, "select", lambda key: None)
    for case, (_, responses) in zip(cases, runs, strict=True):
        select(case.key)
        read = consumer(case)
        for _ in range(3):
            read()
        functools.reduce(lambda _, __: read(), range(responses), None)  # counted, then dumped


def instructions(configuration: str, runs: list[tuple[str, int]], compiled: str | None) -> dict[str, int]:
    """The instructions each case's responses execute in one child process of ``configuration``, counted by
    callgrind: one process per configuration (start-up and imports once), one dump per case."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        f"--toggle-collect={_COUNTED_FUNCTION}",
        f"--dump-after={_COUNTED_FUNCTION}",
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        configuration,
        *(f"{case_key}={responses}" for case_key, responses in runs),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if configuration == "etf_otel_compiled":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [compiled or "", env.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "callgrind.out"
        command.insert(5, f"--callgrind-out-file={out}")
        completed = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        dumps = sorted(Path(directory).glob("callgrind.out.*"), key=lambda path: int(path.suffix[1:]))
        counts = [int(found.group(1)) for dump in dumps if (found := _TOTALS.search(dump.read_text()))]
    if completed.returncode != 0 or len(counts) != len(runs) or 0 in counts:
        raise RuntimeError(
            f"{configuration}: {len(counts)} counts for {len(runs)} cases: {completed.stderr.strip()[-2000:]}"
        )
    return {case_key: count for (case_key, _), count in zip(runs, counts, strict=True)}


def measure(
    cases: list[str], configurations: tuple[str, ...], quick: bool, jobs: int, compiled: str | None = None
) -> dict[str, Any]:
    runs = []
    for case_key in cases:
        shape = "x".join(case_key.split(":")[1:])
        runs.append((case_key, 3 if quick else RESPONSES[shape]))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        by_configuration = dict(
            zip(configurations, pool.map(lambda name: instructions(name, runs, compiled), configurations), strict=True)
        )
    counted = {
        (configuration, case_key, count): by_configuration[configuration][case_key]
        for configuration in configurations
        for case_key, count in runs
    }
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
        if "tracker" in ratios:  # issue 31's targets: within the margin of this line
            results[key]["above_tracker"] = {
                configuration: ratios[configuration] - ratios["tracker"]
                for configuration in ETF_OTEL
                if configuration in ratios
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
    for configuration in ("tracker", *ETF_OTEL):
        if configuration in configurations and "floor" in configurations:
            table.add_row(
                f"{LABELS[configuration]}: above the floor",
                *(f"{result['above_floor'][configuration]:+.3f}" for result in results.values()),
            )
    for configuration in ETF_OTEL:
        if configuration in configurations and "tracker" in configurations:
            table.add_row(
                f"{LABELS[configuration]}: above the tracking line",
                *(f"{result['above_tracker'][configuration]:+.3f}" for result in results.values()),
            )
    if "tracker" in configurations:
        table.add_row(
            "issue 31's margin over the tracking line", *(f"{r['margin_over_floor']}" for r in results.values())
        )
    console = Console()
    (console if console.is_terminal else Console(width=160)).print(table)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        child(argv[1], [(key, int(count)) for key, count in (run.split("=") for run in argv[2:])])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run: two cases, two configurations")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="valgrind processes at once")
    parser.add_argument(
        "--configurations",
        default=",".join(CONFIGURATIONS[:-1]),
        help=f"comma-separated, bare included, any of {', '.join(CONFIGURATIONS)} (default: all but the last)",
    )
    parser.add_argument(
        "--compiled",
        metavar="DIR",
        help="etf_otel_compiled: the source tree whose core/ and protocols/ hold the compiled build's extension "
        "modules (scripts/build-compiled-tree DIR makes one)",
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
        results = measure(["anthropic:2:5", "anthropic:2:0"], ("bare", "etf_otel"), quick=True, jobs=args.jobs)
    else:
        if "etf_otel_compiled" in chosen and not args.compiled:
            parser.error("--configurations etf_otel_compiled needs --compiled DIR")
        results = measure(cases, chosen, quick=False, jobs=args.jobs, compiled=args.compiled)
    if args.json:
        print(json.dumps({"mode": "quick" if args.quick else "full", "cases": results}, indent=2))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
