"""The bounded state every wrapper of one setup shares: proposals by call id, tool name labels.

Both are bounded so that a long-running process keeps constant memory and metric
cardinality: the registry forgets its oldest ids first, the cap turns names beyond its
limit into ``_OTHER``.
"""

from __future__ import annotations

import json
import threading
from typing import Final, NamedTuple

from opentelemetry.trace import SpanContext

from etf_otel import attributes as A
from etf_otel.core._vocabulary import ErrorCategory, Verdict
from etf_otel.errors import GuardRefusedError

__all__ = ["ProposalRecord", "ProposalRegistry", "ToolNameCap", "guard_refusal"]


class ProposalRecord(NamedTuple):
    """What this process knows about one preserved call id, for links and guard mode.

    A named tuple: one is made per finalized call, and a tuple is built several times
    faster than a frozen dataclass.
    """

    span_context: SpanContext | None
    dispatchable: bool
    verdict: Verdict
    first_category: ErrorCategory | None
    """The call's own first category, or else the one that blocked its response."""
    name: str | None
    arguments_hash: int
    """``hash`` of the arguments text as assembled."""
    value_hash: int | None = None
    """``hash`` of the arguments' canonical JSON, kept only by setups that guard or while an integration
    matches framework runs (``_open_calls.tracking()``): a host may be handed the arguments as a parsed
    value (Anthropic's ``tool_use`` ``input``) or re-serialized, in another context than the response's."""
    call_index: int | None = None
    """The call's index in its response (``tool_calls[].index``, ``output_index``, block index), for a refusal."""


_CANONICAL_JSON: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_value_hash(value: object) -> int | None:
    """``hash`` of ``value`` as canonical JSON (sorted keys, no spaces), ``None`` if it is not JSON."""
    try:
        return hash(_CANONICAL_JSON.encode(value))
    except (TypeError, ValueError, RecursionError):
        return None


def arguments_value_hash(arguments: str) -> int | None:
    """:func:`canonical_value_hash` of the JSON text ``arguments``, ``None`` if it does not parse."""
    try:
        return canonical_value_hash(json.loads(arguments))
    except (ValueError, RecursionError):
        return None


_JOINED_CUTS: Final = 256
"""How long a first id :meth:`ProposalRegistry.joined` looks for (provider ids are far shorter)."""


def guard_refusal(
    category: ErrorCategory,
    name: str | None,
    record: ProposalRecord | None,
    call_id: str | None,
    registry: ProposalRegistry | None,
) -> GuardRefusedError:
    """The error a guard raises for ``category``: the tool's name, the call's index, and the rules'
    cause when the call's id is unknown because the rules rejected a second id of that call."""
    cause = None
    if record is None and call_id and registry is not None and category is ErrorCategory.ORPHANED_RESULT:
        record = registry.joined(call_id)
        cause = ErrorCategory.ID_CONFLICT if record is not None else None
    return GuardRefusedError(category, tool=name, index=record.call_index if record is not None else None, cause=cause)


class ProposalRegistry:
    """Bounded map from preserved call id to its record (oldest forgotten first).

    A plain dict keeps insertion order; a re-proposed id is moved to the end by removing it first.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._records: dict[str, ProposalRecord] = {}
        self._lock = threading.Lock()

    def add(self, call_id: str, record: ProposalRecord) -> None:
        records = self._records
        with self._lock:
            records.pop(call_id, None)
            records[call_id] = record
            if len(records) > self._capacity:
                del records[next(iter(records))]

    def get(self, call_id: str) -> ProposalRecord | None:
        with self._lock:  # ``add`` removes a re-proposed id before inserting it again
            return self._records.get(call_id)

    def joined(self, call_id: str) -> ProposalRecord | None:
        """The ``id_conflict`` call whose preserved id starts ``call_id``, if any: an SDK that appends
        a call's second id to its first (the ``openai`` SDK's accumulators) hands the host both ids run
        together, which no proposal has. Only the first :data:`_JOINED_CUTS` cuts are tried."""
        records = self._records
        with self._lock:
            for cut in range(min(len(call_id) - 1, _JOINED_CUTS), 0, -1):
                record = records.get(call_id[:cut])
                if record is not None and record.first_category is ErrorCategory.ID_CONFLICT:
                    return record
        return None

    def clear(self) -> None:
        """Forget every record (guard mode then refuses every earlier call as orphaned)."""
        with self._lock:
            self._records.clear()


class ToolNameCap:
    """Bounds the distinct ``gen_ai.tool.name`` values on metrics (the rest become ``_OTHER``) and
    their length (cut to ``MAX_RECORDED_CHARS``, like the spans' names; a metric has no flag)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, name: str | None) -> str:
        if not name:
            return A.TOOL_NAME_OTHER
        if len(name) > A.MAX_RECORDED_CHARS:  # as on the spans; the set keeps no long name either
            name = name[: A.MAX_RECORDED_CHARS]
        if name in self._seen:
            return name
        with self._lock:
            if len(self._seen) < self._limit:
                self._seen.add(name)
                return name
        return A.TOOL_NAME_OTHER
