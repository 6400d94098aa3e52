"""A tool run by an agent framework, recorded as an execution of the call the rules preserved.

A framework (openai-agents, pydantic-ai, LangGraph, an SDK's automatic function calling)
assembles the model's calls itself and runs them itself: the id, name and arguments it runs
are its own assembly's, which may differ from what the rules preserved (docs/frameworks.md).
:class:`ToolRuns` finds the proposal a run answers and records it:

* **by id**: the preserved id the run carries, among the calls of the latest response finalized
  in this context (each keeps its own record: concurrent conversations may get the same ids),
  else in the registry of the setup that finalized it;
* **by content**: else the call of the context's latest response with the same argument value
  and the same name (or that name repeated into the one run), when exactly one has them (the
  framework kept another id than the rules, or made one up);
* **by id, anywhere**: else the id in the registry of any setup that finalized a response (a
  framework may run its tools in another task or thread than the one that read the stream).
  Only after the content: an id of another setup is weaker evidence than the context's latest
  response.

The execution span (one of ours, or the framework's own ``execute_tool`` span handed to
:meth:`ToolRuns.start`, which is enriched and never doubled) carries the *preserved* id and
links to the proposal; where the run differs from it the span gets one ``divergent_assembly``
event per kind (``etf.divergence.kind``, with the preserved ``gen_ai.tool.call.id``:
``id_replaced``, ``name_concatenated``, ``arguments_differ``...), which ``etf-otel audit``
reports. The framework's own id is never recorded when no proposal has it (it may be one the
rules refused). A framework that runs an id-less call under an id it made up (ADK) is matched by name and
order instead (:func:`positional_proposal`): the execution carries the call's slot and link, no id, and
the made-up id is drift (``id_invented`` on an ``etf.linkage.drift`` event), never a violation.
In guard mode a run that is not a valid proposal, or differs from it, is refused before it runs; the
integration answers the refusal through the framework's own tool-error channel.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from etf_otel import attributes as A
from etf_otel.core._divergence import DivergenceKind, id_kind, name_kind
from etf_otel.core._history import Drift, DriftKind
from etf_otel.core._linkage import Finding
from etf_otel.core._vocabulary import ErrorCategory, Phase
from etf_otel.errors import GuardRefusedError
from etf_otel.instrumentation import _open_calls as open_calls
from etf_otel.instrumentation import _positional as positional
from etf_otel.instrumentation._registry import ProposalRecord, guard_refusal
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._span_attributes import drift_attributes, put_call_id
from etf_otel.instrumentation._switches import _suppressed
from etf_otel.instrumentation._telemetry import Telemetry

__all__ = ["Proposal", "RunningTool", "ToolRuns", "find_proposal", "framework_span", "positional_proposal"]

_T = TypeVar("_T")


def _same(result: object) -> object:
    return result


@dataclass(frozen=True, slots=True)
class Proposal:
    """The proposal a framework's run answers, and how the run differs from it."""

    call_id: str | None
    record: ProposalRecord
    telemetry: Telemetry
    divergence: tuple[DivergenceKind, ...]
    slot: tuple[int, int] | None = None
    """``(choice, index)`` of an id-less call matched by name and order (:func:`positional_proposal`)."""
    drift: tuple[DriftKind, ...] = ()


def _record_by_id(
    call_id: str, latest: open_calls.LatestResponse | None, elsewhere: bool
) -> tuple[ProposalRecord, Telemetry] | None:
    """``call_id``'s record: the latest response's own call, else its setup's registry; ``elsewhere``:
    else any setup's."""
    candidates: list[Telemetry] = []
    if latest is not None:
        for call in latest.calls:
            if call.call_id == call_id and call.record is not None:  # this conversation's, not a concurrent one's
                return call.record, latest.telemetry
        candidates.append(latest.telemetry)
    if elsewhere:
        candidates += open_calls.setups()
    for telemetry in candidates:
        record = telemetry.proposals.get(call_id)
        if record is not None:
            return record, telemetry
    return None


