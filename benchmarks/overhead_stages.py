"""Where etf-otel's time goes per response, stage by stage, on the real clients (issue 20).

benchmarks/overhead.py says *how much* etf-otel adds to a streamed response; this says *where*.
For each protocol and shape of overhead.py (same in-memory clients, same providers: an SDK
``TracerProvider`` with a batch processor exporting nowhere, an SDK ``MeterProvider``), in one
process:

* **added**: the median, over interleaved rounds, of (instrumented - bare) time per response: the
  instrumentor is switched on and off between the two halves of each round.
* **floor**: the same for the floor of overhead.py (a wrapper of ``create`` that emits etf-otel's
  spans, captured from etf-otel at start, when the stream ends, and does nothing else), switched
  on and off in the same rounds.
* **stages**: in a separate instrumented pass, the methods each stage runs in are timed with
  ``perf_counter_ns`` (a wrapper per method, about 0.1 us of its own per call):

  - request: matching the request to its conversation (message digests) and the provider name;
  - stream setup: the observer, the settlement of the previous response, the stream proxy;
  - rules, per event: the protocol adapter's ``feed`` (identity rules, slot updates);
  - validation: the adapter's ``finish`` (arguments parsed, verdicts, dispatchability);
  - spans and attributes: ``Telemetry.record_response`` minus the two below;
  - counters: the metric totals (``CounterTotals.add_response``);
  - proposal records: the registry guard mode and links read (``ProposalRegistry.add``);
  - the rest: added minus every stage: the proxy's frame per event, the integration's glue,
    and the caches the extra code evicts from under the client.

Run: ``python benchmarks/overhead_stages.py [--quick] [--json]``. Not a test: nothing is
asserted; ``--quick`` only checks it works (tests/test_benchmarks.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from overhead_streams import PROTOCOLS, Case, consumer  # type: ignore[import-not-found]
from overhead_worker import Floor, Providers, timed  # type: ignore[import-not-found]

SHAPES = ((4, 50), (2, 5))
STAGES = (
    "request",
    "stream setup",
    "rules, per event",
    "validation",
    "spans and attributes",
    "counters",
    "proposal records",
)


def _stage_methods(protocol: str) -> list[tuple[str, Any, str]]:
    """(stage, class, method name) for the methods a ``protocol``'s response runs through."""
    from etf_otel.instrumentation._counters import CounterTotals
    from etf_otel.instrumentation._registry import ProposalRegistry
    from etf_otel.instrumentation._setup import Instrumentation
    from etf_otel.instrumentation._telemetry import Telemetry
    from etf_otel.integrations.anthropic._instrumentor import AnthropicInstrumentor
    from etf_otel.integrations.openai._instrumentor import OpenAIInstrumentor
    from etf_otel.integrations.openai._responses import ResponsesLinkage
    from etf_otel.protocols._anthropic_messages import AnthropicAssembler
    from etf_otel.protocols._chat_completions import ReferenceAssembler
    from etf_otel.protocols._responses import ResponsesAssembler

    integration, prepare, assembler = {
        "chat": (OpenAIInstrumentor, "_prepare", ReferenceAssembler),
        "responses": (ResponsesLinkage, "prepare", ResponsesAssembler),
        "anthropic": (AnthropicInstrumentor, "_prepare", AnthropicAssembler),
    }[protocol]
    return [
        ("request", integration, prepare),
        ("stream setup", Instrumentation, "stream"),
        ("rules, per event", assembler, "feed"),
        ("validation", assembler, "finish"),
        ("record_response", Telemetry, "record_response"),
        ("counters", CounterTotals, "add_response"),
        ("proposal records", ProposalRegistry, "add"),
    ]


