"""What a request's span recorded about its history: drift events (and, later, its pairing), read for the audit.

The instrumentation judges each request as it is sent and writes its verdict on the request's
``assemble_response`` span; the audit reads that verdict back rather than judge again, since exported spans
carry neither the request's messages (privacy) nor the proposals' arguments.

* ``etf.linkage.drift`` events: a history that is self-consistent but differs from the proposals
  (docs/categories.md, "Violation or drift"). Each is a ``history_drift`` finding. A ``refusal_answered``
  event naming a preserved id is also the answer to that call: the application answered a call the rules
  rejected or the guard refused, with an error result, which is what such a call should get.

Pure: plain values in, plain values out (``etf_otel.audit._model`` builds the records with them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from etf_otel import attributes as A
from etf_otel.core._history import DriftKind

__all__ = ["DRIFT_KINDS", "REFUSAL_ANSWERED", "Drift", "read_drifts"]

DRIFT_KINDS: Final = frozenset(kind.value for kind in DriftKind)  # sql/audit_findings.sql lists the same
REFUSAL_ANSWERED: Final = DriftKind.REFUSAL_ANSWERED.value

Drift = tuple[str | None, str | None]
"""One ``etf.linkage.drift`` event: its kind (``None`` when absent or not one of :data:`DRIFT_KINDS`) and the
preserved call id it names (``None`` when it names none: the instrumentation records only preserved ids)."""


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def read_drifts(events: Sequence[tuple[str, Mapping[str, object]]]) -> tuple[Drift, ...]:
    """The ``etf.linkage.drift`` events of a span, in their order."""
    drifts: list[Drift] = []
    for name, attributes in events:
        if name == A.EVENT_LINKAGE_DRIFT:
            kind = _string(attributes.get(A.ETF_DIVERGENCE_KIND))
            drifts.append((kind if kind in DRIFT_KINDS else None, _string(attributes.get(A.GEN_AI_TOOL_CALL_ID))))
    return tuple(drifts)
