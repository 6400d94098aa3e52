"""``etf-otel audit ... --html OUT``: the audit as one page, summary first, one timeline per trace.

The report (``etf_otel.audit._report``) says which traces have findings; their spans are read
again from the same source (:func:`collect_spans`, a second pass that keeps only those traces,
at most :data:`MAX_SPANS_PER_TRACE` spans each), reduced by the audit's own ``to_record`` to
what the page shows: role, start and end, parent, links, verdict, stream state.

Thousands of findings stay usable: the summary table comes first, every trace is a collapsed
``<details>``, and only the first :data:`MAX_TRACES` traces are drawn (the page says how many
more there are; ``--json`` lists up to the report's own cap). The privacy rules are the text
report's: trace and span ids, kinds, categories, span names; a call id only where it is a
preserved id (the ``gen_ai.tool.call.id`` of a proposed ``assemble_tool_call`` span). The id
an orphaned execution ran, or any other id no proposal made, is never written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from etf_otel.audit._model import EXECUTING, AuditFinding, Role, SpanData, SpanRecord, to_record
from etf_otel.audit._report import AuditReport
from etf_otel.cli.html._page import attribute, legend, page, text, write_page
from etf_otel.core._vocabulary import Verdict

__all__ = ["MAX_SPANS_PER_TRACE", "MAX_TRACES", "TraceSpans", "collect_spans", "render_audit"]

MAX_TRACES: Final = 200
"""Traces drawn on the page; the others with findings are counted."""
MAX_SPANS_PER_TRACE: Final = 200
"""Spans kept and drawn per trace; the others are counted."""

_SEP: Final = " \u00b7 "
_DOT: Final = "\u00b7"
_ROLE_GLYPH: Final = {"response": "R", "call": "C", "execution": "X", "remote_call": "M"}
"""By ``Role`` value: a role the audit adds later shows as a dot, not an error."""


@dataclass
class TraceSpans:
    """The spans kept of one trace (in arrival order) and how many were left out."""

    spans: list[tuple[SpanData, SpanRecord]]
    dropped: int = 0


def drawn_traces(report: AuditReport) -> list[str]:
    """The traces the page draws: the first :data:`MAX_TRACES` of the report's details."""
    return list(report.details)[:MAX_TRACES]


def collect_spans(spans: Iterable[SpanData], wanted: Iterable[str]) -> dict[str, TraceSpans]:
    """The spans of the ``wanted`` traces, bounded per trace (a second pass over the source)."""
    kept: dict[str, TraceSpans] = {trace_id: TraceSpans([]) for trace_id in wanted}
    for span in spans:
        trace = kept.get(span.trace_id)
        if trace is None:
            continue
        if len(trace.spans) < MAX_SPANS_PER_TRACE:
            trace.spans.append((span, to_record(span)))
        else:
            trace.dropped += 1
    return kept


