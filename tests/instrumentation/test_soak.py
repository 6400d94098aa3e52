"""Soak: 1,000 concurrent asyncio streams plus 8 threads of synchronous streams, interleaved.

Every stream runs inside its own ``consumer`` span carrying its number and slot count;
a validating span processor checks, as spans start and end (so the long form holds no
growing state), that:

* every ``assemble_response`` span is the child of a consumer, exactly one per consumer;
* every ``assemble_tool_call`` span is the child of that response and carries exactly that
  stream's id (``call-{stream}-{index}``), name and arguments for its index, once per index;
* every span that started ends exactly once, and none is left open when the soak ends.

Instrumentation memory (``tracemalloc`` allocations made by ``etf_otel`` code) is measured
after a warm-up that fills the bounded shared state (the proposal registry), and again after
the soak: it must return to that baseline. Throughput is reported as streams/s and fragments/s.

Short form here (a few seconds); the long form is ``python benchmarks/soak.py --seconds 300``.
"""

from __future__ import annotations

import asyncio
import gc
import random
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

import etf_otel
from etf_otel import attributes as A
from etf_otel.instrumentation import Instrumentation
from etf_otel.instrumentation._safety import set_strict
from etf_otel.instrumentation._telemetry import DEFAULT_MAX_PROPOSALS, Telemetry

from .test_concurrency import interleaved_stream, slot_arguments

ETF_DIR = str(Path(etf_otel.__file__).resolve().parent)
CONSUMER = "consumer"
MAX_ERRORS = 50
THREAD_BASE = 10**9
"""Synchronous stream numbers start at ``THREAD_BASE * (thread + 1)``; asyncio ones at 0."""