def _by_content(
    latest: open_calls.LatestResponse | None, call_id: str | None, name: str | None, handed: int | None
) -> Proposal | None:
    """The one call of the latest response with that name and argument value, under whatever id it ran."""
    if latest is None or handed is None:
        return None
    same = [
        call
        for call in latest.calls
        if call.value_hash == handed and name_kind(call.name, name) in (None, DivergenceKind.NAME_CONCATENATED)
    ]
    if len(same) != 1:
        return None
    matched = same[0].record or latest.telemetry.proposals.get(same[0].call_id)
    if matched is None:
        return None
    kinds = [kind for kind in (id_kind(same[0].call_id, call_id), name_kind(same[0].name, name)) if kind is not None]
    return Proposal(same[0].call_id, matched, latest.telemetry, tuple(kinds))


def _by_id(
    call_id: str,
    name: str | None,
    handed: int | None,
    latest: open_calls.LatestResponse | None,
    found: tuple[ProposalRecord, Telemetry],
) -> Proposal:
    record, telemetry = found
    kinds = [kind for kind in (name_kind(record.name, name),) if kind is not None]
    proposed = next((call.value_hash for call in latest.calls if call.call_id == call_id), None) if latest else None
    proposed = record.value_hash if proposed is None else proposed
    if (proposed is not None and handed != proposed) or _ran_unparsed(record, proposed, handed):
        kinds.append(DivergenceKind.ARGUMENTS_DIFFER)
    return Proposal(call_id, record, telemetry, tuple(kinds))


def _ran_unparsed(record: ProposalRecord, proposed: int | None, handed: int | None) -> bool:
    """The proposal's arguments are not JSON (a cut stream) and the framework ran a JSON value (its own repair)."""
    return proposed is None and handed is not None and record.first_category is ErrorCategory.INVALID_ARGUMENTS


def find_proposal(call_id: str | None, name: str | None, arguments: object) -> Proposal | None:
    """The proposal a run of ``(call_id, name, arguments)`` answers (module docstring), ``None`` if none."""
    handed = open_calls.arguments_hash(arguments)
    latest = open_calls.latest()
    if not call_id:
        return _by_content(latest, call_id, name, handed)
    found = _record_by_id(call_id, latest, elsewhere=latest is None)
    if found is None:
        by_content = _by_content(latest, call_id, name, handed)
        if by_content is not None or latest is None:
            return by_content
        found = _record_by_id(call_id, None, elsewhere=True)
        if found is None:
            return None
    return _by_id(call_id, name, handed, latest, found)


def positional_proposal(call_id: str | None, name: str | None, arguments: object) -> Proposal | None:
    """The id-less call of the context's latest response a run of ``name`` answers, by name and order
    (``_positional``); ``call_id``, when the run has one, is the framework's own: drift ``id_invented``."""
    found = positional.take_latest(name)
    if found is None:
        return None
    telemetry, call = found
    record = call.record
    kinds: list[DivergenceKind] = []
    if record.value_hash is not None and open_calls.arguments_hash(arguments) != record.value_hash:
        kinds.append(DivergenceKind.ARGUMENTS_DIFFER)
    drift = (DriftKind.ID_INVENTED,) if call_id else ()
    return Proposal(None, record, telemetry, tuple(kinds), (call.choice, call.index), drift)


def framework_span(call_id: object) -> trace.Span | None:
    """The framework's own ``execute_tool`` span for the call ``call_id``, when it is the current span and
    recording (pydantic-ai's, Strands'): the one to enrich rather than open a second execution span."""
    span = trace.get_current_span()
    attributes = getattr(span, "attributes", None)
    if not span.is_recording() or attributes is None:
        return None
    if attributes.get(A.GEN_AI_OPERATION_NAME) != A.OPERATION_EXECUTE_TOOL:
        return None
    return span if attributes.get(A.GEN_AI_TOOL_CALL_ID) == call_id else None


