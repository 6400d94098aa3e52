"""The pure rules: call identity, the slot model, the result and the vocabulary (no OpenTelemetry).

What a protocol adapter is built on (:class:`ResponseSlots`, :class:`IdentityRules`) and what
every layer above reads (:class:`AssemblyResult` and the closed enums its fields take). The
package ``etf_otel`` re-exports the names an application needs most; this is the full set.
"""

from typing import Final

from etf_otel.core import _slots
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
    "COMPILED",
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

COMPILED: Final = _slots.__file__.endswith((".so", ".pyd"))
"""Whether this build's core and protocols are compiled by mypyc, the optional accelerator
(docs/performance.md): the same rules and results, fewer instructions per event."""
