"""``etf-otel replay``: assemble one recorded response and report what the rules decided.

The JSON document is the contract of docs/cli.md; its shape is written down once
as pydantic models so that the CLI, tests and users read the same schema.
"""

from __future__ import annotations

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from etf_otel.core.results import AssemblyResult
from etf_otel.core.vocabulary import bounded_finish_reason

__all__ = ["ReplayReport", "build_report", "render_report"]


class StreamSummary(BaseModel):
    state: str
    finish_reasons: list[str]


class CallReport(BaseModel):
    choice: int
    index: int
    id: str | None
    name: str | None
    verdict: str
    categories: list[str]
    fragments: int
    arguments: str | None = None


class RejectionReport(BaseModel):
    choice: int | None
    index: int | None
    category: str


class DiagnosticReport(BaseModel):
    choice: int | None
    index: int | None
    fragment: int
    id_kind: str
    prior_id_present: bool
    id_empty: bool
    transition: str
    category: str | None


class ReplayReport(BaseModel):
    dispatchable: bool
    stream: StreamSummary
    calls: list[CallReport]
    rejections: list[RejectionReport]
    diagnostics: list[DiagnosticReport]

    def to_json(self, *, show_arguments: bool) -> str:
        exclude = None if show_arguments else {"calls": {"__all__": {"arguments"}}}
        return self.model_dump_json(exclude=exclude)


def build_report(result: AssemblyResult, *, show_arguments: bool = False) -> ReplayReport:
    """The docs/cli.md document for ``result``; arguments only when asked for."""
    return ReplayReport(
        dispatchable=result.dispatchable,
        stream=StreamSummary(
            state=result.state.value,
            finish_reasons=[
                reason if show_arguments else bounded_finish_reason(reason) for reason in result.finish_reasons
            ],
        ),
        calls=[
            CallReport(
                choice=call.choice,
                index=call.index,
                id=call.id,
                name=call.name,
                verdict=call.verdict.value,
                categories=[category.value for category in call.categories],
                fragments=call.fragments,
                arguments=call.arguments if show_arguments else None,
            )
            for call in result.calls
        ],
        rejections=[
            RejectionReport(choice=rejection.choice, index=rejection.index, category=rejection.category.value)
            for rejection in result.rejections
        ],
        diagnostics=[
            DiagnosticReport(
                choice=diagnostic.choice,
                index=diagnostic.index,
                fragment=diagnostic.fragment,
                id_kind=diagnostic.id_kind.value,
                prior_id_present=diagnostic.prior_id_present,
                id_empty=diagnostic.id_empty,
                transition=diagnostic.transition.value,
                category=diagnostic.category.value if diagnostic.category else None,
            )
            for diagnostic in result.diagnostics
        ],
    )


def render_report(report: ReplayReport, console: Console, *, show_arguments: bool = False) -> None:
    """Print the per-call table and the verdict for a person."""
    table = Table(title="tool calls", title_justify="left")
    for column in ("choice", "index", "id", "name", "fragments", "verdict", "categories"):
        table.add_column(column)
    if show_arguments:
        table.add_column("arguments")
    for call in report.calls:
        row = [
            str(call.choice),
            str(call.index),
            call.id if call.id is not None else "-",
            call.name if call.name is not None else "-",
            str(call.fragments),
            call.verdict,
            ", ".join(call.categories) or "-",
        ]
        if show_arguments:
            row.append(call.arguments or "")
        table.add_row(*row)
    console.print(table)
    unslotted = [r for r in report.rejections if r.index is None]
    for rejection in unslotted:
        where = f"choice {rejection.choice}" if rejection.choice is not None else "response"
        console.print(f"{where}: {rejection.category}")
    transitions: dict[str, int] = {}
    for diagnostic in report.diagnostics:
        transitions[diagnostic.transition] = transitions.get(diagnostic.transition, 0) + 1
    summary = ", ".join(f"{name} {count}" for name, count in sorted(transitions.items())) or "none"
    console.print(f"stream: {report.stream.state} (finish reasons: {', '.join(report.stream.finish_reasons) or '-'})")
    console.print(f"id transitions: {summary}")
    console.print("dispatchable: " + ("yes" if report.dispatchable else "no"))
