"""The pure rules: call identity, the slot model, the result and the vocabulary (no OpenTelemetry).

What a protocol adapter is built on (:class:`ResponseSlots`, :class:`IdentityRules`) and what
every layer above reads (:class:`AssemblyResult` and the closed enums its fields take). The
package ``etf_otel`` re-exports the names an application needs most; this is the full set.
"""

from etf_otel.core._divergence import DivergenceKind
from etf_otel.core._identity import ABSENT, CompatibilityRule, IdentityRules
from etf_otel.core._linkage import Conversation, Finding
from etf_otel.core._results import AssemblyResult, RejectedFragment, Rejection, ToolCall
from etf_otel.core._slots import ResponseSlots
from etf_otel.core._vocabulary import (
    ErrorCategory,
    FragmentDiagnostic,
    IdKind,
    Phase,
    ResponseEnd,
    StreamState,
    Transition,
    Verdict,
)

__all__ = [
    "ABSENT",
    "AssemblyResult",
    "CompatibilityRule",
    "Conversation",
    "DivergenceKind",
    "ErrorCategory",
    "Finding",
    "FragmentDiagnostic",
    "IdKind",
    "IdentityRules",
    "Phase",
    "RejectedFragment",
    "Rejection",
    "ResponseEnd",
    "ResponseSlots",
    "StreamState",
    "ToolCall",
    "Transition",
    "Verdict",
]
