"""A stream iterable both ways (LiteLLM's ``CustomStreamWrapper``) is observed whichever way it is read."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from etf_otel.instrumentation import ObservedDualStream
from etf_otel.testing.chat import chunk, finished, fragment
from tests.conftest import Captured

CHUNKS = finished(
    chunk(fragment(0, "call_a", "get_weather", '{"city":')),
    chunk(fragment(0, None, arguments='"Paris"}')),
    chunk(fragment(1, "call_b", "get_time", '{"tz":"CET"}')),
)


class BothWays:
    """Iterable with ``for`` and ``async for``, each over the same chunks (as LiteLLM's wrapper is)."""

    def __init__(self) -> None:
        self._sync = iter(CHUNKS)
        self._async = iter(CHUNKS)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return next(self._sync)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        try:
            return next(self._async)
        except StopIteration:
            raise StopAsyncIteration from None


def recorded(captured: Captured) -> tuple[str, list[Any]]:
    (response,) = captured.spans("assemble_response")
    ids = [span.attributes["gen_ai.tool.call.id"] for span in captured.spans("assemble_tool_call")]
    return str(response.attributes["etf.stream.state"]), ids


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_iterable_both_ways_is_observed_either_way(captured: Captured, mode: str) -> None:
    observed = captured.instrumentation().stream(BothWays())
    assert isinstance(observed, ObservedDualStream) and isinstance(observed, BothWays)
    if mode == "sync":
        got = list(observed)
    else:

        async def read() -> list[Any]:
            return [item async for item in observed]

        got = asyncio.run(read())
    assert got == CHUNKS  # what the application reads is the stream's own, [DONE] included
    assert recorded(captured) == ("completed", ["call_a", "call_b"])


def test_a_dual_stream_left_unread_is_abandoned_when_collected(captured: Captured) -> None:
    observed = captured.instrumentation().stream(BothWays())
    next(observed)
    del observed
    gc.collect()
    (response,) = captured.spans("assemble_response")
    assert response.attributes["etf.stream.state"] == "abandoned"
