"""The one place that keeps telemetry errors away from the host application.

Everything the instrumentation does besides calling the wrapped object runs inside
:func:`internal_errors_swallowed`. A failure there (an exporter, a processor, a meter,
our own attribute code) is logged at DEBUG and dropped: the application must behave as
if etf-otel were not installed. Tests turn on strict mode so such failures fail them
instead of hiding.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["internal_errors_swallowed", "set_strict"]

logger = logging.getLogger("etf_otel")

_strict = False


def set_strict(strict: bool) -> bool:
    """Re-raise internal errors instead of swallowing them (for tests). Returns the old value."""
    global _strict
    previous, _strict = _strict, strict
    return previous


@contextmanager
def internal_errors_swallowed(what: str) -> Iterator[None]:
    """Run telemetry work; on error log ``what`` failed at DEBUG and carry on.

    The exception message is not logged: it could quote a value (an id, an argument)
    that must not reach logs. Only the type is.
    """
    try:
        yield
    except Exception as error:
        if _strict:
            raise
        logger.debug("etf-otel: %s failed (%s); telemetry skipped", what, type(error).__name__)
