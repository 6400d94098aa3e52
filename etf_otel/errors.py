"""The one exception tree of etf-otel.

::

    EtfOtelError                  anything etf-otel itself raises on purpose
    ├── UnreadableInputError      input a reader cannot use (the commands exit 2 on it)
    │   ├── RecordingError        a recorded stream for ``replay``
    │   ├── OtlpInputError        exported OTLP JSON traces
    │   ├── PhoenixError          an Arize Phoenix server
    │   └── SqlAuditError         a SQL engine or its table
    └── GuardRefusedError         guard mode refused a call that is not a valid proposal

The instrumentation never raises into the application except :class:`GuardRefusedError`
in opt-in guard mode, so catching ``EtfOtelError`` around a wrapped host catches every
refusal, and catching ``UnreadableInputError`` around a reader catches every input it
cannot read. ``str()`` of each is a one-line reason that carries no raw id or argument.
"""

from __future__ import annotations

from etf_otel.core._vocabulary import ErrorCategory

__all__ = [
    "EtfOtelError",
    "GuardRefusedError",
    "OtlpInputError",
    "PhoenixError",
    "RecordingError",
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

    ``category`` is the low-cardinality reason (an error category). The message names the
    category only, never the id or the arguments.
    """

    def __init__(self, category: ErrorCategory) -> None:
        super().__init__(f"etf-otel guard refused to execute a tool call: {category.value}")
        self.category = category
