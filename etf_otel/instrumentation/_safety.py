"""The one place that keeps telemetry errors away from the host application.

Everything the instrumentation does besides calling the wrapped object runs inside
:func:`internal_errors_swallowed`. A failure there (an exporter, a processor, a meter,
our own attribute code) is logged at DEBUG and dropped: the application must behave as
if etf-otel were not installed. Tests turn on strict mode so such failures fail them
instead of hiding.
"""

from __future__ import annotations

import logging
from types import TracebackType

__all__ = ["internal_errors_swallowed", "set_strict"]

logger = logging.getLogger("etf_otel")

_strict = False


def set_strict(strict: bool) -> bool:
    """Re-raise internal errors instead of swallowing them (for tests). Returns the old value."""
    global _strict
    previous, _strict = _strict, strict
    return previous


class internal_errors_swallowed:  # used like a function: ``with internal_errors_swallowed(...)``
    """Run telemetry work; on error log ``what`` failed at DEBUG and carry on.

    The exception message is not logged: it could quote a value (an id, an argument)
    that must not reach logs. Only the type is. A plain class rather than a
    ``@contextmanager`` generator: it is entered several times per response and per call,
    and a generator-based manager costs about ten times more to enter.
    """

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        if exc_type is None or not issubclass(exc_type, Exception) or _strict:
            return False
        logger.debug("etf-otel: %s failed (%s); telemetry skipped", self.what, exc_type.__name__)
        return True
