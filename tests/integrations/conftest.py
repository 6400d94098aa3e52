"""Fixtures the integration tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from etf_otel.testing import LocalChatServer


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    """The local SSE server on 127.0.0.1, stopped after the test."""
    with LocalChatServer() as srv:
        yield srv
