"""The two switches every wrapper consults before observing anything.

* :func:`_disabled`: ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` names etf-otel, so every
  wrapping function returns what it was given, unchanged.
* :func:`_suppressed`: the current OpenTelemetry context suppresses instrumentation
  (an exporter sending spans, for example), so nothing new is observed in it.
"""

from __future__ import annotations

import os

from opentelemetry import context as otel_context

from etf_otel import attributes as A

__all__ = ["_disabled", "_suppressed"]

_DISABLED_NAMES = frozenset({"etf_otel", "etf-otel"})


def _disabled() -> bool:
    names = os.environ.get(A.ENV_DISABLED_INSTRUMENTATIONS)
    if not names:  # the usual case: checked on every request, so no split for it
        return False
    return any(name.strip() in _DISABLED_NAMES for name in names.split(","))


def _suppressed() -> bool:
    return bool(otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY))