def _summary(report: AuditReport) -> str:
    rows = []
    for kind, summary in report.sorted_kinds():
        categories = ", ".join(f"{name} ({count})" for name, count in sorted(summary.categories.items())) or "-"
        note = ' <span class="muted">(informational)</span>' if report.informational(kind) else ""
        rows.append(
            f'<tr data-kind="{kind.value}"><td><b>{kind.value}</b>{note}</td><td>{text(categories)}</td>'
            f'<td class="num">{summary.count}</td><td class="num">{summary.traces}</td></tr>'
        )
    if not rows:
        return '<p><span class="pill ok">\u2713 no linkage problems found</span></p>'
    return (
        '<table class="data" aria-label="findings by kind"><thead><tr><th>kind</th><th>categories</th>'
        f"<th>count</th><th>traces</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _proposed_ids(trace: TraceSpans) -> set[str]:
    return {
        record.call_id
        for _, record in trace.spans
        if record.role is Role.CALL and record.verdict == Verdict.PROPOSED.value and record.call_id is not None
    }


def _describe(record: SpanRecord, proposed: set[str], numbers: dict[str, int]) -> str:
    """What the row says about a span besides its name: verdict, state, the call it runs."""
    parts: list[str] = []
    if record.role is Role.CALL:
        parts.append(record.verdict or "no verdict")
        if record.call_id is not None and record.call_id in proposed:
            parts.append(f"id {text(record.call_id)}")
        parts.extend(text(category) for category in record.categories)
    elif record.role is Role.RESPONSE:
        parts.append(f"stream {text(record.state or '?')}")
        parts.append("dispatchable" if record.dispatchable else "not dispatchable")
    elif record.role in EXECUTING:  # an execute_tool span, or an MCP tools/call CLIENT span
        if record.match is not None:
            parts.append(f"matched {text(record.match)}")
        if record.call_id is not None and record.call_id in proposed:
            parts.append(f"runs id {text(record.call_id)}")
        elif record.call_id is not None:
            parts.append("runs an id no call proposed (not shown)")
        if record.refused:
            parts.append("refused by the guard")
        if record.error_type:
            parts.append(f"error {text(record.error_type)}")
    for link_trace, link_span in record.links:
        target = numbers.get(link_span) if link_trace == record.trace_id else None
        parts.append(
            f'linked to <a href="#s-{attribute(link_span)}">row {target}</a>'
            if target is not None
            else f"linked to span {text(link_span)} of trace {text(link_trace)}"
        )
    return " \u00b7 ".join(parts)


def _badges(findings: list[AuditFinding]) -> str:
    return "".join(
        f'<span class="finding" data-finding="{finding.kind.value}" tabindex="0"'
        f' data-detail="{attribute(_finding_text(finding))}">{finding.kind.value}'
        f"{'' if finding.category is None else _SEP + text(finding.category)}"
        f"{'' if finding.reason is None else _SEP + text(finding.reason)}"
        f"{'' if finding.divergence is None else _SEP + text(finding.divergence)}</span>"
        for finding in findings
    )


def _finding_text(finding: AuditFinding) -> str:
    parts = [finding.kind.value]
    if finding.category is not None:
        parts.append(f"category {finding.category}")
    if finding.reason is not None:
        parts.append(f"orphan reason {finding.reason}")
    if finding.divergence is not None:
        parts.append(f"divergence kind {finding.divergence}")
    if finding.detail is not None:
        parts.append(finding.detail)
    return "; ".join(parts)


def _trace(trace_id: str, findings: list[AuditFinding], trace: TraceSpans | None, opened: bool) -> str:
    counts: dict[str, int] = {}
    for finding in findings:
        counts[finding.kind.value] = counts.get(finding.kind.value, 0) + 1
    headline = ", ".join(f"{kind} \u00d7{count}" for kind, count in counts.items())
    rows = _rows(trace_id, findings, trace) if trace is not None else '<p class="muted">spans not read</p>'
    return (
        f'<details class="trace" data-trace="{attribute(trace_id)}"{" open" if opened else ""}>'
        f"<summary><code>{text(trace_id)}</code> \u2014 {len(findings)} finding(s): {text(headline)}</summary>"
        f"{rows}</details>"
    )


def _rows(trace_id: str, findings: list[AuditFinding], trace: TraceSpans) -> str:
    spans = sorted(trace.spans, key=lambda pair: (pair[0].start_ns, pair[0].end_ns))
    start = min((span.start_ns for span, _ in spans), default=0)
    end = max((span.end_ns for span, _ in spans), default=0)
    scale = max(end - start, 1)
    numbers = {span.span_id: number for number, (span, _) in enumerate(spans, start=1)}
    proposed = _proposed_ids(trace)
    by_span: dict[str | None, list[AuditFinding]] = {}
    for finding in findings:
        key = finding.span_id if finding.span_id in numbers else None
        by_span.setdefault(key, []).append(finding)
    rows = []
    for number, (span, record) in enumerate(spans, start=1):
        left = (span.start_ns - start) / scale * 100
        width = max((span.end_ns - span.start_ns) / scale * 100, 0.4)
        rejected = " rejected" if record.verdict == Verdict.REJECTED.value else ""
        role = record.role.value
        rows.append(
            f'<div class="row" id="s-{attribute(span.span_id)}" data-role="{role}">'
            f'<div><span class="role" title="{role}">{_ROLE_GLYPH.get(role, _DOT)}</span> {number}. '
            f'<b>{text(span.name)}</b> <span class="muted">{_describe(record, proposed, numbers)}</span>'
            f"<div>{_badges(by_span.get(span.span_id, []))}</div></div>"
            f'<div class="bar-area"><span class="bar r-{role}{rejected}" style="left:{left:.2f}%;'
            f'width:{width:.2f}%" title="{role}"></span></div></div>'
        )
    elsewhere = by_span.get(None, [])
    if elsewhere:
        rows.append(f'<div class="row"><div>not on a span of this trace: {_badges(elsewhere)}</div><div></div></div>')
    if trace.dropped:
        rows.append(f'<p class="muted">{trace.dropped} more span(s) of this trace not drawn.</p>')
    return f'<div class="spans" aria-label="spans of trace {attribute(trace_id)}">{"".join(rows)}</div>'


def _legend() -> str:
    return legend(
        [
            ("s-square t-keep_omitted", "R", "response", "assemble_response"),
            ("s-square t-establish", "C", "call", "assemble_tool_call (striped red: rejected)"),
            ("s-square t-snapshot", "X", "execution", "execute_tool, linked to its call"),
            (
                "s-square t-close",
                "M",
                "MCP call",
                "tools/call to an MCP server (the execution when its server's span is missing)",
            ),
            ("s-octagon t-reject", "\u26a0", "finding", "on the span it concerns"),
        ]
    )


def render_audit(report: AuditReport, spans: dict[str, TraceSpans], *, source: str) -> str:
    """The whole page (deterministic: the same input gives the same bytes)."""
    facts = (
        f"<li><b>files</b> {report.files}</li><li><b>spans</b> {report.spans}</li>"
        f"<li><b>traces</b> {report.traces}</li><li><b>findings</b> {report.findings}</li>"
        f"<li><b>traces with findings</b> {report.traces_with_findings}</li>"
    )
    drawn = drawn_traces(report)
    traces = "".join(
        _trace(trace_id, report.details[trace_id], spans.get(trace_id), opened=False) for trace_id in drawn
    )
    more = report.traces_with_findings - len(drawn)
    rest = (
        f'<p class="muted">{more} more trace(s) with findings not drawn (etf-otel audit --json lists them).</p>'
        if more > 0
        else ""
    )
    toolbar = (
        '<div class="toolbar"><button type="button" data-toggle="open">open all</button>'
        '<button type="button" data-toggle="close">close all</button></div>'
        if drawn
        else ""
    )
    body = (
        f'<header><h1>etf-otel audit: {text(source)}</h1><ul class="facts">{facts}</ul></header>'
        f"<main><h2>Findings by kind</h2>{_summary(report)}"
        f"<h2>Traces with findings ({len(drawn)} drawn)</h2>{_legend()}"
        '<div id="detail" role="status" aria-live="polite">Hover or focus (Tab) a finding to see its detail.</div>'
        f"{toolbar}{traces}{rest}</main>"
    )
    return page(f"etf-otel audit: {source}", body)


def write_audit_page(html: str, report: AuditReport, spans: Callable[[], Iterable[SpanData]], source: str) -> None:
    """``audit --html OUT``: read the spans of the traces drawn again (``spans()``), then write the page."""
    write_page(html, render_audit(report, collect_spans(spans(), drawn_traces(report)), source=source))
