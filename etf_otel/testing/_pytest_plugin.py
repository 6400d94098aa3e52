"""The pytest plugin of etf-otel: the ``etf_capture`` fixture.

pytest loads this module in every test session of every environment where etf-otel is
installed (entry point ``pytest11``), most of them not about etf-otel at all, and the base
install has no OpenTelemetry SDK. So it imports nothing but pytest here; the SDK is imported
when a test asks for the fixture, and its absence fails that test with what to install.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from etf_otel.testing._capture import Capture

__all__ = ["etf_capture"]


@pytest.fixture
def etf_capture() -> Iterator[Capture]:
    """In-memory tracer and meter providers for one test (see :func:`etf_otel.testing.capture`).

    Pass ``etf_capture.tracer_provider`` and ``etf_capture.meter_provider`` to the instrumentor,
    then read ``etf_capture.spans(...)`` and ``etf_capture.points(...)``.
    """
    from etf_otel.testing._capture import Capture

    try:
        capture = Capture()
    except ModuleNotFoundError as missing:
        pytest.fail(str(missing), pytrace=False)
    with capture:
        yield capture
