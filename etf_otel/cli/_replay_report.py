"""``etf-otel replay``: assemble one recorded response and report what the rules decided.

The JSON document is the contract of docs/cli.md; its shape is written down once
as pydantic models so that the CLI, tests and users read the same schema.

Ids, names, arguments and finish reasons are model output and may hold anything JSON can
carry: lone surrogates, NUL and other control characters, bidi overrides, rich markup. The
JSON document keeps them exactly (lone surrogates as ``\\uXXXX`` escapes, so the output is
valid UTF-8); the table shows them through :func:`shown` (cut past ``CELL_LIMIT`` characters
with a marker, then :func:`displayable`), never as markup or raw terminal control, and
whatever the output's encoding cannot hold is escaped, not an error. On a pipe each table row
is one tab-separated line (:func:`print_table`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table
from rich.text import Text

from etf_otel.cli._text import displayable, json_text, print_table, shown
from etf_otel.core._history import Drift
from etf_otel.core._linkage import Finding
from etf_otel.core._pairing import PairingCheck, Problem
from etf_otel.core._results import AssemblyResult
from etf_otel.protocols import bounded_finish_reason

__all__ = ["ReplayReport", "add_call_columns", "build_report", "render_pairing", "render_report"]


def add_call_columns(table: Table, headers: Sequence[str]) -> None:
    """Columns of a table of calls, each told how it may give room on a terminal (``print_table``):
    ids and arguments fold, a name is whole or cut with ``…`` (never folded mid-word), the rest
    (numbers, verdicts, categories) is always whole."""
    for header in headers:
        if header.endswith(("id", "arguments")):
            table.add_column(header, overflow="fold")
        elif header.endswith("name"):
            table.add_column(header, overflow="ellipsis", no_wrap=True)
        else:
            table.add_column(header)


class StreamSummary(BaseModel):
    state: str
    finish_reasons: list[str]
    streamed: bool = True
    """``False`` for a complete (non-streamed) body: no fragments, the same rules."""


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


class LinkageReport(BaseModel):
    id: str | None
    """The call id, only when it is a preserved, proposed id (never an orphaned result's)."""
    category: str
    name: str | None = None
    """The function name, for a protocol that links results by name (Gemini); left out otherwise."""


class DriftReport(BaseModel):
    kind: str
    """``id_replaced``, ``call_fabricated`` or ``refusal_answered``: recorded, never a finding."""
    id: str | None
    """The proposal's preserved id (``id_replaced``); never the id the history carries instead."""
    name: str | None = None


class PairingReport(BaseModel):
    kind: str
    """What the provider refuses: ``result_without_call``, ``call_without_result``, ``duplicate_result``,
    ``duplicate_call_id``, ``id_rejected_by_target``."""
    reason: str
    """``history_trimmed``, ``id_rewritten``, ``concatenated_ids`` or ``unknown``."""
    position: str | None
    """Where in the request: ``messages[3]``, ``input[3]``, ``contents[3]`` (the message, item or content the
    turn starts at); ``None`` for a call the provider holds (``previous_response_id``)."""
    at: int | None
    """The number in :attr:`position`."""
    index: int | None
    """Which call or result (``item``) of the turn at :attr:`position`, from 0."""
    item: str
    """``call`` or ``result``."""
    id: str | None
    """The call id, only when it is a preserved, proposed id."""


class ReplayReport(BaseModel):
    dispatchable: bool
    stream: StreamSummary
    calls: list[CallReport]
    rejections: list[RejectionReport]
    diagnostics: list[DiagnosticReport]
    linkage: list[LinkageReport] | None = Field(default=None, exclude=True)
    """Findings against the next request (``--followup``); in the document only with it, so the
    document without ``--followup`` (also nested as ``rules`` by ``--assembler``) keeps its shape."""
    drift: list[DriftReport] | None = Field(default=None, exclude=True)
    """How the next request's history differs from the proposals without breaking anything (``--followup``)."""
    pairing: list[PairingReport] | None = Field(default=None, exclude=True)
    """What the provider refuses in the next request's history (``--followup``), in its order."""
    pairing_omitted: int = Field(default=0, exclude=True)
    """Pairing problems past the bound, counted only."""

    def to_dict(self, *, show_arguments: bool) -> dict[str, Any]:
        exclude = None if show_arguments else {"calls": {"__all__": {"arguments"}}}
        document = self.model_dump(exclude=exclude)
        if self.linkage is not None:
            document["linkage"] = [
                finding.model_dump(exclude={"name"} if finding.name is None else None) for finding in self.linkage
            ]
            document["drift"] = [entry.model_dump() for entry in self.drift or ()]
            document["pairing"] = [problem.model_dump() for problem in self.pairing or ()]
            document["pairing_omitted"] = self.pairing_omitted
        return document

    def to_json(self, *, show_arguments: bool, ascii_only: bool = False) -> str:
        return json_text(self.to_dict(show_arguments=show_arguments), ascii_only=ascii_only)


def linkage_report(findings: Sequence[Finding]) -> list[LinkageReport]:
    return [
        LinkageReport(id=finding.call_id, category=finding.category.value, name=finding.name) for finding in findings
    ]


def pairing_report(problem: Problem, container: str) -> PairingReport:
    return PairingReport(
        kind=problem.kind.value,
        reason=problem.reason.value,
        position=None if problem.at is None else f"{container}[{problem.at}]",
        at=problem.at,
        index=problem.index,
        item="call" if problem.call else "result",
        id=problem.call_id,
    )


def build_report(
    result: AssemblyResult,
    *,
    show_arguments: bool = False,
    linkage: Sequence[Finding] | None = None,
    streamed: bool = True,
    drift: Sequence[Drift] = (),
    pairing: PairingCheck | None = None,
    container: str = "messages",
) -> ReplayReport:
    """The docs/cli.md document for ``result``; arguments only when asked for."""
    return ReplayReport(
        dispatchable=result.dispatchable,
        stream=StreamSummary(
            state=result.state.value,
            finish_reasons=[
                reason if show_arguments else bounded_finish_reason(reason) for reason in result.finish_reasons
            ],
            streamed=streamed,
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
        linkage=linkage_report(linkage) if linkage is not None else None,
        drift=[DriftReport(kind=entry.kind.value, id=entry.call_id, name=entry.name) for entry in drift],
        pairing=[pairing_report(problem, container) for problem in pairing.problems] if pairing is not None else None,
        pairing_omitted=pairing.omitted if pairing is not None else 0,
    )


def render_report(report: ReplayReport, console: Console, *, show_arguments: bool = False) -> None:
    """Print the per-call table, the verdict and, with a next request, the linkage findings."""
    table = Table(title="tool calls", title_justify="left")
    # Piped, every cell is whole up to CELL_LIMIT, then cut with a marker that says so.
    headers = ["choice", "index", "id", "name", "fragments", "verdict", "categories"]
    add_call_columns(table, [*headers, "arguments"] if show_arguments else headers)
    for call in report.calls:
        row = [
            str(call.choice),
            str(call.index),
            shown(call.id),
            shown(call.name),
            str(call.fragments),
            call.verdict,
            "\n".join(call.categories) or "-",
        ]
        if show_arguments:
            row.append(shown(call.arguments or ""))
        table.add_row(*row)
    print_table(console, table)
    _print_causes(report, console)
    unslotted = [r for r in report.rejections if r.index is None]
    for rejection in unslotted:
        where = f"choice {rejection.choice}" if rejection.choice is not None else "response"
        console.print(f"{where}: {rejection.category}")
    transitions: dict[str, int] = {}
    for diagnostic in report.diagnostics:
        transitions[diagnostic.transition] = transitions.get(diagnostic.transition, 0) + 1
    summary = ", ".join(f"{name} {count}" for name, count in sorted(transitions.items())) or "none"
    reasons = ", ".join(displayable(reason) for reason in report.stream.finish_reasons) or "-"
    what = "stream" if report.stream.streamed else "response (complete body, not streamed)"
    console.print(f"{what}: {report.stream.state} (finish reasons: {reasons})")
    console.print(f"id transitions: {summary}")
    console.print("dispatchable: " + ("yes" if report.dispatchable else "no"))
    if report.linkage is not None:
        render_linkage(report.linkage, console, dispatchable=report.dispatchable)
        render_drift(report.drift or (), console)
        render_pairing(report, console)


def render_pairing(report: ReplayReport, console: Console) -> None:
    """What the provider refuses in the next request: one row a problem, with its position and reason."""
    problems = report.pairing or ()
    if not problems:
        console.print("pairing: every call and result of the next request pairs as its provider requires")
        return
    table = Table(title="pairing (the next request, as its provider pairs it)", title_justify="left")
    for header in ("problem", "position", "reason"):  # closed vocabularies and numbers: always whole
        table.add_column(header)
    table.add_column("id", overflow="fold")
    for problem in problems:
        where = (
            "a call the provider holds"
            if problem.position is None
            else f"{problem.position} {problem.item} {problem.index}"
        )
        table.add_row(problem.kind, where, problem.reason, shown(problem.id))
    print_table(console, table)
    if report.pairing_omitted:
        console.print(f"pairing: {report.pairing_omitted} more problems not shown")


def render_drift(drift: Sequence[DriftReport], console: Console) -> None:
    """One line per drift record: how the history differs from the proposals, never a finding."""
    for entry in drift:
        about = " ".join(shown(value) for value in (entry.id, entry.name) if value is not None)
        console.print(f"drift (not a finding): {entry.kind}" + (f" ({about})" if about else ""))


_CAUSE_NAME_LIMIT = 32
"""A tool name in a cause line is cut past this many characters, with a marker (`--json` has it whole)."""


def _print_causes(report: ReplayReport, console: Console) -> None:
    """Which calls the rejections came from, when other calls carry their category too.

    A response that is not dispatchable proposes none of its calls: each carries the category
    that blocked it, so the table alone cannot tell the call that broke the rules from the others.
    """
    slotted = [rejection for rejection in report.rejections if rejection.index is not None]
    causes = {(rejection.choice, rejection.index) for rejection in slotted}
    if not any(call.categories and (call.choice, call.index) not in causes for call in report.calls):
        return
    names: dict[tuple[int | None, int | None], str | None] = {(c.choice, c.index): c.name for c in report.calls}
    for rejection in slotted:
        name = names.get((rejection.choice, rejection.index))
        named = f" ({shown(name, _CAUSE_NAME_LIMIT)})" if name else ""
        cause = f"caused by choice {rejection.choice}, index {rejection.index}{named}: {rejection.category}"
        console.print(Text(cause))  # the name is input: never markup; wrapped at spaces to the terminal
    console.print("the other calls carry it: a response with a rejected call proposes none of its calls")


def render_linkage(findings: Sequence[LinkageReport], console: Console, *, dispatchable: bool) -> None:
    """The linkage findings against the next request; an orphaned result shows no id."""
    if not findings:
        console.print("linkage: every proposed call answered exactly once, and nothing else answered")
        return
    table = Table(title="linkage (next request)", title_justify="left")
    table.add_column("id", overflow="fold")
    table.add_column("category")  # a closed vocabulary: always whole
    named = any(finding.name is not None for finding in findings)
    if named:
        table.add_column("name", overflow="ellipsis", no_wrap=True)  # whole, or cut with a marker
    for finding in findings:
        cells = [shown(finding.id), finding.category]
        if named:
            cells.append(shown(finding.name))
        table.add_row(*cells)
    print_table(console, table)
    if not dispatchable:
        console.print("linkage: the response is not dispatchable, so it proposed nothing to answer")
