"""The audit report on the terminal: a table, or the JSON document (docs/cli.md).

Every string that comes from the audited input is printed literally (never as rich markup,
control characters escaped) and every column folds: nothing is cut short at any width.
"""

from __future__ import annotations

from typing import Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

from etf_otel.audit._model import FindingKind
from etf_otel.audit._report import INFORMATIONAL, AuditReport
from etf_otel.audit._sources.otlp_json import InputStats
from etf_otel.cli._exit_codes import EXIT_FOUND, EXIT_OK
from etf_otel.cli._text import console_for, displayable, print_table, write_json

__all__ = [
    "TELEMETRY_KINDS",
    "emit_audit_report",
    "fill_input",
    "no_etf_spans",
    "render_audit_report",
    "skipped_note",
]

TELEMETRY_KINDS: Final = (FindingKind.MISSING_SPAN, FindingKind.MALFORMED_SPAN)
"""Kinds about the telemetry itself rather than the calls: they have no error category."""


def emit_audit_report(report: AuditReport, json_output: bool) -> int:
    """Print the report (``--json`` or the table) and return the exit code of docs/cli.md (``| head`` keeps it)."""
    if json_output:
        write_json(report.to_dict())
    else:
        render_audit_report(report, console_for())
    return EXIT_FOUND if report.has_findings else EXIT_OK


def render_audit_report(report: AuditReport, console: Console) -> None:
    """A readable report with ``rich``: one table row per finding kind, then the first trace ids of each.

    Every string from the input is printed literally (never as markup, control characters
    escaped: see ``displayable``). On a terminal the recorded categories fold (nothing is cut short),
    and the kinds and numbers are whole.
    """
    skipped = f", {report.skipped_records} non-trace record(s) skipped" if report.skipped_records else ""
    if report.duplicate_spans:  # a span exported twice counts once: say so, or the input's count would puzzle
        skipped += f", {report.duplicate_spans} duplicate span(s) dropped (exported more than once)"
    counts = f": {report.files} file(s), {report.spans} span(s), {report.traces} trace(s){skipped}"
    console.print(Text.assemble(("etf-otel audit", "bold"), counts))
    for skipped_file in report.skipped_files:
        console.print(Text(f"skipped, not traces: {displayable(skipped_file)}"), soft_wrap=True)
    if not report.kinds:
        console.print(Text("No linkage problems found.", style="green"))
        return
    table = Table(title="Findings")
    table.add_column("kind", style="bold")  # a closed vocabulary, and numbers: always whole
    table.add_column("category", overflow="fold")  # categories as recorded: input, which may be long
    table.add_column("count", justify="right")
    table.add_column("traces", justify="right")
    for kind, summary in report.sorted_kinds():
        lines = [f"{displayable(name)} ({n})" for name, n in sorted(summary.categories.items())]
        lines += [f"orphan_reason {displayable(name)} ({n})" for name, n in sorted(summary.reasons.items())]
        lines += [f"divergence_kind {displayable(name)} ({n})" for name, n in sorted(summary.divergences.items())]
        shown = "\n".join(lines) or "-"
        table.add_row(Text(kind.value), Text(shown), Text(str(summary.count)), Text(str(summary.traces)))
    print_table(console, table)
    console.print("First trace ids:")
    for kind, summary in report.sorted_kinds():
        more = summary.traces - len(summary.first_traces)
        console.print(Text(f"  {kind.value}", style="bold"), soft_wrap=True)
        for trace_id in summary.first_traces:
            console.print(Text(f"    {displayable(trace_id)}"), soft_wrap=True)
        if more > 0:
            console.print(Text(f"    and {more} more"), soft_wrap=True)
    console.print(_footer(report))


def _footer(report: AuditReport) -> Text:
    """The report's last line: the total, then what was counted without being a finding, and why."""
    unjudged = sum(
        summary.count
        for kind, summary in report.kinds.items()
        if kind in INFORMATIONAL and kind not in (FindingKind.UNOBSERVED_LLM_CALL, FindingKind.HISTORY_DRIFT)
    )
    drift = report.kinds.get(FindingKind.HISTORY_DRIFT)
    if report.findings:
        footer = Text.assemble((f"{report.findings} finding(s)", "red"), f" in {report.traces_with_findings} trace(s).")
    else:  # only informational kinds: nothing is wrong, something is not known
        footer = Text.assemble(("No linkage problems found", "green"), ".")
    if unjudged:
        footer.append(f" {unjudged} call(s) or execution(s) unjudged: the input has no evidence either way.")
    if drift is not None and report.informational(FindingKind.HISTORY_DRIFT):
        footer.append(
            f" {drift.count} history drift record(s): histories that hold together but differ from what the model"
            " proposed (not a finding; --strict makes them one)."
        )
    if report.unobserved_llm_calls:
        footer.append(
            f" {report.unobserved_llm_calls} LLM call(s) recorded by another instrumentation were not observed"
            " by etf-otel: is that path instrumented?"
        )
    telemetry = [kind.value for kind in TELEMETRY_KINDS if kind in report.kinds]
    if telemetry:  # only then: a note about kinds that are not there would only puzzle
        footer.append(f" {' and '.join(telemetry)} concern{'s' * (len(telemetry) == 1)} the telemetry itself")
        footer.append(" (no error category).")
    return footer


# --- files (the default engine) ---------------------------------------------------------------------


def no_etf_spans(spans: int) -> str:
    """The one line of an input none of whose spans etf-otel wrote (never "no problems found")."""
    return f"{spans} span(s), none from etf-otel: is it installed and enabled in this application?"


def skipped_note(stats: InputStats) -> str:
    return f" ({len(stats.skipped_files)} file(s) skipped: {stats.skipped_files[0]})" if stats.skipped_files else ""


def fill_input(report: AuditReport, stats: InputStats) -> None:
    """What the reader went through, into the report (a span exported twice counts once)."""
    report.files, report.records, report.skipped_records = stats.files, stats.records, stats.skipped_records
    report.spans = stats.spans - report.duplicate_spans
    report.skipped_files = list(stats.skipped_files)
