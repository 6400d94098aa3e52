"""etf-otel: make streamed LLM tool calls observable and trustworthy.

The pure core (identity rules, slot model, reference assembler) imports no
OpenTelemetry; the instrumentation wraps any assembler and any host around it.
"""

from etf_otel._version import __version__
from etf_otel.core.identity import ABSENT, CompatibilityRule, IdentityRules
from etf_otel.core.linkage import Conversation, Finding
from etf_otel.core.results import AssemblyResult, Rejection, ToolCall
from etf_otel.core.slots import ResponseSlots
from etf_otel.core.vocabulary import ErrorCategory, FragmentDiagnostic, IdKind, StreamState, Transition, Verdict
from etf_otel.errors import EtfOtelError, GuardRefusedError, UnreadableInputError
from etf_otel.protocols.chat_completions import DONE, ReferenceAssembler, assemble

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
    "ResponseSlots",
    "StreamState",
    "ToolCall",
    "Transition",
    "UnreadableInputError",
    "Verdict",
    "__version__",
    "assemble",
]
