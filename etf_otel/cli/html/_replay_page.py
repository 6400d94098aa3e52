"""The page of ``etf-otel replay --html``: lanes, marks, legend and the calls table.

:mod:`etf_otel.cli.html._replay` places every fragment and event on the axis; this module draws
them. Marks are absolutely placed spans inside one scroll area so that all lanes share the
axis; each mark has a shape, a letter and a colour (never colour alone), takes keyboard focus
and names its bounded diagnostics (``aria-label``, and the details panel of the page shell).
"""

from __future__ import annotations

import dataclasses
from typing import Final

from etf_otel.cli.html._page import attribute, legend, page, text
from etf_otel.cli.html._replay import SHAPES, STREAM, Lane, ReplayTimeline, Tick
from etf_otel.core._results import AssemblyResult, ToolCall
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.protocols import WireProtocol, bounded_finish_reason

__all__ = ["render_replay"]


def _lane_name(protocol: WireProtocol, lane: Lane) -> str:
    """The response's own lane, else the slot as the protocol names it."""
    return "response" if lane == STREAM else protocol.slot_label(*lane)


def _detail(tick: Tick, protocol: WireProtocol) -> str:
    """The bounded description of a tick: what the details panel and the screen reader say."""
    where = _lane_name(protocol, tick.lane)
    diagnostic = tick.diagnostic
    if diagnostic is None:
        return f"{SHAPES[tick.kind][2]} ({where}, event {tick.event})"
    parts = [
        f"fragment {diagnostic.fragment} ({where}, event {tick.event})",
        f"transition {diagnostic.transition.value}",
        f"id kind {diagnostic.id_kind.value}",
        f"prior id {'present' if diagnostic.prior_id_present else 'absent'}",
        f"empty id {'yes' if diagnostic.id_empty else 'no'}",
    ]
    if diagnostic.category is not None:
        parts.append(f"category {diagnostic.category.value}")
    return "; ".join(parts)


def _mark(tick: Tick, protocol: WireProtocol, low: bool) -> str:
    shape, letter, _ = SHAPES[tick.kind]
    left = (tick.column - 1) * 30 + 3
    detail = _detail(tick, protocol)
    category = tick.diagnostic.category if tick.diagnostic is not None else None
    data = f' data-category="{category.value}"' if category is not None else ""
    fragment = f' data-fragment="{tick.diagnostic.fragment}"' if tick.diagnostic is not None else ""
    mark = (
        f'<span class="mark {shape} t-{tick.kind}" style="left:{left}px" tabindex="0" role="img"'
        f' data-kind="{tick.kind}"{fragment}{data} aria-label="{attribute(detail)}" title="{attribute(detail)}"'
        f' data-detail="{attribute(detail)}">{text(letter)}</span>'
    )
    if category is None and tick.kind == "snapshot_mismatch":
        category = ErrorCategory.SNAPSHOT_MISMATCH
    if category is not None:
        mark += (
            f'<span class="cat{" low" if low else ""}" style="left:{left}px" aria-hidden="true">{category.value}</span>'
        )
    return mark


def _contradicting(ticks: list[Tick], call: ToolCall | None) -> list[Tick]:
    """``ticks``, the last snapshot of a call rejected for ``snapshot_mismatch`` marked as the contradiction."""
    if call is None or ErrorCategory.SNAPSHOT_MISMATCH not in call.categories:
        return ticks
    last = max((n for n, tick in enumerate(ticks) if tick.kind == "snapshot"), default=None)
    if last is None:
        return ticks
    return [*ticks[:last], dataclasses.replace(ticks[last], kind="snapshot_mismatch"), *ticks[last + 1 :]]


def _calls_by_lane(result: AssemblyResult) -> dict[Lane, ToolCall]:
    return {(call.choice, call.index): call for call in result.calls}


