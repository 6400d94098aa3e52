"""``etf-otel replay FILE --html OUT``: one page with a swimlane per slot of the recorded response.

The recording is assembled again here, one event at a time, so that every mark sits where it
arrived: the adapter is the protocol's own, and between two events the page reads only what
the slot model exposes (how many fragments it has counted, a lifecycle slot's state, how the
response ended). The final :class:`~etf_otel.core._results.AssemblyResult` gives each fragment's
bounded diagnostic (``diagnostics``: transition, id kind, prior id, empty flag, category) and
each call's verdict, the same values ``replay`` prints.

The axis is one for all lanes: a column per fragment in arrival order, and a column for each
event that is no fragment (a snapshot, a close, the end), so interleaved parallel calls read
left to right. Ids appear only as preserved ids (``ToolCall.id``), arguments only with
``--show-arguments``; a rejected id is never in the page, nor in the diagnostics it is built from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from etf_otel.core._identity import IdentityRules
from etf_otel.core._lifecycle import LifecycleSlots
from etf_otel.core._results import AssemblyResult
from etf_otel.core._slot_state import ARGUMENTS_CLOSED, CLOSED
from etf_otel.core._vocabulary import FragmentDiagnostic, StreamState, Transition
from etf_otel.protocols import WireProtocol
from etf_otel.protocols._chat_completions import DONE

__all__ = ["MAX_COLUMNS", "SHAPES", "STREAM", "Lane", "ReplayTimeline", "Tick", "replay_timeline"]

MAX_COLUMNS: Final = 1500
"""Columns drawn; a longer stream says how many were left out (its totals are in the calls table)."""

Lane = tuple[int, "int | None"]
"""``(choice, index)`` of a slot; ``(choice, None)`` for fragments that joined no slot."""
STREAM: Final[Lane] = (-1, None)
"""The lane of the response itself: its finish reasons and its end."""

SHAPES: Final[dict[str, tuple[str, str, str]]] = {
    # transition or event -> (shape, letter, explanation)
    Transition.ESTABLISH.value: ("s-circle", "E", "id set by this fragment"),
    Transition.REPLACE_EMPTY.value: ("s-circle", "R", 'id set after only ""'),
    Transition.AWAIT.value: ("s-hollow", "A", "no identity yet"),
    Transition.KEEP_OMITTED.value: ("s-square", "O", "id absent: kept"),
    Transition.KEEP_NULL.value: ("s-square", "N", "id null: kept"),
    Transition.KEEP_IDENTICAL.value: ("s-square", "=", "same id again: kept"),
    Transition.KEEP_EMPTY.value: ("s-square", "K", 'id "": kept (compatibility rule)'),
    Transition.INFER_INDEX.value: ("s-diamond", "I", "index inferred (compatibility rule)"),
    Transition.BUFFER_EARLY.value: ("s-diamond", "B", "buffered until its call opened (compatibility rule)"),
    Transition.DROP_LATE.value: ("s-diamond", "D", "late delta set aside (compatibility rule)"),
    Transition.POSITIONAL.value: ("s-square", "P", "no id: the call's position is its identity"),
    Transition.DROP_REPEAT.value: ("s-diamond", "X", "repeated whole call set aside (compatibility rule)"),
    Transition.ABSENT_ARGUMENTS.value: (
        "s-diamond",
        "{",
        "no arguments key in the body: read as {} (compatibility rule)",
    ),
    Transition.REJECT.value: ("s-octagon", "\u2715", "rejected: its category is written under it"),
    "snapshot": ("s-tag", "S", "the provider stated the whole arguments"),
    "snapshot_mismatch": ("s-tag", "S", "snapshot_mismatch: the provider's whole arguments contradicted its deltas"),
    "arguments_closed": ("s-bar", ")", "argument stream closed"),
    "close": ("s-bar", "]", "call closed"),
    "finish": ("s-tag", "F", "finish reason received"),
    "end": ("s-square", "\u25a0", "terminal event: the response ended"),
    "cut": ("s-hollow", "\u2702", "the stream stopped without a terminal event"),
}


@dataclass(frozen=True, slots=True)
class Tick:
    """One column of the axis: a fragment's diagnostic, or an event that is no fragment."""

    column: int
    lane: Lane
    kind: str
    """A transition's value for a fragment; ``snapshot``, ``close``, ... for the other events."""
    event: int
    """The 1-based number of the wire event it came from."""
    diagnostic: FragmentDiagnostic | None = None


@dataclass
class ReplayTimeline:
    """What the page draws: the result, the ticks in arrival order, and the lanes in order of appearance."""

    protocol: WireProtocol
    result: AssemblyResult
    events: int
    ticks: list[Tick] = field(default_factory=list)
    lanes: list[Lane] = field(default_factory=list)
    dropped: int = 0
    """Columns past :data:`MAX_COLUMNS` (or past the diagnostics cap), not drawn."""


