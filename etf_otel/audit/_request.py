"""What a request's span recorded about its history: drift events (and, later, its pairing), read for the audit.

The instrumentation judges each request as it is sent and writes its verdict on the request's
``assemble_response`` span; the audit reads that verdict back rather than judge again, since exported spans
carry neither the request's messages (privacy) nor the proposals' arguments.

* ``etf.linkage.drift`` events: a history that is self-consistent but differs from the proposals
  (docs/categories.md, "Violation or drift"). Each is a ``history_drift`` finding. A ``refusal_answered``
  event naming a preserved id is also the answer to that call: the application answered a call the rules
  rejected or the guard refused, with an error result, which is what such a call should get.
* ``etf.request.pairing`` (``broken`` or ``refused_unexplained``) with its problems, reasons and whether the
  provider refused the request: a request the provider's pairing rules refuse (docs/protocols.md). Each such
  span is a ``request_pairing`` finding, whose ``detail`` lists them.

Pure: plain values in, plain values out (``etf_otel.audit._model`` builds the records with them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from etf_otel import attributes as A
from etf_otel.core._history import DriftKind
from etf_otel.core._pairing_model import PairingProblem, PairingReason

__all__ = [
    "DRIFT_KINDS",
    "PAIRING_PROBLEMS",
    "PAIRING_REASONS",
    "PAIRING_STATES",
    "REFUSAL_ANSWERED",
    "Drift",
    "Pairing",
    "read_drifts",
    "read_pairing",
]

DRIFT_KINDS: Final = frozenset(kind.value for kind in DriftKind)  # sql/audit_findings.sql lists the same
REFUSAL_ANSWERED: Final = DriftKind.REFUSAL_ANSWERED.value
PAIRING_STATES: Final = (A.PAIRING_BROKEN, A.PAIRING_REFUSED_UNEXPLAINED)
PAIRING_PROBLEMS: Final = frozenset(problem.value for problem in PairingProblem)  # the SQL lists the same
PAIRING_REASONS: Final = frozenset(reason.value for reason in PairingReason)  # the SQL lists the same

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


class Pairing(NamedTuple):
    """What a request's span recorded about its pairing: ``etf.request.pairing`` (one of :data:`PAIRING_STATES`),
    its problems and reasons (known values only, each once, sorted) and ``etf.request.pairing_refused``."""

    state: str
    problems: tuple[str, ...]
    reasons: tuple[str, ...]
    refused: bool

    @property
    def detail(self) -> str:
        """The ``detail`` of its ``request_pairing`` finding (``sql/audit_findings.sql`` writes the same)."""
        text = self.state
        if self.problems:
            text += f": {', '.join(self.problems)}"
        if self.reasons:
            text += f"; reasons {', '.join(self.reasons)}"
        if self.refused:
            text += "; refused by the provider"
        return text


def _known(value: object, known: frozenset[str]) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(sorted({item for item in value if isinstance(item, str) and item in known}))


def read_pairing(attributes: Mapping[str, object]) -> Pairing | None:
    """The pairing a span recorded, or ``None`` when its request was consistent (or it is no request's span)."""
    state = attributes.get(A.ETF_REQUEST_PAIRING)
    if state not in PAIRING_STATES:
        return None
    return Pairing(
        str(state),
        _known(attributes.get(A.ETF_REQUEST_PAIRING_PROBLEMS), PAIRING_PROBLEMS),
        _known(attributes.get(A.ETF_REQUEST_PAIRING_REASONS), PAIRING_REASONS),
        attributes.get(A.ETF_REQUEST_PAIRING_REFUSED) is True,
    )
