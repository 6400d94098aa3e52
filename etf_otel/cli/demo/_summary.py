"""What ``etf-otel demo`` prints after its parts have run: the tables, control vs target, the telemetry, the verdict.

Its own module because it only reads what the parts recorded (:class:`DemoRun`, the finished spans,
the metric reader): :mod:`etf_otel.cli.demo._chat` runs the demo and hands the results here.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from rich.console import Console
from rich.text import Text

from etf_otel import attributes as A
from etf_otel.cli._exit_codes import EXIT_FOUND, EXIT_OK
from etf_otel.cli._sdk_setup import SdkSetup
from etf_otel.cli.demo._cases import DemoRun, print_part, print_protocols, span_words

__all__ = ["metric_points", "print_summary"]


def metric_points(reader: InMemoryMetricReader) -> int:
    data = reader.get_metrics_data()
    resources = data.resource_metrics if data is not None else []
    return sum(len(metric.data.data_points) for r in resources for scope in r.scope_metrics for metric in scope.metrics)


def print_summary(
    console: Console,
    run: DemoRun,
    spans: Sequence[ReadableSpan],
    reader: InMemoryMetricReader,
    setup: SdkSetup,
    check_interrupt: Callable[[], None] = lambda: None,
) -> tuple[int, str]:
    """Print every part; the exit code by the rules, and what was not delivered to the destination (``""``: nothing)."""
    console.print(Text.assemble(("etf-otel demo", "bold"), ": a synthetic agent reads a source and saves a report"))
    title = "Chat Completions: real openai client, its accumulator ChatCompletionStreamState"
    chat = run.chat
    groups = [
        ("the case study: read a source, save a report (two ids, three fragments each)", chat[:2]),
        ("where the SDK alone goes wrong and the rules accept the call", chat[2:5]),
        ("rejections: the rules catch the call, the guarded host refuses it", chat[5:-3]),
        ("the next request: results checked against the proposals", chat[-3:]),
    ]
    print_part(console, title, groups)
    same_ids = run.ids["control"] == run.ids["target"] and bool(run.ids["control"])
    reports = run.reports
    same_report = bool(reports.get("control")) and reports.get("control") == reports.get("target")
    digest = hashlib.sha256(reports.get("target", "").encode()).hexdigest()[:12]
    console.print(
        f"control vs target: preserved ids {'identical' if same_ids else 'DIFFER'} ({', '.join(run.ids['target'])}); "
        f"report {'identical' if same_report else 'DIFFERS'} (sha256 {digest}…)"
    )
    print_protocols(console, run.responses, run.anthropic, run.gemini)
    names = Counter(span.name.split(" ")[0] for span in spans)
    span_counts = ", ".join(f"{count} {name}" for name, count in sorted(names.items()))
    console.print(f"\ntelemetry: {len(spans)} spans ({span_counts}), {metric_points(reader)} metric series")
    where, undelivered = setup.delivery(len(spans))
    console.print(where)
    target_spans = [s for s in spans if (s.attributes or {}).get(A.GEN_AI_TOOL_CALL_ID) == "call-read-1"]
    if target_spans:
        console.print("\ncall-read-1 in the telemetry (control run, then target run):")
        for span in target_spans:
            console.print(f"  {span.name}: {span_words(dict(span.attributes or {}))}")
    parts = (run.anthropic, run.gemini)
    cases: list[Any] = [*run.chat, *run.responses, *(case for p in parts if isinstance(p, list) for case in p)]
    all_ok = all(case.ok for case in cases) and same_ids and same_report
    verdict = "all cases behaved as the rules say" if all_ok else "some cases did not behave as expected"
    check_interrupt()
    console.print()
    console.print(Text(verdict, style="bold green" if all_ok else "bold red"))
    return EXIT_OK if all_ok else EXIT_FOUND, undelivered