def _slot_state(slots: object, key: int | None) -> tuple[int, int, bool] | None:
    if key is None or not isinstance(slots, LifecycleSlots):
        return None
    slot = slots.slot(key)
    if slot is None:
        return None
    return slot.status, len(slot.claims or ()), slot.placeholder is not None


def _lifecycle_events(
    carries: bool, key: int | None, before: tuple[int, int, bool] | None, after: tuple[int, int, bool] | None
) -> list[str]:
    """The non-fragment marks of one event on a lifecycle slot: a snapshot, closes."""
    if key is None or after is None:
        return []
    status_before, claims_before, _ = before if before is not None else (0, 0, False)
    status, claims, _ = after
    kinds: list[str] = []
    if claims > claims_before or carries:  # a placeholder ("", Anthropic's {}) states nothing yet
        kinds.append("snapshot")
    closed_now = status & ~status_before
    if closed_now & CLOSED:
        kinds.append("close")
    elif closed_now & ARGUMENTS_CLOSED:
        kinds.append("arguments_closed")
    return kinds


def _stream_events(slots: object, reasons_before: int, ended_before: object) -> list[str]:
    kinds: list[str] = []
    if len(getattr(slots, "finish_reasons", {})) > reasons_before:
        kinds.append("finish")
    if getattr(slots, "ended", None) is not None and ended_before is None:
        kinds.append("end")
    return kinds


def replay_timeline(
    protocol: WireProtocol, events: Sequence[object], allow: Sequence[str], deny: Sequence[str] = ()
) -> ReplayTimeline:
    """Assemble ``events`` one at a time and note where each fragment and each other event falls."""
    assembler = protocol.assembler(rules=IdentityRules.for_rules(allow, deny=deny))
    slots = assembler.slots
    spans: list[tuple[int, int, int, list[tuple[Lane, str]]]] = []  # (event, first fragment, last, others)
    for number, event in enumerate(events, start=1):
        first = slots.fragment_count
        key = protocol.event_slot(event)
        before = _slot_state(slots, key)
        reasons, ended = len(slots.finish_reasons), slots.ended
        if event == DONE:
            assembler.feed_done()
        else:
            assembler.feed(event)
        others: list[tuple[Lane, str]] = [
            ((0, key), kind)
            for kind in _lifecycle_events(protocol.states_arguments(event), key, before, _slot_state(slots, key))
        ]
        stream = _stream_events(slots, reasons, ended)
        if event == DONE and "end" not in stream:  # Chat Completions' sentinel; the adapter decides at finish
            stream.append("end")
        others += [(STREAM, kind) for kind in stream]
        spans.append((number, first, slots.fragment_count, others))
    result = assembler.finish()
    last = slots.fragment_count
    if result.state is StreamState.TRUNCATED:
        spans.append((len(events), last, last, [(STREAM, "cut")]))
    elif not any(kind == "end" for *_, others in spans for _, kind in others):
        spans.append((len(events), last, last, [(STREAM, "end")]))  # an adapter that decides its end at finish
    return _layout(protocol, result, len(events), spans)


def _layout(
    protocol: WireProtocol,
    result: AssemblyResult,
    count: int,
    spans: list[tuple[int, int, int, list[tuple[Lane, str]]]],
) -> ReplayTimeline:
    """Columns in arrival order: each event's fragments, then its other marks."""
    by_fragment: dict[int, list[FragmentDiagnostic]] = {}
    for diagnostic in result.diagnostics:
        by_fragment.setdefault(diagnostic.fragment, []).append(diagnostic)
    timeline = ReplayTimeline(protocol, result, count)
    lanes: dict[Lane, None] = {}
    column = 0

    def add(lane: Lane, kind: str, event: int, diagnostic: FragmentDiagnostic | None = None) -> None:
        nonlocal column
        if column >= MAX_COLUMNS:
            timeline.dropped += 1
            return
        column += 1
        lanes.setdefault(lane, None)
        timeline.ticks.append(Tick(column, lane, kind, event, diagnostic))

    for event, first, last, others in spans:
        for fragment in range(first + 1, last + 1):
            listed = by_fragment.get(fragment)
            if listed is None:  # past the diagnostics cap: counted only
                timeline.dropped += 1
            for diagnostic in listed or ():
                lane = (diagnostic.choice or 0, diagnostic.index)
                add(lane, diagnostic.transition.value, event, diagnostic)
        for lane, kind in others:
            add(lane, kind, event)
    ordered = [lane for lane in lanes if lane != STREAM]
    ordered.sort(key=lambda lane: (lane[1] is None, lane[0], -1 if lane[1] is None else lane[1]))
    timeline.lanes = [STREAM, *ordered]
    return timeline
