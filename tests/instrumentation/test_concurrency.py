"""Concurrent, interleaved streams never share slots (docs/guarantees.md, guarantee 5).

Many streams run at once, in threads and in asyncio tasks, each with 2-4 tool calls whose
fragments are interleaved, and each with its own ids (``call-{stream}-{slot}``) and
arguments. Every stream is wrapped inside its own consumer span, so its spans can be told
apart by parentage alone: each consumer gets exactly one ``assemble_response`` span, whose
``assemble_tool_call`` children carry exactly that stream's ids, indices and arguments.
"""

from __future__ import annotations

import asyncio
import gc
import random
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from etf_otel import attributes as A
from etf_otel.testing.chat import chunk, fragment

THREADS = 8
STREAMS_PER_THREAD = 25
TASKS = 200


class SpanLedger(SpanProcessor):
    """Counts ``on_start``/``on_end`` per span id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started: set[int] = set()
        self.ended: Counter[int] = Counter()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        assert span.context is not None
        with self._lock:
            self.started.add(span.context.span_id)

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        with self._lock:
            self.ended[span.context.span_id] += 1

    def assert_balanced(self) -> None:
        assert self.started, "no span was started"
        assert set(self.ended) == self.started, "a started span was never ended (or an unknown one ended)"
        assert set(self.ended.values()) == {1}, "a span was ended more than once"


def slot_arguments(stream: int, slot: int) -> str:
    return '{"s":"' + f"{stream}-{slot}" + '"}'


def interleaved_stream(stream: int, rng: random.Random) -> tuple[list[Any], int]:
    """A response with 2-4 calls whose fragments interleave; continuations use absent/null ids."""
    slots = rng.randint(2, 4)
    pending: dict[int, list[dict[str, Any]]] = {}
    for slot in range(slots):
        text = slot_arguments(stream, slot)
        cut = rng.randint(1, len(text) - 1)
        pending[slot] = [
            fragment(slot, f"call-{stream}-{slot}", f"tool_{slot}", text[:cut]),
            fragment(slot, rng.choice([None, f"call-{stream}-{slot}"]), arguments=text[cut:]),
        ]
    chunks: list[Any] = []
    while pending:
        take = rng.sample(sorted(pending), k=rng.randint(1, len(pending)))
        chunks.append(chunk(*(pending[slot].pop(0) for slot in take)))
        for slot in take:
            if not pending[slot]:
                del pending[slot]
    chunks += [chunk(finish_reason="tool_calls"), "[DONE]"]
    return chunks, slots


def check_streams(
    spans: Sequence[ReadableSpan], expected: dict[int, tuple[int, str]], abandoned: frozenset[int] = frozenset()
) -> None:
    """``expected``: stream number -> (slots, state). Checks parentage, ids, indices and arguments."""
    consumers = {
        span.context.span_id: int(span.name.split()[1])
        for span in spans
        if span.name.startswith("consumer ") and span.context is not None
    }
    assert sorted(consumers.values()) == sorted(expected)

    responses: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        if span.name == A.SPAN_ASSEMBLE_RESPONSE:
            assert span.parent is not None
            responses[consumers[span.parent.span_id]].append(span)
    assert sorted(responses) == sorted(expected), "a stream has no assemble_response span"
    response_of: dict[int, int] = {}
    for stream, found in responses.items():
        assert len(found) == 1, f"stream {stream} has {len(found)} assemble_response spans"
        (response,) = found
        slots, state = expected[stream]
        assert response.attributes[A.ETF_STREAM_STATE] == state, stream
        if stream not in abandoned:
            assert response.attributes[A.ETF_STREAM_SLOTS] == slots, stream
        assert response.context is not None
        response_of[response.context.span_id] = stream

    calls: dict[int, list[int]] = defaultdict(list)
    for span in spans:
        if not span.name.startswith(A.SPAN_ASSEMBLE_TOOL_CALL):
            continue
        assert span.parent is not None
        stream = response_of[span.parent.span_id]
        index = span.attributes[A.ETF_TOOL_CALL_INDEX]
        assert isinstance(index, int)
        assert span.attributes[A.GEN_AI_TOOL_CALL_ID] == f"call-{stream}-{index}"
        assert span.attributes[A.GEN_AI_TOOL_NAME] == f"tool_{index}"
        if stream not in abandoned:
            assert span.attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS] == slot_arguments(stream, index)
            assert span.attributes[A.ETF_TOOL_CALL_VERDICT] == "proposed", (stream, index)
        calls[stream].append(index)
    for stream, (slots, _) in expected.items():
        if stream in abandoned:
            assert len(calls[stream]) == len(set(calls[stream])) <= slots
        else:
            assert sorted(calls[stream]) == list(range(slots)), stream


def gen(chunks: Sequence[Any]) -> Iterator[Any]:
    yield from chunks


def test_interleaved_streams_in_threads_never_share_slots(captured: Any) -> None:
    ledger = SpanLedger()
    captured.tracer_provider.add_span_processor(ledger)
    tracer = captured.tracer_provider.get_tracer("test")
    instrumentation = captured.instrumentation(capture_content=True)
    expected: dict[int, tuple[int, str]] = {}
    abandoned: set[int] = set()
    plans: dict[int, list[tuple[int, list[Any]]]] = defaultdict(list)
    rng = random.Random(20240601)
    for thread in range(THREADS):
        for number in range(STREAMS_PER_THREAD):
            stream = thread * STREAMS_PER_THREAD + number
            chunks, slots = interleaved_stream(stream, rng)
            plans[thread].append((stream, chunks))
            if stream % 10 == 7:  # dropped after its first chunk, never closed: finalized by gc
                abandoned.add(stream)
                expected[stream] = (slots, "abandoned")
            else:
                expected[stream] = (slots, "completed")
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def worker(thread: int) -> None:
        try:
            thread_rng = random.Random(thread)
            open_streams: list[tuple[int, Any]] = []
            barrier.wait()
            for stream, chunks in plans[thread]:
                with tracer.start_as_current_span(f"consumer {stream}"):
                    open_streams.append((stream, instrumentation.stream(gen(chunks))))
            while open_streams:  # round-robin: this thread's streams interleave with each other too
                position = thread_rng.randrange(len(open_streams))
                stream, wrapped = open_streams[position]
                try:
                    next(wrapped)
                except StopIteration:
                    open_streams.pop(position)
                    continue
                if stream in abandoned:
                    open_streams.pop(position)
                del wrapped
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(thread,)) for thread in range(THREADS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: maximal interleaving
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        sys.setswitchinterval(interval)
    assert not errors and not any(thread.is_alive() for thread in threads)
    gc.collect()
    check_streams(captured.exporter.get_finished_spans(), expected, frozenset(abandoned))
    ledger.assert_balanced()
    assert captured.metric_sum(A.METRIC_STREAMS, etf__stream__state="completed") == len(expected) - len(abandoned)
    assert captured.metric_sum(A.METRIC_STREAMS, etf__stream__state="abandoned") == len(abandoned)


async def agen(chunks: Sequence[Any]) -> AsyncIterator[Any]:
    for item in chunks:
        await asyncio.sleep(0)
        yield item


async def test_interleaved_streams_in_asyncio_tasks_never_share_slots(captured: Any) -> None:
    ledger = SpanLedger()
    captured.tracer_provider.add_span_processor(ledger)
    tracer = captured.tracer_provider.get_tracer("test")
    instrumentation = captured.instrumentation(capture_content=True)
    rng = random.Random(7)
    plans = {stream: interleaved_stream(stream, rng) for stream in range(TASKS)}
    host_calls: list[tuple[int, int]] = []

    def host(call: Any) -> str:
        return f"done {call['id']}"

    observed_host = instrumentation.host(host)

    async def consume(stream: int) -> None:
        chunks, slots = plans[stream]
        with tracer.start_as_current_span(f"consumer {stream}"):
            async for _ in instrumentation.stream(agen(chunks)):
                await asyncio.sleep(0)
            for slot in range(slots):
                await asyncio.sleep(0)
                call = {
                    "id": f"call-{stream}-{slot}",
                    "function": {"name": f"tool_{slot}", "arguments": slot_arguments(stream, slot)},
                }
                assert observed_host(call) == f"done call-{stream}-{slot}"
                host_calls.append((stream, slot))

    await asyncio.gather(*(consume(stream) for stream in range(TASKS)))
    spans = captured.exporter.get_finished_spans()
    check_streams(spans, {stream: (slots, "completed") for stream, (_, slots) in plans.items()})
    ledger.assert_balanced()

    # Every execution links to the assemble_tool_call span of its own id, in its own stream.
    assembled = {
        span.attributes[A.GEN_AI_TOOL_CALL_ID]: span.context
        for span in spans
        if span.name.startswith(A.SPAN_ASSEMBLE_TOOL_CALL)
    }
    executions = [span for span in spans if span.name.startswith(A.SPAN_EXECUTE_TOOL)]
    assert len(executions) == len(host_calls) == sum(slots for _, slots in plans.values())
    for span in executions:
        call_id = span.attributes[A.GEN_AI_TOOL_CALL_ID]
        assert [link.context for link in span.links] == [assembled[call_id]]
        assert A.ERROR_TYPE not in (span.attributes or {})


def test_many_streams_interleaved_in_one_thread_never_share_slots(captured: Any) -> None:
    """No threads at all: 100 open streams advanced in random order by one consumer."""
    tracer = captured.tracer_provider.get_tracer("test")
    instrumentation = captured.instrumentation(capture_content=True)
    rng = random.Random(3)
    expected: dict[int, tuple[int, str]] = {}
    open_streams: list[tuple[int, Any]] = []
    for stream in range(100):
        chunks, slots = interleaved_stream(stream, rng)
        expected[stream] = (slots, "completed")
        with tracer.start_as_current_span(f"consumer {stream}"):
            open_streams.append((stream, instrumentation.stream(gen(chunks))))
    while open_streams:
        position = rng.randrange(len(open_streams))
        try:
            next(open_streams[position][1])
        except StopIteration:
            open_streams.pop(position)
    check_streams(captured.exporter.get_finished_spans(), expected)