def _enrich(span: trace.Span, proposal: Proposal | None) -> None:
    """The framework's execution ``span`` made the execution of ``proposal``: its preserved id and a link.

    Without a proposal it is left as the framework made it (its id is the framework's to record).
    """
    if proposal is None or not span.is_recording():
        return
    attributes: dict[str, AttributeValue] = {A.GEN_AI_TOOL_TYPE: A.TOOL_TYPE_FUNCTION}
    if proposal.call_id is not None:
        put_call_id(attributes, proposal.call_id)
    span.set_attributes(attributes)
    if proposal.record.span_context is not None:
        span.add_link(proposal.record.span_context)


def _refusal(call_id: str | None, proposal: Proposal | None) -> ErrorCategory | None:
    if proposal is None:
        return ErrorCategory.MISSING_ID if not call_id else ErrorCategory.ORPHANED_RESULT
    if not proposal.record.dispatchable:
        return proposal.record.first_category or ErrorCategory.TRUNCATED_STREAM
    if proposal.divergence:
        return ErrorCategory.DIVERGENT_ASSEMBLY
    return None


def _record_difference(telemetry: Telemetry, span: trace.Span, proposal: Proposal, name: str | None) -> None:
    """How the run differs from its proposal: violations (``divergent_assembly``), drift, and its slot."""
    if proposal.divergence:
        telemetry.record_divergence([kind.value for kind in proposal.divergence], span, proposal.call_id)
    if proposal.drift:
        drift = [Drift(kind, None, name) for kind in proposal.drift]
        telemetry.count_drift(drift)
        if span.is_recording():
            for entry in drift:
                span.add_event(A.EVENT_LINKAGE_DRIFT, drift_attributes(entry))
    if proposal.slot is not None and span.is_recording():
        span.set_attributes({A.ETF_CHOICE_INDEX: proposal.slot[0], A.ETF_TOOL_CALL_INDEX: proposal.slot[1]})


class RunningTool:
    """One framework tool run between its start and its end: its span (if any) and the guard's refusal."""

    __slots__ = (
        "_call_id",
        "_name",
        "_owned",
        "_record",
        "_span",
        "_started",
        "_telemetry",
        "_token",
        "proposal",
        "refusal",
    )

    def __init__(
        self,
        telemetry: Telemetry,
        call_id: str | None,
        name: str | None,
        arguments: object,
        guard: bool,
        span: trace.Span | None = None,
        invented: str | None = None,
    ):
        self.refusal: ErrorCategory | None = None
        self.proposal: Proposal | None = None
        """The proposal the run answers (``None``: none found)."""
        self._span: trace.Span | None = None
        self._owned = span is None
        self._token: object = None
        self._name = name
        self._call_id = call_id
        self._record: ProposalRecord | None = None
        self._telemetry = telemetry
        self._started = time.perf_counter()
        proposal: Proposal | None = None
        try:
            if invented is not None:
                proposal = positional_proposal(invented, name, arguments)
            else:
                proposal = find_proposal(call_id, name, arguments)
            self.proposal = proposal
            self._record = proposal.record if proposal is not None else None
            if guard:
                self.refusal = _refusal(call_id, proposal)
        except Exception:
            if guard:  # fail closed, as a tool host's guard does
                self.refusal = ErrorCategory.ORPHANED_RESULT
        if _suppressed():
            return
        with internal_errors_swallowed("starting a framework's tool run"):
            self._start(proposal, call_id, span)

    def refused(self) -> GuardRefusedError:
        """The error of this run's refusal: the tool, the call's index, the category (and the rules' cause)."""
        category = self.refusal or ErrorCategory.ORPHANED_RESULT
        with internal_errors_swallowed("describing a refusal"):
            return guard_refusal(category, self._name, self._record, self._call_id, self._telemetry.proposals)
        return GuardRefusedError(category, tool=self._name)

    def _start(self, proposal: Proposal | None, call_id: str | None, existing: trace.Span | None) -> None:
        telemetry = proposal.telemetry if proposal is not None else self._telemetry
        self._telemetry = telemetry
        record = proposal.record if proposal is not None else None
        if existing is None:
            preserved = proposal.call_id if proposal is not None else call_id
            span = telemetry.start_execution(preserved, self._name, record, False)
            self._token = otel_context.attach(trace.set_span_in_context(span))
        else:
            span = existing
            _enrich(span, proposal)
        self._span = span
        if proposal is not None:
            _record_difference(telemetry, span, proposal, self._name)
        if self.refusal is not None:
            span.set_attribute(A.ETF_GUARD_REFUSED, True)
            if self.refusal.phase is Phase.LINKAGE:
                telemetry.record_findings([Finding(self.refusal)], span)

    def call(self, run: Callable[..., _T], *args: Any, result_of: Callable[[_T], object] = _same, **kwargs: Any) -> _T:
        """``run(*args, **kwargs)``, ended with what it raised or returned (``result_of`` that, as recorded)."""
        try:
            result = run(*args, **kwargs)
        except BaseException as error:
            self.end(error)
            raise
        self.end(None, result_of(result))
        return result

    async def acall(
        self, run: Callable[..., Awaitable[_T]], *args: Any, result_of: Callable[[_T], object] = _same, **kwargs: Any
    ) -> _T:
        """:meth:`call` for a coroutine function."""
        try:
            result = await run(*args, **kwargs)
        except BaseException as error:
            self.end(error)
            raise
        self.end(None, result_of(result))
        return result

    def end(self, error: BaseException | None = None, result: object = None) -> None:
        """The run ended (raised ``error``, or returned ``result``); a refused run ends with its refusal."""
        span = self._span
        if span is None:
            return
        self._span = None
        refused = self.refusal.value if self.refusal is not None else None
        if not self._owned:  # the framework's span: it ends it and records its outcome
            with internal_errors_swallowed("ending a framework's tool run"):
                self._telemetry.record_execution_duration(self._name, self._started, error, refused)
            return
        with internal_errors_swallowed("ending a framework's tool run"):
            otel_context.detach(self._token)  # type: ignore[arg-type]
        with internal_errors_swallowed("ending a framework's tool run"):
            self._telemetry.end_execution(span, self._name, self._started, error, result, error_type=refused)
        if span.is_recording():  # end_execution failed before ending it
            span.end()