def _label(protocol: WireProtocol, lane: Lane, call: ToolCall | None) -> str:
    name = _lane_name(protocol, lane)
    if call is None:
        return f'<div data-lane="{attribute(name)}"><div class="name">{text(name)}</div></div>'
    tool = text(call.name) if call.name is not None else '<span class="muted">no name</span>'
    ident = (
        f'<code title="preserved id">{text(call.id)}</code>'
        if call.id is not None
        else '<span class="muted">no preserved id</span>'
    )
    return (
        f'<div data-lane="{attribute(name)}"><div class="name">{tool}</div>'
        f'<div class="lane-id">{text(name)} \u00b7 {ident}</div></div>'
    )


def _verdict(lane: Lane, call: ToolCall | None, result: AssemblyResult) -> str:
    if lane == STREAM:
        word = "\u2713 dispatchable" if result.dispatchable else "\u2715 not dispatchable"
        return (
            f'<div data-verdict="stream" data-state="{result.state.value}">'
            f'<span class="pill {_tone(result.dispatchable)}">{word}</span>'
            f'<div class="muted">stream {result.state.value}</div></div>'
        )
    if call is None:
        blocking = sorted({r.category.value for r in result.rejections if r.index is None and r.choice == lane[0]})
        return (
            '<div data-verdict="blocked"><span class="pill bad">\u2715 blocks the response</span>'
            f'<div class="muted">{text(", ".join(blocking))}</div></div>'
        )
    good = call.proposed  # only the calls of a dispatchable response are proposed
    categories = _categories(call, result)
    word = ("\u2713 " if good else "\u2715 ") + call.verdict.value
    return (
        f'<div data-verdict="{call.verdict.value}" data-call="{call.choice}:{call.index}">'
        f'<span class="pill {_tone(good)}">{word}</span>'
        f'<div class="muted">{text(categories or "valid")}</div></div>'
    )


def _categories(call: ToolCall, result: AssemblyResult) -> str:
    """The call's categories; for a call rejected only because its response is blocked (no rejection
    of the response is its own), the response's blocking category, said to be the response's."""
    shown = ", ".join(category.value for category in call.categories)
    own = any(r.choice == call.choice and r.index == call.index for r in result.rejections)
    return shown if own or not call.categories else f"{shown} (response blocked)"


def _tone(good: bool) -> str:
    return "ok" if good else "bad"


_DOT: Final = "\u00b7"


def _timeline(timeline: ReplayTimeline) -> str:
    protocol, result = timeline.protocol, timeline.result
    calls = _calls_by_lane(result)
    columns = max((tick.column for tick in timeline.ticks), default=0)
    width = max(columns * 30 + 12, 120)
    by_lane: dict[Lane, list[Tick]] = {lane: [] for lane in timeline.lanes}
    for tick in timeline.ticks:
        by_lane[tick.lane].append(tick)
    axis = "".join(
        f'<span class="tick" style="left:{(tick.column - 1) * 30}px">'
        f"{tick.diagnostic.fragment if tick.diagnostic is not None else _DOT}</span>"
        for tick in timeline.ticks
    )
    labels = ['<div class="axis">fragment \u2192</div>']
    tracks = [f'<div class="track axis" style="width:{width}px" aria-hidden="true">{axis}</div>']
    verdicts = ['<div class="axis">verdict</div>']
    for lane in timeline.lanes:
        call = calls.get(lane)
        labels.append(_label(protocol, lane, call))
        marks, rejected = [], 0
        for tick in _contradicting(by_lane[lane], call):
            low = tick.diagnostic is not None and tick.diagnostic.category is not None and rejected % 2 == 1
            rejected += tick.diagnostic is not None and tick.diagnostic.category is not None
            marks.append(_mark(tick, protocol, low))
        name = attribute(_lane_name(protocol, lane))
        tracks.append(
            f'<div class="track" role="group" aria-label="{name}" data-lane="{name}" style="width:{width}px">'
            f"{''.join(marks)}</div>"
        )
        verdicts.append(_verdict(lane, call, result))
    return (
        '<div class="timeline">'
        f'<div class="labels">{"".join(labels)}</div>'
        f'<div class="scroll" aria-label="fragments in arrival order">{"".join(tracks)}</div>'
        f'<div class="verdicts">{"".join(verdicts)}</div></div>'
    )


def _legend() -> str:
    return legend(
        (f"{shape} t-{kind}", letter, kind.replace("_", " "), explanation)
        for kind, (shape, letter, explanation) in SHAPES.items()
    )


