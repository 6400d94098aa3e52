"""What a response assembled to: immutable results of final validation.

These are the values every layer above the core reads (telemetry, the CLI's report, the
integrations' comparisons); they hold bounded diagnostics and the preserved ids only, and
``ToolCall.arguments``, which is raw model output that must not reach telemetry unless
content capture is on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from etf_otel.core._identity import IdDecision
from etf_otel.core._refused import NO_REFUSED, RefusedIds
from etf_otel.core._vocabulary import ErrorCategory, FragmentDiagnostic, IdKind, StreamState, Transition, Verdict

__all__ = ["AssemblyResult", "RejectedFragment", "Rejection", "ToolCall"]


@dataclass(frozen=True, slots=True)
class RejectedFragment:
    """One fragment a slot rejected: enough for a bounded span event, nothing raw."""

    fragment: int
    category: ErrorCategory
    id_kind: IdKind
    prior_id_present: bool
    id_empty: bool
    transition: Transition
    time_ns: int | None


@dataclass(frozen=True, slots=True)
class Rejection:
    """A category that blocked a call or, with ``index`` ``None``, the whole response."""

    choice: int | None
    index: int | None
    category: ErrorCategory


class ToolCall(NamedTuple):
    """One finalized slot.

    ``id`` is the preserved id: the one established on this slot, or ``None``. An id
    that was rejected never appears here. ``arguments`` is raw model output: it may hold
    user data and must not reach telemetry unless content capture is on.

    A named tuple rather than a frozen dataclass: one is built per call of every response,
    and a frozen dataclass of these fields costs over a microsecond to build (each field
    goes through ``object.__setattr__``), a tuple a fraction of that.
    """

    choice: int
    index: int  # type: ignore[assignment]  # shadows tuple.index, as the wire field is called
    id: str | None
    name: str | None
    arguments: str
    verdict: Verdict
    categories: tuple[ErrorCategory, ...]
    fragments: int
    rejected_fragments: tuple[RejectedFragment, ...]
    """The first :data:`MAX_REJECTED_KEPT` rejected fragments; ``rejected_count`` counts all."""
    rejected_count: int
    transitions: tuple[tuple[Transition, int], ...]
    opened_ns: int | None
    closed_ns: int | None

    @property
    def proposed(self) -> bool:
        return self.verdict is Verdict.PROPOSED

    def transition_count(self, transition: Transition) -> int:
        for name, count in self.transitions:
            if name is transition:
                return count
        return 0


@dataclass(frozen=True, slots=True)
class AssemblyResult:
    """What one response assembled to, after final validation."""

    state: StreamState
    finish_reasons: tuple[str, ...]
    calls: tuple[ToolCall, ...]
    rejections: tuple[Rejection, ...]
    fragments: int
    dispatchable: bool
    _diagnostics: tuple[tuple[int, int | None, int, IdDecision, ErrorCategory | None], ...]
    _overflow: tuple[tuple[tuple[int, int | None, IdDecision, ErrorCategory | None], int], ...] = ()
    _decision_counts: tuple[tuple[IdDecision, int], ...] = ()
    _identity_errors: tuple[tuple[tuple[IdDecision, ErrorCategory], int], ...] = ()
    refused_ids: RefusedIds = NO_REFUSED
    """Keyed digests of the incoming ids the rules refused (a conflicting id, an id that reached no
    slot): lets the linkage say ``rejected_incoming_id`` of a result answering one. Never the ids
    themselves, and never exported."""

    @property
    def diagnostics_dropped(self) -> int:
        """Fragments past the diagnostics cap: counted in the metrics, not listed individually."""
        return sum(count for _, count in self._overflow)

    @property
    def proposals(self) -> tuple[ToolCall, ...]:
        """The calls a host may execute: all of them, or none when the response is blocked."""
        return self.calls if self.dispatchable else ()

    @property
    def categories(self) -> tuple[ErrorCategory, ...]:
        """Every distinct category of this response, in first-seen order."""
        return tuple(dict.fromkeys(rejection.category for rejection in self.rejections))

    @property
    def diagnostics(self) -> tuple[FragmentDiagnostic, ...]:
        """One bounded diagnostic per identity decision, in arrival order."""
        return tuple(
            FragmentDiagnostic(
                choice=choice,
                index=index,
                fragment=fragment,
                id_kind=decision.id_kind,
                prior_id_present=decision.prior_id_present,
                id_empty=decision.id_empty,
                transition=decision.transition,
                category=category,
            )
            for choice, index, fragment, decision, category in self._diagnostics
        )

    @property
    def decision_counts(self) -> tuple[tuple[IdDecision, int], ...]:
        """How often each identity decision was taken (the shared decision objects, counted)."""
        return self._decision_counts

    @property
    def identity_error_counts(self) -> tuple[tuple[tuple[IdDecision, ErrorCategory], int], ...]:
        """Rejected fragments by (decision, category)."""
        return self._identity_errors

    def transition_counts(self) -> Counter[tuple[Transition, IdKind]]:
        """How often each (transition, incoming id kind) pair occurred: the metric's input."""
        counts: Counter[tuple[Transition, IdKind]] = Counter()
        for decision, count in self._decision_counts:
            counts[decision.transition, decision.id_kind] += count
        return counts

    def identity_errors(self) -> Counter[tuple[ErrorCategory, IdKind, bool, bool]]:
        """Rejected fragments by (category, id kind, prior id present, empty): the metric's input."""
        counts: Counter[tuple[ErrorCategory, IdKind, bool, bool]] = Counter()
        for (decision, category), count in self._identity_errors:
            counts[category, decision.id_kind, decision.prior_id_present, decision.id_empty] += count
        return counts