class ToolRuns:
    """Records the tool runs of one framework integration (the setup its ``instrument()`` built)."""

    def __init__(self, instrumentation: Instrumentation) -> None:
        self._instrumentation = instrumentation
        self._tracking = True
        open_calls.track()  # each context's latest response is what a run is matched in
        if instrumentation.guard:  # proposals keep the hash a guard compares parsed arguments with
            instrumentation.telemetry.guarding = True

    def close(self) -> None:
        """The integration is uninstrumented: stop asking for each context's latest response."""
        if self._tracking:
            self._tracking = False
            open_calls.untrack()

    def start(
        self,
        call_id: str | None,
        name: str | None,
        arguments: object,
        span: trace.Span | None = None,
        guarded: bool = True,
        positional: bool = False,
    ) -> RunningTool:
        """A run is about to start: decide the guard and open its span (or enrich ``span``, the
        framework's own execution span, which it ends). ``guarded=False``: a dispatch the framework
        refuses itself (no tool runs), which the guard leaves alone. ``positional``: the run's id is the
        framework's own, made up for an id-less call (:func:`positional_proposal`). Never raises."""
        setup = self._instrumentation
        invented = call_id if positional else None  # never the run's id: only the drift recorded names it
        run_id = None if positional else call_id
        return RunningTool(setup.telemetry, run_id, name, arguments, setup.guard and guarded, span, invented)

    def run(self, call_id: str | None, name: str | None, arguments: object, run: Callable[[], _T]) -> _T:
        """``run()`` recorded; raises :class:`GuardRefusedError` instead when the guard refuses it."""
        running = self.start(call_id, name, arguments)
        if running.refusal is not None:
            running.end()
            raise running.refused()
        return running.call(run)

    async def arun(
        self, call_id: str | None, name: str | None, arguments: object, run: Callable[[], Awaitable[_T]]
    ) -> _T:
        """:meth:`run` for a coroutine."""
        running = self.start(call_id, name, arguments)
        if running.refusal is not None:
            running.end()
            raise running.refused()
        return await running.acall(run)
