"""etf-otel: make streamed LLM tool calls observable and trustworthy.

The pure core (identity rules, slot model, reference assembler) imports no
OpenTelemetry; the instrumentation wraps any assembler and any host around it.
"""

from etf_otel._version import __version__
from etf_otel.core._identity import ABSENT, CompatibilityRule, IdentityRules
from etf_otel.core._linkage import Conversation, Finding
from etf_otel.core._results import AssemblyResult, Rejection, ToolCall
from etf_otel.core._slots import ResponseSlots
from etf_otel.core._vocabulary import ErrorCategory, FragmentDiagnostic, IdKind, StreamState, Transition, Verdict
from etf_otel.errors import EtfOtelError, GuardRefusedError, RequestPairingError, UnreadableInputError
from etf_otel.protocols._chat_completions import DONE, ReferenceAssembler, assemble

__all__ = [
    "ABSENT",
    "DONE",
    "AssemblyResult",
    "CompatibilityRule",
    "Conversation",
    "ErrorCategory",
    "EtfOtelError",
    "Finding",
    "FragmentDiagnostic",
    "GuardRefusedError",
    "IdKind",
    "IdentityRules",
    "ReferenceAssembler",
    "Rejection",
    "RequestPairingError",
    "ResponseSlots",
    "StreamState",
    "ToolCall",
    "Transition",
    "UnreadableInputError",
    "Verdict",
    "__version__",
    "assemble",
]
