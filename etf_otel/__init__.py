"""etf-otel: make streamed LLM tool calls observable and trustworthy.

The pure core (identity rules, slot model, reference assembler) imports no
OpenTelemetry; the instrumentation wraps any assembler and any host around it.
"""

from ._version import __version__
from .assembler import DONE, ReferenceAssembler, assemble
from .diagnostics import ErrorCategory, FragmentDiagnostic, IdKind, StreamState, Transition, Verdict
from .identity import ABSENT, CompatibilityRule, IdentityRules
from .slots import AssemblyResult, Rejection, ResponseSlots, ToolCall

__all__ = [
    "ABSENT",
    "DONE",
    "AssemblyResult",
    "CompatibilityRule",
    "ErrorCategory",
    "FragmentDiagnostic",
    "IdKind",
    "IdentityRules",
    "ReferenceAssembler",
    "Rejection",
    "ResponseSlots",
    "StreamState",
    "ToolCall",
    "Transition",
    "Verdict",
    "__version__",
    "assemble",
]