def _transitions(result: AssemblyResult) -> dict[Lane, dict[str, int]]:
    """Identity decisions per lane, from the diagnostics (what the marks show, counted)."""
    counts: dict[Lane, dict[str, int]] = {}
    for diagnostic in result.diagnostics:
        lane = counts.setdefault((diagnostic.choice or 0, diagnostic.index), {})
        lane[diagnostic.transition.value] = lane.get(diagnostic.transition.value, 0) + 1
    return counts


def _calls_table(result: AssemblyResult, protocol: WireProtocol, show_arguments: bool) -> str:
    head = "<tr><th>lane</th><th>name</th><th>preserved id</th><th>verdict</th><th>categories</th>"
    head += "<th>fragments</th><th>rejected</th><th>transitions</th>"
    head += "<th>arguments</th></tr>" if show_arguments else "</tr>"
    rows = []
    decisions = _transitions(result)
    for call in result.calls:
        counted = decisions.get((call.choice, call.index), {})
        transitions = ", ".join(f"{name} \u00d7{count}" for name, count in counted.items())
        row = (
            f"<tr><td>{text(_lane_name(protocol, (call.choice, call.index)))}</td>"
            f"<td>{text(call.name or '')}</td><td><code>{text(call.id or '')}</code></td>"
            f"<td>{call.verdict.value}</td><td>{text(_categories(call, result))}</td>"
            f'<td class="num">{call.fragments}</td><td class="num">{call.rejected_count}</td>'
            f"<td>{text(transitions)}</td>"
        )
        if show_arguments:
            row += f"<td><code>{text(call.arguments)}</code></td>"
        rows.append(row + "</tr>")
    blocking = [r for r in result.rejections if r.index is None]
    response = ""
    if blocking:
        items = "".join(
            f"<li>{r.category.value}{'' if r.choice is None else f' (choice {r.choice})'}</li>" for r in blocking
        )
        response = f"<p>Rejections of the whole response:</p><ul>{items}</ul>"
    return (
        f'<table class="data" aria-label="calls"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>{response}'
    )


def render_replay(timeline: ReplayTimeline, *, source: str, show_arguments: bool) -> str:
    """The whole page for one replayed recording (deterministic: the same input gives the same bytes)."""
    result = timeline.result
    proposed = sum(call.proposed for call in result.calls)
    reasons = ", ".join(bounded_finish_reason(reason) for reason in result.finish_reasons) or "none"
    verdict = (
        '<span class="pill ok">\u2713 dispatchable</span>'
        if result.dispatchable
        else '<span class="pill bad">\u2715 not dispatchable</span>'
    )
    facts = (
        f"<li><b>protocol</b> {timeline.protocol.name}</li><li><b>stream</b> {result.state.value}</li>"
        f"<li><b>finish reasons</b> {text(reasons)}</li><li><b>events</b> {timeline.events}</li>"
        f"<li><b>fragments</b> {result.fragments}</li>"
        f"<li><b>calls</b> {len(result.calls)} ({proposed} proposed)</li><li>{verdict}</li>"
    )
    dropped = (
        f'<p class="muted">{timeline.dropped} more column(s) not drawn; the calls table counts every fragment.</p>'
        if timeline.dropped
        else ""
    )
    arguments = (
        "<p><b>Arguments shown</b> (--show-arguments): raw model output.</p>"
        if show_arguments
        else '<p class="muted">Arguments are not shown (--show-arguments shows them); ids only as preserved ids.</p>'
    )
    body = (
        f'<header><h1>etf-otel replay: {text(source)}</h1><ul class="facts">{facts}</ul></header>'
        f"<main><h2>Fragments in arrival order, one lane per call</h2>{_legend()}"
        '<div id="detail" role="status" aria-live="polite">Hover or focus (Tab) a mark to see its diagnostics.</div>'
        f"{_timeline(timeline)}{dropped}<h2>Calls</h2>{_calls_table(result, timeline.protocol, show_arguments)}"
        f"{arguments}</main>"
    )
    return page(f"etf-otel replay: {source}", body)
