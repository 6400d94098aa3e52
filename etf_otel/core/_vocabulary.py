"""The closed vocabularies of etf-otel: error categories, id kinds and transitions.

Every value here may end up as a span attribute or a metric label, so every set is
closed and small (docs/categories.md and docs/telemetry.md). Nothing in this module can carry a raw id,
name or argument text: that is the privacy guarantee of the bounded diagnostics.

The enums subclass ``str`` so their members serialise to JSON and OpenTelemetry
attributes as their plain value without conversion.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import Enum
from typing import Final

__all__ = [
    "ErrorCategory",
    "FragmentDiagnostic",
    "IdKind",
    "Phase",
    "ResponseEnd",
    "StreamState",
    "Transition",
    "Verdict",
    "bounded_finish_reason",
]


class Phase(str, Enum):
    """Where in the life of a call a category is decided (docs/categories.md)."""

    IDENTITY = "identity"
    ASSEMBLY = "assembly"
    STREAM = "stream"
    LINKAGE = "linkage"


class ErrorCategory(str, Enum):
    """The closed list of docs/categories.md. Adding one is a contract change."""

    INITIAL_NULL = "initial_null"
    ID_CONFLICT = "id_conflict"
    EMPTY_AFTER_ESTABLISHED = "empty_after_established"
    UNSUPPORTED_ID_TYPE = "unsupported_id_type"
    MISSING_INDEX = "missing_index"
    NAME_CONFLICT = "name_conflict"
    UNKNOWN_SLOT = "unknown_slot"
    MISSING_ID = "missing_id"
    MISSING_NAME = "missing_name"
    INVALID_ARGUMENTS = "invalid_arguments"
    DUPLICATE_CALL_ID = "duplicate_call_id"
    SNAPSHOT_MISMATCH = "snapshot_mismatch"
    TRUNCATED_STREAM = "truncated_stream"
    INCOMPLETE_RESPONSE = "incomplete_response"
    ORPHANED_RESULT = "orphaned_result"
    UNANSWERED_CALL = "unanswered_call"
    DUPLICATE_RESULT = "duplicate_result"
    DIVERGENT_ASSEMBLY = "divergent_assembly"

    @property
    def phase(self) -> Phase:
        return _PHASES[self]


_PHASES = {
    **dict.fromkeys(
        (
            ErrorCategory.INITIAL_NULL,
            ErrorCategory.ID_CONFLICT,
            ErrorCategory.EMPTY_AFTER_ESTABLISHED,
            ErrorCategory.UNSUPPORTED_ID_TYPE,
            ErrorCategory.MISSING_INDEX,
            ErrorCategory.NAME_CONFLICT,
            ErrorCategory.UNKNOWN_SLOT,
        ),
        Phase.IDENTITY,
    ),
    **dict.fromkeys(
        (
            ErrorCategory.MISSING_ID,
            ErrorCategory.MISSING_NAME,
            ErrorCategory.INVALID_ARGUMENTS,
            ErrorCategory.DUPLICATE_CALL_ID,
            ErrorCategory.SNAPSHOT_MISMATCH,
        ),
        Phase.ASSEMBLY,
    ),
    ErrorCategory.TRUNCATED_STREAM: Phase.STREAM,
    ErrorCategory.INCOMPLETE_RESPONSE: Phase.STREAM,
    **dict.fromkeys(
        (
            ErrorCategory.ORPHANED_RESULT,
            ErrorCategory.UNANSWERED_CALL,
            ErrorCategory.DUPLICATE_RESULT,
            ErrorCategory.DIVERGENT_ASSEMBLY,
        ),
        Phase.LINKAGE,
    ),
}


class IdKind(str, Enum):
    """The JSON kind of an incoming ``id`` value (``etf.id.kind``)."""

    ABSENT = "absent"
    NULL = "null"
    STRING = "string"
    NUMBER = "number"
    BOOLEAN = "boolean"
    ARRAY = "array"
    OBJECT = "object"


class Transition(str, Enum):
    """What an identity decision did to the slot (``etf.id.transition``).

    ``KEEP_EMPTY``, ``INFER_INDEX``, ``BUFFER_EARLY`` and ``DROP_LATE`` belong to opt-in
    compatibility rules: they have their own names so that telemetry shows every time a
    rule was needed.
    """

    AWAIT = "await"
    ESTABLISH = "establish"
    REPLACE_EMPTY = "replace_empty"
    KEEP_OMITTED = "keep_omitted"
    KEEP_NULL = "keep_null"
    KEEP_IDENTICAL = "keep_identical"
    KEEP_EMPTY = "keep_empty"
    INFER_INDEX = "infer_index"
    BUFFER_EARLY = "buffer_early"
    DROP_LATE = "drop_late"
    POSITIONAL = "positional"
    """An id-less call whose key is its identity (Gemini's default; counted once per slot)."""
    DROP_REPEAT = "drop_repeat"
    """A repeated whole call set aside by ``drop_repeated_call`` (Gemini)."""
    ABSENT_ARGUMENTS = "absent_arguments"
    """A call of a complete body without an ``arguments`` key, read as ``{}`` by ``absent_arguments_in_body``
    (counted once per call)."""
    REJECT = "reject"


class ResponseEnd(str, Enum):
    """How a protocol says its response ended, when it ended with a terminal event.

    A response that never got one (end of input, a splice) has no end: it is truncated.
    """

    COMPLETE = "complete"
    """The response is whole (Chat ``[DONE]``/finish reasons, ``response.completed``, ``message_stop``)."""
    INCOMPLETE = "incomplete"
    """It ended properly but says its output was cut or withheld: ``incomplete_response``."""
    FAILED = "failed"
    """It ended with an error (``response.failed``, an ``error`` event): stream state ``failed``."""


class Verdict(str, Enum):
    """Outcome of final validation for one call (``etf.tool_call.verdict``)."""

    PROPOSED = "proposed"
    REJECTED = "rejected"


class StreamState(str, Enum):
    """How a response's stream ended (``etf.stream.state``).

    The slot model decides ``completed``, ``truncated``, or ``failed`` when the protocol
    says so (``response.failed``, an ``error`` event); ``abandoned``, and ``failed`` for a
    stream that raised, are observed by the stream wrapper, which sees the consumer and the
    iterator.
    """

    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABANDONED = "abandoned"
    FAILED = "failed"


VALUE_OF: Final[dict[Enum, str]] = {
    member: member.value for kind in (ErrorCategory, IdKind, Transition, Verdict, StreamState) for member in kind
}
"""``member.value`` as one dict read, for the per-call paths: ``Enum.value`` is a Python-level
descriptor (about 120 ns a read on CPython 3.11), a dict read a fraction of that. Members of
different enums that are equal as strings share a key, and then their value too."""

OTHER: Final = "_OTHER"
"""The one value every bounded attribute falls back to for anything outside its closed set."""
OTHER_FINISH_REASON: Final = OTHER


def bounded_finish_reason(reason: str, known: AbstractSet[str]) -> str:
    """``reason`` when ``known`` holds it, else ``_OTHER``: anything else is raw provider output.

    ``known`` is what the wire protocols document (``etf_otel.protocols.known_finish_reasons``):
    the sets are theirs, so a new protocol brings its own.
    """
    return reason if reason in known else OTHER_FINISH_REASON


@dataclass(frozen=True, slots=True)
class FragmentDiagnostic:
    """The bounded description of one identity decision (docs/telemetry.md).

    ``choice``/``index`` are ``None`` when the fragment had no usable index. The raw id,
    name and arguments are deliberately not fields of this class.
    """

    choice: int | None
    index: int | None
    fragment: int
    id_kind: IdKind
    prior_id_present: bool
    id_empty: bool
    transition: Transition
    category: ErrorCategory | None