class Validator(SpanProcessor):
    """Checks stream/slot ownership and span balance incrementally; keeps only in-flight state."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.open: set[int] = set()
        self.consumers: dict[int, tuple[int, int, bool]] = {}
        """consumer span id -> (stream, slots, abandoned)"""
        self.responses: dict[int, int] = {}
        """response span id -> consumer span id"""
        self.responses_of: dict[int, int] = {}
        self.calls_of: dict[int, set[int]] = {}
        self.errors: list[str] = []
        self.started = self.ended = 0
        self.streams = self.fragments = self.calls = 0

    def _error(self, message: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(message)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        context = span.get_span_context()
        with self._lock:
            self.started += 1
            if context.span_id in self.open:
                self._error(f"span {context.span_id:x} started twice")
            self.open.add(context.span_id)
            attributes = span.attributes or {}
            if span.name == CONSUMER:
                self.consumers[context.span_id] = (
                    int(attributes["soak.stream"]),  # type: ignore[arg-type]
                    int(attributes["soak.slots"]),  # type: ignore[arg-type]
                    bool(attributes["soak.abandoned"]),
                )
                self.responses_of[context.span_id] = 0
                self.calls_of[context.span_id] = set()
            elif span.name == A.SPAN_ASSEMBLE_RESPONSE:
                parent = span.parent.span_id if span.parent else None
                if parent not in self.consumers:
                    self._error(f"response span {context.span_id:x} is not the child of a consumer")
                    return
                self.responses[context.span_id] = parent
                self.responses_of[parent] += 1

    def on_end(self, span: ReadableSpan) -> None:
        context = span.get_span_context()
        attributes = span.attributes or {}
        with self._lock:
            self.ended += 1
            if context.span_id not in self.open:
                self._error(f"span {context.span_id:x} ({span.name}) ended twice or never started")
                return
            self.open.discard(context.span_id)
            if span.name.startswith(A.SPAN_ASSEMBLE_TOOL_CALL):
                self._check_call(span, attributes)
            elif span.name == A.SPAN_ASSEMBLE_RESPONSE:
                consumer = self.responses.pop(context.span_id, None)
                if consumer is None:
                    return
                stream, slots, abandoned = self.consumers[consumer]
                state = attributes.get(A.ETF_STREAM_STATE)
                if state != ("abandoned" if abandoned else "completed"):
                    self._error(f"stream {stream}: state {state}")
                if not abandoned and attributes.get(A.ETF_STREAM_SLOTS) != slots:
                    self._error(f"stream {stream}: {attributes.get(A.ETF_STREAM_SLOTS)} slots, expected {slots}")
                self.fragments += int(attributes.get(A.ETF_STREAM_FRAGMENTS, 0))  # type: ignore[arg-type]
            elif span.name == CONSUMER:
                stream, slots, abandoned = self.consumers.pop(context.span_id)
                responses = self.responses_of.pop(context.span_id)
                calls = self.calls_of.pop(context.span_id)
                self.streams += 1
                if responses != 1:
                    self._error(f"stream {stream}: {responses} assemble_response spans")
                if abandoned:
                    if not calls <= set(range(slots)):
                        self._error(f"abandoned stream {stream}: call indices {sorted(calls)}")
                elif calls != set(range(slots)):
                    self._error(f"stream {stream}: call indices {sorted(calls)}, expected {slots}")

    def _check_call(self, span: ReadableSpan, attributes: Any) -> None:
        parent = span.parent.span_id if span.parent else None
        consumer = self.responses.get(parent)  # type: ignore[arg-type]
        if consumer is None:
            self._error(f"call span {span.name} is not the child of an open response")
            return
        stream, _, abandoned = self.consumers[consumer]
        index = attributes.get(A.ETF_TOOL_CALL_INDEX)
        seen = self.calls_of[consumer]
        if index in seen:
            self._error(f"stream {stream}: two call spans for index {index}")
        seen.add(index)
        if attributes.get(A.GEN_AI_TOOL_CALL_ID) != f"call-{stream}-{index}":
            self._error(f"stream {stream}/{index}: id {attributes.get(A.GEN_AI_TOOL_CALL_ID)}")
        if attributes.get(A.GEN_AI_TOOL_NAME) != f"tool_{index}":
            self._error(f"stream {stream}/{index}: name {attributes.get(A.GEN_AI_TOOL_NAME)}")
        if not abandoned:
            if attributes.get(A.GEN_AI_TOOL_CALL_ARGUMENTS) != slot_arguments(stream, index):  # type: ignore[arg-type]
                self._error(f"stream {stream}/{index}: arguments of another slot")
            if attributes.get(A.ETF_TOOL_CALL_VERDICT) != "proposed":
                self._error(f"stream {stream}/{index}: verdict {attributes.get(A.ETF_TOOL_CALL_VERDICT)}")
        self.calls += 1

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


@dataclass
class SoakResult:
    seconds: float
    async_streams: int = 0
    sync_streams: int = 0
    validator: Validator = field(default_factory=Validator)
    fragments: int = 0
    calls: int = 0
    spans: int = 0
    """Fragments, call spans and spans of this run only (the validator's totals include earlier runs)."""

    @property
    def streams(self) -> int:
        return self.async_streams + self.sync_streams


@dataclass
class Soak:
    """The rig: providers, instrumentation and validator, reused by warm-up and soak."""

    tasks: int = 1000
    threads: int = 8
    abandon_ratio: float = 0.1
    validator: Validator = field(default_factory=Validator)
    max_proposals: int = DEFAULT_MAX_PROPOSALS
    """Capacity of the shared proposal registry (the bounded state a warm-up must fill first)."""

    def __post_init__(self) -> None:
        self.tracer_provider = TracerProvider(shutdown_on_exit=False)
        self.tracer_provider.add_span_processor(self.validator)
        self.meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False)
        self.instrumentation = Instrumentation(self.tracer_provider, self.meter_provider)
        self.instrumentation.telemetry = Telemetry(
            self.tracer_provider,
            self.meter_provider,
            provider_name="openai",
            capture_content=True,
            max_proposals=self.max_proposals,
        )
        self.tracer = self.tracer_provider.get_tracer("soak")
        self._numbers = [0] * (self.threads + 1)
        self.in_flight = self.peak_in_flight = 0
        """asyncio streams started and not finished (one event loop: no lock needed), and the peak."""

    def _plan(self, lane: int, rng: random.Random) -> tuple[int, list[Any], int, bool]:
        number = self._numbers[lane] + (THREAD_BASE * lane if lane else 0)
        self._numbers[lane] += 1
        chunks, slots = interleaved_stream(number, rng)
        return number, chunks, slots, rng.random() < self.abandon_ratio

    def _attributes(self, number: int, slots: int, abandoned: bool) -> dict[str, Any]:
        return {"soak.stream": number, "soak.slots": slots, "soak.abandoned": abandoned}

    def _sync_lane(self, lane: int, deadline: float, stop: threading.Event, counts: list[int]) -> None:
        rng = random.Random(lane)
        done = 0
        while time.monotonic() < deadline and not (stop.is_set() and done):
            number, chunks, slots, abandoned = self._plan(lane, rng)
            with self.tracer.start_as_current_span(CONSUMER, attributes=self._attributes(number, slots, abandoned)):
                stream = self.instrumentation.stream(_gen(chunks))
                for position, _item in enumerate(stream):
                    if abandoned and position == _cut(chunks):
                        break
                if abandoned:
                    stream.close()
            done += 1
        counts[lane] = done

    async def _async_lane(self, task: int, deadline: float, limit: int | None, rng: random.Random) -> int:
        done = 0
        while not done or (time.monotonic() < deadline and (limit is None or done < limit)):
            number, chunks, slots, abandoned = self._plan(0, rng)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            with self.tracer.start_as_current_span(CONSUMER, attributes=self._attributes(number, slots, abandoned)):
                stream = self.instrumentation.stream(_agen(chunks))
                position = 0
                async for _item in stream:
                    if abandoned and position == _cut(chunks):
                        break
                    position += 1
                if abandoned:
                    await stream.aclose()
            self.in_flight -= 1
            done += 1
        return done

    def warm_up(self, streams: int) -> None:
        """Fill the bounded shared state (proposal registry, tool names) with ``streams`` asyncio streams."""
        tasks, threads, ratio = self.tasks, self.threads, self.abandon_ratio
        self.tasks, self.threads, self.abandon_ratio = streams, 0, 0.0
        try:
            self.run(3600, per_lane=1)
        finally:
            self.tasks, self.threads, self.abandon_ratio = tasks, threads, ratio

    def run(self, seconds: float, *, per_lane: int | None = None) -> SoakResult:
        """Run every lane until ``seconds`` pass (or each asyncio lane did ``per_lane`` streams; the
        threads keep streaming as long as the asyncio lanes do)."""
        deadline = time.monotonic() + seconds
        stop = threading.Event()
        counts = [0] * (self.threads + 1)
        before = (self.validator.fragments, self.validator.calls, self.validator.ended)
        threads = [
            threading.Thread(target=self._sync_lane, args=(lane, deadline, stop, counts), name=f"soak-{lane}")
            for lane in range(1, self.threads + 1)
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()

        async def main() -> int:
            rng = random.Random(0)
            results = await asyncio.gather(
                *(self._async_lane(task, deadline, per_lane, rng) for task in range(self.tasks))
            )
            return sum(results)

        try:
            async_streams = asyncio.run(main())
        finally:
            stop.set()
        for thread in threads:
            thread.join()
        result = SoakResult(time.perf_counter() - started, async_streams, sum(counts), self.validator)
        result.fragments = self.validator.fragments - before[0]
        result.calls = self.validator.calls - before[1]
        result.spans = self.validator.ended - before[2]
        return result


def _cut(chunks: Sequence[Any]) -> int:
    """Where an abandoned stream stops: before its finish reason (the last two chunks are the end)."""
    return min(len(chunks) // 2, len(chunks) - 3)


def _gen(chunks: Sequence[Any]) -> Iterator[Any]:
    yield from chunks


async def _agen(chunks: Sequence[Any]) -> AsyncIterator[Any]:
    for item in chunks:
        await asyncio.sleep(0)
        yield item


def etf_memory() -> int:
    """Bytes currently allocated by ``etf_otel`` code (tracemalloc must be running)."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, ETF_DIR + "/*")])
    return sum(stat.size for stat in snapshot.statistics("filename"))


@dataclass
class MemoryReport:
    start: int
    baseline: int
    during_peak_total: int
    after: int


def soak_with_memory(
    soak: Soak, seconds: float, *, per_lane: int | None, warmup_streams: int
) -> tuple[SoakResult, MemoryReport]:
    """Warm-up (fills the bounded proposal registry), baseline, soak, then memory again."""
    tracemalloc.start()
    try:
        start = etf_memory()
        soak.warm_up(warmup_streams)
        baseline = etf_memory()
        tracemalloc.reset_peak()
        result = soak.run(seconds, per_lane=per_lane)
        peak = tracemalloc.get_traced_memory()[1]
        after = etf_memory()
    finally:
        tracemalloc.stop()
    return result, MemoryReport(start, baseline, peak, after)


@pytest.fixture
def strict() -> Iterator[None]:
    previous = set_strict(True)
    try:
        yield
    finally:
        set_strict(previous)


def test_soak_short(strict: None, capsys: pytest.CaptureFixture[str]) -> None:
    # The proposal registry is shrunk to 256 ids so that the warm-up filling it stays short.
    soak = Soak(tasks=1000, threads=8, max_proposals=256)
    result, memory = soak_with_memory(soak, seconds=5.0, per_lane=1, warmup_streams=200)
    validator = result.validator
    with capsys.disabled():
        print(
            f"\n[soak] {result.seconds:.2f}s: {result.streams} streams ({result.async_streams} asyncio in "
            f"{soak.tasks} tasks, peak {soak.peak_in_flight} in flight, "
            f"{result.sync_streams} in {soak.threads} threads), "
            f"{result.calls} call spans, "
            f"{result.spans} spans, {result.fragments} fragments; "
            f"{result.streams / result.seconds:.0f} streams/s, {result.fragments / result.seconds:.0f} "
            f"fragments/s (tracemalloc on); etf_otel memory start {memory.start} B, baseline {memory.baseline} B, "
            f"after {memory.after} B, peak traced (all) {memory.during_peak_total} B"
        )
    assert validator.errors == []
    assert validator.open == set(), f"{len(validator.open)} spans left open"
    assert validator.started == validator.ended
    assert not validator.consumers and not validator.responses and not validator.calls_of
    assert soak.peak_in_flight == soak.tasks, f"only {soak.peak_in_flight} asyncio streams were in flight at once"
    assert result.sync_streams >= soak.threads
    assert memory.after - memory.baseline < 64 * 1024, "instrumentation memory did not return to its baseline"