@contextmanager
def timing(methods: list[tuple[str, Any, str]], spent: collections.Counter[str]) -> Iterator[None]:
    """Each method adds its own time (nanoseconds) to ``spent[stage]`` while the block runs."""
    originals = [(owner, name, owner.__dict__[name]) for _, owner, name in methods]

    def clocked(stage: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return function(*args, **kwargs)
            finally:
                spent[stage] += time.perf_counter_ns() - started

        return wrapper

    for stage, owner, name in methods:
        setattr(owner, name, clocked(stage, owner.__dict__[name]))
    try:
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


FLOOR_WRAPPED = (
    ("openai.resources.chat.completions", "Completions"),
    ("openai.resources.responses.responses", "Responses"),
    ("anthropic.resources.messages.messages", "Messages"),
)


@contextmanager
def floor_switch(providers: Providers, case: Case) -> Iterator[Callable[[bool], None]]:
    """The floor of overhead.py in this process: ``switch(True)`` puts its wrappers of ``create`` in place."""
    import importlib

    owners = [getattr(importlib.import_module(module), name) for module, name in FLOOR_WRAPPED]
    bare = [owner.__dict__["create"] for owner in owners]
    Floor(providers, [case]).select(case.key)
    wrapped = [owner.__dict__["create"] for owner in owners]

    def switch(on: bool) -> None:
        for owner, function in zip(owners, wrapped if on else bare, strict=True):
            owner.create = function

    switch(False)
    try:
        yield switch
    finally:
        switch(False)


def measure(case: Case, rounds: int, count: int) -> dict[str, Any]:
    from etf_otel.integrations.anthropic._instrumentor import AnthropicInstrumentor
    from etf_otel.integrations.openai._instrumentor import OpenAIInstrumentor

    providers = Providers.create()
    instrumentor = AnthropicInstrumentor() if case.protocol == "anthropic" else OpenAIInstrumentor()
    read = consumer(case)
    bare: list[float] = []
    added: list[float] = []
    floor_added: list[float] = []
    with floor_switch(providers, case) as floor:
        for _ in range(rounds):
            bare.append(timed(read, count))
            instrumentor.instrument(tracer_provider=providers.tracer_provider, meter_provider=providers.meter_provider)
            added.append(timed(read, count) - bare[-1])
            instrumentor.uninstrument()
            floor(True)
            floor_added.append(timed(read, count) - bare[-1])
            floor(False)
    spent: collections.Counter[str] = collections.Counter()
    # Clocked before instrumenting: the SDK hooks hold the instrumentor's bound methods from then on.
    with timing(_stage_methods(case.protocol), spent):
        instrumentor.instrument(tracer_provider=providers.tracer_provider, meter_provider=providers.meter_provider)
        try:
            read()
            spent.clear()  # the warm-up read is not counted
            for _ in range(rounds * count):
                read()
        finally:
            instrumentor.uninstrument()
            providers.tracer_provider.shutdown()
    stages = {stage: spent[stage] / (rounds * count) / 1000 for stage in spent}
    stages["spans and attributes"] = (
        stages.pop("record_response", 0.0) - stages.get("counters", 0.0) - stages.get("proposal records", 0.0)
    )
    added_us = statistics.median(added) * 1e6
    return {
        "bare_us": statistics.median(bare) * 1e6,
        "added_us": added_us,
        "floor_added_us": statistics.median(floor_added) * 1e6,
        "stages_us": {stage: stages.get(stage, 0.0) for stage in STAGES},
        "rest_us": added_us - sum(stages.values()),
    }


def print_tables(results: dict[str, dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="etf-otel per response, by stage (us; share of what etf-otel adds)")
    table.add_column("stage")
    for key in results:
        table.add_column(key, justify="right")

    def row(label: str, values: list[float], added: list[float] | None) -> None:
        shares = (
            [f" ({value / total:.0%})" for value, total in zip(values, added, strict=True)]
            if added
            else [""] * len(values)
        )
        table.add_row(label, *(f"{value:.1f}{share}" for value, share in zip(values, shares, strict=True)))

    added = [result["added_us"] for result in results.values()]
    row("bare client", [result["bare_us"] for result in results.values()], None)
    row("added by etf-otel (100%)", added, None)
    row("added by the floor (its spans only)", [result["floor_added_us"] for result in results.values()], added)
    for stage in STAGES:
        row(f"  {stage}", [result["stages_us"][stage] for result in results.values()], added)
    row("  the rest", [result["rest_us"] for result in results.values()], added)
    console = Console()
    (console if console.is_terminal else Console(width=160)).print(table)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (seconds): checks it works, not speed")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    args = parser.parse_args(argv)
    logging.getLogger("opentelemetry").setLevel(logging.ERROR)  # dropped-span notices in tight loops, as overhead.py
    rounds, count = (2, 5) if args.quick else (15, 100)
    results = {}
    for protocol in PROTOCOLS:
        for calls, fragments in SHAPES:
            case = Case(protocol, calls, fragments)
            results[case.key] = measure(case, rounds, count // 5 if calls * fragments > 100 else count)
    if args.json:
        print(json.dumps({"mode": "quick" if args.quick else "full", "cases": results}, indent=2))
    else:
        print_tables(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
