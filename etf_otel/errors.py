"""The one exception tree of etf-otel.

::

    EtfOtelError                  anything etf-otel itself raises on purpose
    ├── UnreadableInputError      input a reader cannot use (the commands exit 2 on it)
    │   ├── RecordingError        a recorded stream for ``replay``
    │   ├── OtlpInputError        exported OTLP JSON traces
    │   ├── PhoenixError          an Arize Phoenix server
    │   └── SqlAuditError         a SQL engine or its table
    ├── GuardRefusedError         guard mode refused a call that is not a valid proposal
    └── RequestPairingError       the request guard refused a request whose provider would refuse it

The instrumentation never raises into the application except :class:`GuardRefusedError`
in opt-in guard mode and :class:`RequestPairingError` with the opt-in request guard, so
catching ``EtfOtelError`` around a wrapped host or SDK call catches every refusal, and catching
``UnreadableInputError`` around a reader catches every input it cannot read. ``str()`` of each is
a one-line reason that carries no raw id or argument (a proposed id the model sent at most).
"""

from __future__ import annotations

from etf_otel.core._pairing_model import PairingCheck, describe
from etf_otel.core._vocabulary import ErrorCategory

__all__ = [
    "EtfOtelError",
    "GuardRefusedError",
    "OtlpInputError",
    "PhoenixError",
    "RecordingError",
    "RequestPairingError",
    "SqlAuditError",
    "UnreadableInputError",
]


class EtfOtelError(Exception):
    """The root: every exception etf-otel raises on purpose derives from it."""


class UnreadableInputError(EtfOtelError):
    """Input that cannot be read; ``str()`` is a one-line reason for the user."""


class RecordingError(UnreadableInputError):
    """A recorded stream that cannot be read as any supported protocol."""


class OtlpInputError(UnreadableInputError):
    """Input that cannot be read as OTLP JSON traces."""


class PhoenixError(UnreadableInputError):
    """A Phoenix server that cannot be reached or read."""


class SqlAuditError(UnreadableInputError):
    """Bad usage, an unreachable server or an unreadable table of the SQL audit."""


class GuardRefusedError(EtfOtelError):
    """Guard mode refused to execute a call that is not a valid proposal.

    ``category`` is the low-cardinality reason (an error category, the ``error.type`` of the
    refused execution). The message says what was refused and why: the tool's name as the host
    was handed it (cut to 64 characters, escaped), the call's index in its response when a
    response proposed it, the category, and in plain words what it means. ``cause`` is the
    category of the identity rules behind a refusal whose own category is a linkage one (a call
    whose id joins the two ids of an ``id_conflict``: ``orphaned_result``, caused by
    ``id_conflict``). Never the id or the arguments.
    """

    def __init__(
        self,
        category: ErrorCategory,
        *,
        tool: str | None = None,
        index: int | None = None,
        cause: ErrorCategory | None = None,
    ) -> None:
        self.category = category
        self.tool = tool
        self.index = index
        self.cause = cause
        super().__init__(_refusal_message(category, tool, index, cause))


_TOOL_SHOWN = 64

_WHY: dict[ErrorCategory, str] = {
    ErrorCategory.MISSING_ID: "it has no call id to match a proposal",
    ErrorCategory.ORPHANED_RESULT: "its id is no call of a response this process saw",
    ErrorCategory.DIVERGENT_ASSEMBLY: "its name or arguments are not the ones the response proposed",
    ErrorCategory.ID_CONFLICT: "the stream changed this call's id mid-call",
}


def _refusal_message(category: ErrorCategory, tool: str | None, index: int | None, cause: ErrorCategory | None) -> str:
    which = [f"tool {tool[:_TOOL_SHOWN]!r}"] if tool is not None else []
    if index is not None:
        which.append(f"index {index} of its response")
    what = f"a tool call ({', '.join(which)})" if which else "a tool call"
    shown = cause if cause is not None else category
    why = _WHY.get(shown, "the rules rejected this call, or the response it belongs to")
    if cause is not None and cause is not category:
        why += f", and the id handed over joins both: no proposal has it ({category.value})"
    return f"etf-otel guard refused to execute {what}: {shown.value}, {why}"


class RequestPairingError(EtfOtelError):
    """The request guard (``guard_requests``) refused to send a request whose history the provider refuses
    for its pairing of calls and results, before a byte of it was sent.

    ``check``: every problem found (:class:`~etf_otel.core._pairing_model.PairingCheck`). The message names
    the first one: its kind, its position in the request (``messages[3]``, ``input[5]``) and its reason, then
    how many more there are; an id only when it is one the model proposed (preserved).
    """

    def __init__(self, check: PairingCheck, container: str = "messages") -> None:
        self.check = check
        more = len(check.problems) - 1 + check.omitted
        first = describe(check.problems[0], container) if check.problems else "no problem"
        tail = f" (and {more} more)" if more > 0 else ""
        super().__init__(f"etf-otel refused to send a request its provider would refuse: {first}{tail}")
