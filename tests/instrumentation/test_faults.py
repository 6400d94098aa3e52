"""Fault injection: telemetry that breaks never reaches the application (docs/guarantees.md).

Every fault (an exporter, a span processor, a meter, our own attribute code) is injected
with strict mode OFF, as in production: the wrappers must still yield, return and raise
exactly what the wrapped object does, and every span that was started must be ended
exactly once, whatever way the stream ends.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import metrics
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from etf_otel import attributes as A
from etf_otel.core._linkage import Conversation
from etf_otel.core._results import AssemblyResult
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.instrumentation import GuardRefusedError, Instrumentation
from etf_otel.instrumentation._registry import ToolNameCap as _ToolNameCap
from etf_otel.instrumentation._safety import set_strict
from etf_otel.instrumentation._telemetry import Telemetry
from etf_otel.protocols._chat_completions import DONE, ReferenceAssembler
from etf_otel.testing.chat import chunk, finished, fragment

# --- fakes ------------------------------------------------------------------------------------


class InjectedFault(RuntimeError):
    """Raised by every fake on purpose."""


class SpanLedger(SpanProcessor):
    """Counts ``on_start``/``on_end`` per span id: each started span must end exactly once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started: dict[int, str] = {}
        self.ended: Counter[int] = Counter()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        with self._lock:
            assert span.context is not None
            self.started[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            assert span.context is not None
            self.ended[span.context.span_id] += 1

    def unbalanced(self) -> dict[str, int]:
        """Started spans not ended exactly once (name -> times ended), and ends of unknown spans."""
        with self._lock:
            out = {
                f"{name}#{span_id:x}": self.ended[span_id]
                for span_id, name in self.started.items()
                if self.ended[span_id] != 1
            }
            out.update({f"unknown#{span_id:x}": n for span_id, n in self.ended.items() if span_id not in self.started})
            return out


class RaisingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise InjectedFault("export")

    def shutdown(self) -> None:
        pass


class RaisingProcessor(SpanProcessor):
    """Raises in ``on_start`` and/or ``on_end`` for spans whose name starts with ``prefix``."""

    def __init__(self, *, on_start: bool = False, on_end: bool = False, prefix: str = "") -> None:
        self._on_start = on_start
        self._on_end = on_end
        self._prefix = prefix

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self._on_start and span.name.startswith(self._prefix):
            raise InjectedFault("on_start")

    def on_end(self, span: ReadableSpan) -> None:
        if self._on_end and span.name.startswith(self._prefix):
            raise InjectedFault("on_end")


class _RaisingInstrument:
    def add(self, *args: Any, **kwargs: Any) -> None:
        raise InjectedFault("add")

    def record(self, *args: Any, **kwargs: Any) -> None:
        raise InjectedFault("record")


class RaisingMeter(metrics.NoOpMeter):
    def create_counter(self, name: str, unit: str = "", description: str = "") -> Any:
        return _RaisingInstrument()

    def create_histogram(self, name: str, unit: str = "", description: str = "", **kwargs: Any) -> Any:
        return _RaisingInstrument()

    def create_observable_counter(self, *args: Any, **kwargs: Any) -> Any:
        raise InjectedFault("create_observable_counter")


class RaisingMeterProvider(metrics.MeterProvider):
    def get_meter(self, name: str, version: str | None = None, schema_url: str | None = None, *args: Any) -> Any:
        return RaisingMeter(name, version, schema_url)


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise InjectedFault("our own code")


# --- the rig ----------------------------------------------------------------------------------

FAULTS = [
    "none",
    "exporter",  # the span exporter's export raises
    "on_start",  # a span processor raises when any span starts
    "on_start_tool_call",  # ... only when an assemble_tool_call span starts (the response span is already open)
    "on_end",  # a span processor raises when any span ends
    "meter",  # registering an observable counter raises, and every instrument's add/record
    "record_response",  # our own code: the whole response recording raises
    "decision_counts",  # our own code: reading the counts for the metrics raises before any span
    "call_attributes",  # our own code: describing a rejected call raises while its span is open
    "observe",  # our own code: observing a chunk raises
    "start_execution",  # our own code: starting an execute_tool span raises
    "end_execution",  # our own code: ending an execute_tool span raises
    "tool_name_label",  # our own code: the metric label of a tool name raises (slot spans and executions)
]


class Rig:
    """Providers with a span ledger first, then the injected fault, then an in-memory exporter."""

    def __init__(self, fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fault = fault
        self.ledger = SpanLedger()
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        if fault == "on_start":
            # In front of the ledger: a span whose start raised was never handed to us, so it is not "started".
            self.tracer_provider.add_span_processor(RaisingProcessor(on_start=True))
        elif fault == "on_start_tool_call":
            self.tracer_provider.add_span_processor(RaisingProcessor(on_start=True, prefix=A.SPAN_ASSEMBLE_TOOL_CALL))
        self.tracer_provider.add_span_processor(self.ledger)
        if fault == "on_end":
            self.tracer_provider.add_span_processor(RaisingProcessor(on_end=True))
        if fault == "exporter":
            self.tracer_provider.add_span_processor(SimpleSpanProcessor(RaisingExporter()))
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider: metrics.MeterProvider = (
            RaisingMeterProvider() if fault == "meter" else MeterProvider(metric_readers=[self.reader])
        )
        if fault == "record_response":
            monkeypatch.setattr(Telemetry, "record_response", _raise)
        elif fault == "decision_counts":
            monkeypatch.setattr(AssemblyResult, "decision_counts", property(_raise))
        elif fault == "call_attributes":
            monkeypatch.setattr(Telemetry, "_describe_call", _raise)
        elif fault == "observe":
            monkeypatch.setattr(ReferenceAssembler, "feed", _raise)
        elif fault == "start_execution":
            monkeypatch.setattr(Telemetry, "start_execution", _raise)
        elif fault == "end_execution":
            monkeypatch.setattr(Telemetry, "end_execution", _raise)
        elif fault == "tool_name_label":
            monkeypatch.setattr(_ToolNameCap, "__call__", _raise)

    def instrumentation(self, **config: Any) -> Instrumentation:
        return Instrumentation(self.tracer_provider, self.meter_provider, **config)

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [span for span in self.exporter.get_finished_spans() if span.name.startswith(prefix)]

    def stream_states(self) -> list[str]:
        return [str(span.attributes[A.ETF_STREAM_STATE]) for span in self.spans(A.SPAN_ASSEMBLE_RESPONSE)]


@pytest.fixture
def lenient(captured: Any) -> Iterator[None]:
    """Production mode: internal errors swallowed (the ``captured`` fixture turned strict mode on)."""
    previous = set_strict(False)
    try:
        yield
    finally:
        set_strict(previous)


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="etf_otel")
    caplog.set_level(logging.DEBUG)
    return caplog


def no_double_end(caplog: pytest.LogCaptureFixture) -> None:
    ended_twice = [r for r in caplog.records if "on an ended span" in r.getMessage()]
    assert not ended_twice, "a span was ended (or changed) after it ended"


def assert_balanced(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    assert rig.ledger.unbalanced() == {}
    no_double_end(caplog)


# --- streams ----------------------------------------------------------------------------------

TWO_CALLS = finished(
    chunk(fragment(0, "call-a", "read_page", '{"page":'), fragment(1, "call-b", "save", "{")),
    chunk(fragment(0, None, arguments="1}"), fragment(1, arguments='"x":2}')),
)
REJECTED = finished(
    chunk(fragment(0, "call-a", "read_page", '{"page":')),
    chunk(fragment(0, "call-other", arguments="1}")),
)
TRUNCATED = [chunk(fragment(0, "call-a", "read_page", '{"page":1}'))]


def gen(chunks: Sequence[Any], error: BaseException | None = None) -> Iterator[Any]:
    yield from chunks
    if error is not None:
        raise error


async def agen(chunks: Sequence[Any], error: BaseException | None = None) -> AsyncIterator[Any]:
    for item in chunks:
        await asyncio.sleep(0)
        yield item
    if error is not None:
        raise error


# --- 1. wrappers return exactly what the wrapped object returns ------------------------------


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("chunks", [TWO_CALLS, REJECTED, TRUNCATED], ids=["completed", "rejected", "truncated"])
def test_sync_stream_yields_the_same_objects_under_fault(
    fault: str, chunks: list[Any], monkeypatch: pytest.MonkeyPatch, lenient: None, debug_logs: Any
) -> None:
    rig = Rig(fault, monkeypatch)
    stream = rig.instrumentation().stream(gen(chunks))
    out = list(stream)
    assert len(out) == len(chunks) and all(a is b for a, b in zip(out, chunks, strict=True))
    if fault in ("none", "exporter", "observe"):
        assert len(rig.stream_states()) == 1


@pytest.mark.parametrize("fault", FAULTS)
async def test_async_stream_yields_the_same_objects_under_fault(
    fault: str, monkeypatch: pytest.MonkeyPatch, lenient: None, debug_logs: Any
) -> None:
    rig = Rig(fault, monkeypatch)
    out = [item async for item in rig.instrumentation().stream(agen(TWO_CALLS))]
    assert len(out) == len(TWO_CALLS) and all(a is b for a, b in zip(out, TWO_CALLS, strict=True))


class FakeAssembler:
    """A third-party assembler: every method returns its own sentinel, which must come back as is."""

    def __init__(self) -> None:
        self.fed: list[Any] = []
        self.feed_returns: list[object] = []
        self.result = type("Result", (), {"calls": ()})()
        self.extra = object()

    def feed(self, item: Any) -> object:
        self.fed.append(item)
        token = object()
        self.feed_returns.append(token)
        return token

    def feed_done(self) -> str:
        return "done-token"

    def finish(self) -> object:
        return self.result


@pytest.mark.parametrize("fault", FAULTS)
def test_assembler_feed_and_finish_return_what_the_assembler_returns_under_fault(
    fault: str, monkeypatch: pytest.MonkeyPatch, lenient: None, debug_logs: Any
) -> None:
    rig = Rig(fault, monkeypatch)
    inner = FakeAssembler()
    wrapped = rig.instrumentation().assembler(inner)
    returned = [wrapped.feed(item) for item in TWO_CALLS[:-1]]
    assert wrapped.feed_done() == "done-token"
    assert wrapped.finish() is inner.result
    assert all(a is b for a, b in zip(returned, inner.feed_returns, strict=True)) and len(returned) == 3
    assert inner.fed == TWO_CALLS[:-1]
    assert wrapped.extra is inner.extra


def host_calls(chunks: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """The calls a host receives for ``TWO_CALLS`` (OpenAI message shape)."""
    return [
        {"id": "call-a", "type": "function", "function": {"name": "read_page", "arguments": '{"page":1}'}},
        {"id": "call-b", "type": "function", "function": {"name": "save", "arguments": '{"x":2}'}},
    ]


@pytest.mark.parametrize("fault", FAULTS)
def test_host_returns_what_the_host_returns_under_fault(
    fault: str, monkeypatch: pytest.MonkeyPatch, lenient: None, debug_logs: Any
) -> None:
    rig = Rig(fault, monkeypatch)
    instrumentation = rig.instrumentation()
    conversation = Conversation()
    list(instrumentation.stream(gen(TWO_CALLS), conversation=conversation))
    results = {"call-a": object(), "call-b": object()}
    received: list[Any] = []

    def host(call: dict[str, Any], *args: Any, **kwargs: Any) -> object:
        received.append((call, args, kwargs))
        return results[call["id"]]

    wrapped = instrumentation.host(host, conversation=conversation)
    for call in host_calls(TWO_CALLS):
        assert wrapped(call, 1, flag=True) is results[call["id"]]
    assert [r[0]["id"] for r in received] == ["call-a", "call-b"] and received[0][1:] == ((1,), {"flag": True})
    instrumentation.end_conversation(conversation)


@pytest.mark.parametrize("fault", FAULTS)
async def test_async_host_returns_what_the_host_returns_under_fault(
    fault: str, monkeypatch: pytest.MonkeyPatch, lenient: None, debug_logs: Any
) -> None:
    rig = Rig(fault, monkeypatch)
    instrumentation = rig.instrumentation()
    [item async for item in instrumentation.stream(agen(TWO_CALLS))]
    token = object()

    async def host(call: dict[str, Any]) -> object:
        await asyncio.sleep(0)
        return token

    wrapped = instrumentation.host(host)
    assert await wrapped(host_calls(TWO_CALLS)[0]) is token


@pytest.mark.parametrize("fault", [f for f in FAULTS if f not in ("none", "exporter")])
def test_telemetry_faults_are_logged_at_debug_without_the_message(
    fault: str, monkeypatch: pytest.MonkeyPatch, lenient: None, debug_logs: pytest.LogCaptureFixture
) -> None:
    rig = Rig(fault, monkeypatch)
    instrumentation = rig.instrumentation()
    list(instrumentation.stream(gen(REJECTED if fault == "call_attributes" else TWO_CALLS)))
    instrumentation.host(lambda call: None)(host_calls(TWO_CALLS)[0])
    ours = [r for r in debug_logs.records if r.name == "etf_otel"]
    assert ours, "a swallowed telemetry error must be logged"
    assert all(r.levelno == logging.DEBUG for r in ours)
    assert all("InjectedFault" in r.getMessage() for r in ours)
    assert not any(r.exc_info for r in ours)


def test_strict_mode_makes_faults_visible(captured: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sanity check of the harness: with strict mode on (the fixture's default) an injected fault surfaces."""
    rig = Rig("record_response", monkeypatch)
    with pytest.raises(InjectedFault):
        list(rig.instrumentation().stream(gen(TWO_CALLS)))


# --- 2. the host's own exception --------------------------------------------------------------


class HostError(Exception):
    pass


def failing_host(call: Any) -> Any:
    raise HostError("the host failed")


async def failing_async_host(call: Any) -> Any:
    await asyncio.sleep(0)
    raise HostError("the async host failed")


def _frames(error: BaseException) -> list[str]:
    return [frame.f_code.co_name for frame, _ in traceback.walk_tb(error.__traceback__)]


@pytest.mark.parametrize("fault", ["none", "on_start", "on_end", "meter", "start_execution", "end_execution"])
def test_host_error_is_reraised_unchanged_when_telemetry_fails(
    fault: str, monkeypatch: pytest.MonkeyPatch, lenient: None, debug_logs: Any
) -> None:
    rig = Rig(fault, monkeypatch)
    instrumentation = rig.instrumentation()
    conversation = Conversation()
    list(instrumentation.stream(gen(TWO_CALLS), conversation=conversation))
    seen: list[HostError] = []

    def host(call: Any) -> Any:
        try:
            failing_host(call)
        except HostError as error:
            seen.append(error)
            raise

    with pytest.raises(HostError) as raised:
        instrumentation.host(host, conversation=conversation)(host_calls(TWO_CALLS)[0])
    assert type(raised.value) is HostError
    assert raised.value is seen[0]
    assert raised.value.args == ("the host failed",)
    assert raised.value.__cause__ is None and raised.value.__context__ is None
    assert "failing_host" in _frames(raised.value)
    if fault == "none":
        (span,) = rig.spans(A.SPAN_EXECUTE_TOOL)
        assert span.attributes[A.ERROR_TYPE] == "HostError"
        assert span.status.status_code.name == "ERROR"


@pytest.mark.parametrize("fault", ["none", "on_start", "meter", "end_execution"])
async def test_async_host_error_is_reraised_unchanged_when_telemetry_fails(
    fault: str, monkeypatch: pytest.MonkeyPatch, lenient: None, debug_logs: Any
) -> None:
    rig = Rig(fault, monkeypatch)
    instrumentation = rig.instrumentation()
    list(instrumentation.stream(gen(TWO_CALLS)))
    with pytest.raises(HostError) as raised:
        await instrumentation.host(failing_async_host)(host_calls(TWO_CALLS)[0])
    assert type(raised.value) is HostError and raised.value.__context__ is None
    assert "failing_async_host" in _frames(raised.value)


def test_host_error_leaves_no_execute_span_current(captured: Any) -> None:
    instrumentation = captured.instrumentation()
    before = otel_context.get_current()
    with pytest.raises(HostError):
        instrumentation.host(failing_host)({"id": "x", "function": {"name": "f", "arguments": "{}"}})
    assert otel_context.get_current() == before


# --- 3. the stream's own exception ------------------------------------------------------------


class StreamError(Exception):
    pass


def test_stream_error_reaches_the_consumer_unchanged_and_is_recorded_failed(captured: Any) -> None:
    error = StreamError("connection reset")
    got: list[Any] = []
    with pytest.raises(StreamError) as raised:
        for item in captured.instrumentation().stream(gen(TWO_CALLS[:1], error)):
            got.append(item)
    assert raised.value is error and raised.value.__context__ is None
    assert "gen" in _frames(raised.value)
    assert got == TWO_CALLS[:1] and got[0] is TWO_CALLS[0]
    (span,) = captured.spans(A.SPAN_ASSEMBLE_RESPONSE)
    assert span.attributes[A.ETF_STREAM_STATE] == "failed"
    assert span.attributes[A.ERROR_TYPE] == ErrorCategory.TRUNCATED_STREAM.value
    assert captured.metric_sum(A.METRIC_STREAMS, etf__stream__state="failed") == 1
    assert all(s.attributes[A.ETF_TOOL_CALL_VERDICT] == "rejected" for s in captured.spans(A.SPAN_ASSEMBLE_TOOL_CALL))


async def test_async_stream_error_reaches_the_consumer_unchanged_and_is_recorded_failed(captured: Any) -> None:
    error = StreamError("connection reset")
    with pytest.raises(StreamError) as raised:
        async for _ in captured.instrumentation().stream(agen(TWO_CALLS[:1], error)):
            pass
    assert raised.value is error and "agen" in _frames(raised.value)
    (span,) = captured.spans(A.SPAN_ASSEMBLE_RESPONSE)
    assert span.attributes[A.ETF_STREAM_STATE] == "failed"


def test_stream_error_under_telemetry_fault_still_reaches_the_consumer(
    monkeypatch: pytest.MonkeyPatch, lenient: None, debug_logs: Any
) -> None:
    rig = Rig("record_response", monkeypatch)
    error = StreamError("boom")
    with pytest.raises(StreamError) as raised:
        list(rig.instrumentation().stream(gen(TWO_CALLS[:1], error)))
    assert raised.value is error and raised.value.__context__ is None


def test_assembler_error_reaches_the_caller_unchanged(captured: Any) -> None:
    error = StreamError("assembler broke")

    class Broken(FakeAssembler):
        def finish(self) -> object:
            raise error

    wrapped = captured.instrumentation().assembler(Broken())
    wrapped.feed(TWO_CALLS[0])
    with pytest.raises(StreamError) as raised:
        wrapped.finish()
    assert raised.value is error
    (span,) = captured.spans(A.SPAN_ASSEMBLE_RESPONSE)
    assert span.attributes[A.ETF_STREAM_STATE] == "failed"


# --- 4. every started span is ended exactly once ----------------------------------------------


def _consume_sync(instrumentation: Instrumentation, how: str, chunks: Sequence[Any]) -> Any:
    """End a stream in the way ``how``; returns the wrapper (still referenced, so no finalizer can help)."""
    stream = instrumentation.stream(gen(chunks) if how != "failed" else gen(chunks[:1], StreamError()))
    if how == "exhausted":
        list(stream)
    elif how == "failed":
        with pytest.raises(StreamError):
            list(stream)
    elif how == "break_close":
        for _ in stream:
            break
        stream.close()
    elif how == "break_close_after_finish_reason":
        for item in stream:
            if item is chunks[-2]:  # the finish_reason chunk; [DONE] never read
                break
        stream.close()
    elif how == "with":
        with stream as entered:
            assert entered is stream
            for _ in entered:
                break
    elif how == "gc":
        next(stream)
        del stream
        gc.collect()
        return None
    else:  # pragma: no cover
        raise AssertionError(how)
    return stream


SYNC_END_STATES = [
    ("exhausted", TWO_CALLS, "completed"),
    ("exhausted", TRUNCATED, "truncated"),
    ("failed", TWO_CALLS, "failed"),
    ("break_close", TWO_CALLS, "abandoned"),
    ("break_close_after_finish_reason", TWO_CALLS, "completed"),
    ("with", TWO_CALLS, "abandoned"),
    ("gc", TWO_CALLS, "abandoned"),
]


@pytest.mark.parametrize(
    ("how", "chunks", "state"),
    SYNC_END_STATES,
    ids=[f"{how}-{state}" for how, _, state in SYNC_END_STATES],
)
def test_every_span_ends_exactly_once_in_every_end_state(
    how: str, chunks: list[Any], state: str, captured: Any, monkeypatch: pytest.MonkeyPatch, debug_logs: Any
) -> None:
    rig = Rig("none", monkeypatch)
    alive = _consume_sync(rig.instrumentation(), how, chunks)
    assert rig.stream_states() == [state]
    assert len(rig.ledger.started) == 1 + (2 if chunks is TWO_CALLS else 1)  # the response and its slots
    assert_balanced(rig, debug_logs)
    del alive
    gc.collect()
    assert rig.stream_states() == [state]  # the finalizer, detached, records nothing more
    assert_balanced(rig, debug_logs)


async def test_async_stream_exhausted_ends_every_span_once(monkeypatch: pytest.MonkeyPatch, debug_logs: Any) -> None:
    rig = Rig("none", monkeypatch)
    [item async for item in rig.instrumentation().stream(agen(TWO_CALLS))]
    assert rig.stream_states() == ["completed"]
    assert_balanced(rig, debug_logs)


async def test_async_stream_abandoned_with_aclose_ends_every_span_once(
    monkeypatch: pytest.MonkeyPatch, debug_logs: Any
) -> None:
    rig = Rig("none", monkeypatch)
    source = agen(TWO_CALLS)
    stream = rig.instrumentation().stream(source)
    async for _ in stream:
        break
    assert rig.stream_states() == []  # breaking alone does not end the response ...
    await stream.aclose()  # ... closing does
    assert source.ag_frame is None  # the wrapped generator was closed too
    assert rig.stream_states() == ["abandoned"]
    assert len(rig.ledger.started) == 3
    assert_balanced(rig, debug_logs)


async def test_async_stream_abandoned_after_finish_reason_is_completed(
    monkeypatch: pytest.MonkeyPatch, debug_logs: Any
) -> None:
    rig = Rig("none", monkeypatch)
    stream = rig.instrumentation().stream(agen(TWO_CALLS))
    async for item in stream:
        if item is TWO_CALLS[-2]:
            break
    await stream.aclose()
    assert rig.stream_states() == ["completed"]
    assert_balanced(rig, debug_logs)


async def test_async_stream_leaving_async_with_ends_every_span_once(
    monkeypatch: pytest.MonkeyPatch, debug_logs: Any
) -> None:
    rig = Rig("none", monkeypatch)
    source = agen(TWO_CALLS)
    async with rig.instrumentation().stream(source) as stream:
        async for _ in stream:
            break
    await source.aclose()
    assert rig.stream_states() == ["abandoned"]
    assert_balanced(rig, debug_logs)


async def test_async_stream_abandoned_and_garbage_collected_ends_every_span_once(
    monkeypatch: pytest.MonkeyPatch, debug_logs: Any
) -> None:
    rig = Rig("none", monkeypatch)
    stream = rig.instrumentation().stream(agen(TWO_CALLS))
    await stream.__anext__()
    del stream
    gc.collect()
    for _ in range(5):  # let the loop's async-generator finalizer close the source
        await asyncio.sleep(0)
    assert rig.stream_states() == ["abandoned"]
    assert len(rig.ledger.started) == 3
    assert_balanced(rig, debug_logs)


def test_abandoned_assembler_garbage_collected_ends_every_span_once(
    monkeypatch: pytest.MonkeyPatch, debug_logs: Any
) -> None:
    rig = Rig("none", monkeypatch)
    wrapped = rig.instrumentation().assembler(FakeAssembler())
    wrapped.feed(TWO_CALLS[0])
    del wrapped
    gc.collect()
    assert rig.stream_states() == ["abandoned"]
    assert_balanced(rig, debug_logs)


def test_closing_twice_and_then_collecting_records_one_response(
    monkeypatch: pytest.MonkeyPatch, debug_logs: Any
) -> None:
    rig = Rig("none", monkeypatch)
    stream = rig.instrumentation().stream(gen(TWO_CALLS))
    next(stream)
    stream.close()
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)
    del stream
    gc.collect()
    assert rig.stream_states() == ["abandoned"]
    assert_balanced(rig, debug_logs)


def test_execute_spans_end_once_on_success_and_on_host_error(monkeypatch: pytest.MonkeyPatch, debug_logs: Any) -> None:
    rig = Rig("none", monkeypatch)
    instrumentation = rig.instrumentation()
    list(instrumentation.stream(gen(TWO_CALLS)))
    first, second = host_calls(TWO_CALLS)
    instrumentation.host(lambda call: "ok")(first)
    with pytest.raises(HostError):
        instrumentation.host(failing_host)(second)
    assert len(rig.spans(A.SPAN_EXECUTE_TOOL)) == 2
    assert_balanced(rig, debug_logs)


# Under a fault, spans that were started must still be ended.
@pytest.mark.parametrize("fault", FAULTS)
def test_every_started_span_is_ended_exactly_once_under_fault(
    fault: str, monkeypatch: pytest.MonkeyPatch, lenient: None, debug_logs: Any
) -> None:
    rig = Rig(fault, monkeypatch)
    instrumentation = rig.instrumentation()
    conversation = Conversation()
    list(instrumentation.stream(gen(TWO_CALLS), conversation=conversation))
    list(instrumentation.stream(gen(REJECTED)))
    stream = instrumentation.stream(gen(TWO_CALLS))
    next(stream)
    stream.close()
    first, second = host_calls(TWO_CALLS)
    instrumentation.host(lambda call: "ok", conversation=conversation)(first)
    with pytest.raises(HostError):
        instrumentation.host(failing_host, conversation=conversation)(second)
    instrumentation.end_conversation(conversation)
    assert_balanced(rig, debug_logs)


# --- 5. guard mode ----------------------------------------------------------------------------


def _call(call_id: str, name: str = "read_page", arguments: str = '{"page":1}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class Host:
    def __init__(self) -> None:
        self.executed: list[Any] = []

    def execute(self, call: Any) -> str:
        self.executed.append(call)
        return f"result of {call['id']}"


GUARD_CASES = [
    ("truncated", [chunk(fragment(0, "call-t", "read_page", '{"page":1}'))], _call("call-t"), "truncated_stream"),
    (
        "rejected-id-conflict",
        finished(chunk(fragment(0, "call-r", "read_page", '{"page":')), chunk(fragment(0, "call-z", arguments="1}"))),
        _call("call-r"),
        "id_conflict",
    ),
    (
        "rejected-sibling",
        finished(chunk(fragment(0, "call-s", "read_page", '{"page":1}'), fragment(1, None, "save", "{}"))),
        _call("call-s"),
        "initial_null",  # the category that blocked the response
    ),
    (
        "unknown-id",
        finished(chunk(fragment(0, "call-k", "read_page", '{"page":1}'))),
        _call("call-nope"),
        "orphaned_result",
    ),
    (
        "divergent-arguments",
        finished(chunk(fragment(0, "call-d", "read_page", '{"page":1}'))),
        _call("call-d", arguments='{"page":2}'),
        "divergent_assembly",
    ),
    (
        "divergent-name",
        finished(chunk(fragment(0, "call-n", "read_page", '{"page":1}'))),
        _call("call-n", name="delete_everything"),
        "divergent_assembly",
    ),
]


@pytest.mark.parametrize(("chunks", "call", "category"), [c[1:] for c in GUARD_CASES], ids=[c[0] for c in GUARD_CASES])
def test_guard_refuses_a_call_that_is_not_a_valid_proposal(
    chunks: list[Any], call: dict[str, Any], category: str, captured: Any
) -> None:
    instrumentation = captured.instrumentation(guard=True)
    list(instrumentation.stream(gen(chunks)))
    host = Host()
    wrapped = instrumentation.host(host)
    with pytest.raises(GuardRefusedError) as raised:
        wrapped.execute(call)
    assert host.executed == []
    assert raised.value.category.value == category
    assert call["id"] not in str(raised.value)
    (span,) = captured.spans(A.SPAN_EXECUTE_TOOL)
    assert span.attributes[A.ETF_GUARD_REFUSED] is True
    assert span.attributes[A.ERROR_TYPE] == category


def test_guard_refusal_carries_the_first_category_of_the_rejected_call(captured: Any) -> None:
    """A call whose own slot was rejected is refused with that slot's first category."""
    instrumentation = captured.instrumentation(guard=True)
    list(
        instrumentation.stream(
            gen(
                finished(
                    chunk(fragment(0, "call-s", "read_page", '{"page":'), fragment(0, "")),
                    chunk(fragment(0, arguments="1}")),
                )
            )
        )
    )
    with pytest.raises(GuardRefusedError) as raised:
        instrumentation.host(Host()).execute(_call("call-s"))
    assert raised.value.category is ErrorCategory.EMPTY_AFTER_ESTABLISHED


def test_guard_executes_a_valid_proposal(captured: Any) -> None:
    instrumentation = captured.instrumentation(guard=True)
    list(instrumentation.stream(gen(TWO_CALLS)))
    host = Host()
    wrapped = instrumentation.host(host)
    first, second = host_calls(TWO_CALLS)
    assert wrapped.execute(first) == "result of call-a"
    assert wrapped.execute(second) == "result of call-b"
    assert host.executed == [first, second]
    spans = captured.spans(A.SPAN_EXECUTE_TOOL)
    assert len(spans) == 2 and all(A.ETF_GUARD_REFUSED not in s.attributes for s in spans)
    assert all(s.links for s in spans)


def test_guard_refusal_is_raised_in_production_mode_too(captured: Any, lenient: None) -> None:
    instrumentation = captured.instrumentation(guard=True)
    host = Host()
    with pytest.raises(GuardRefusedError):
        instrumentation.host(host).execute(_call("call-unknown"))
    assert host.executed == []


async def test_guard_refuses_for_an_async_host(captured: Any) -> None:
    instrumentation = captured.instrumentation(guard=True)
    [item async for item in instrumentation.stream(agen(TRUNCATED))]
    executed: list[Any] = []

    async def host(call: Any) -> str:
        executed.append(call)
        return "ran"

    wrapped = instrumentation.host(host)
    with pytest.raises(GuardRefusedError) as raised:
        await wrapped(_call("call-a"))
    assert raised.value.category is ErrorCategory.TRUNCATED_STREAM and executed == []
    list(instrumentation.stream(gen(finished(chunk(fragment(0, "call-ok", "read_page", '{"page":1}'))))))
    assert await wrapped(_call("call-ok")) == "ran"


def test_observe_mode_executes_everything(captured: Any) -> None:
    instrumentation = captured.instrumentation()
    host = Host()
    assert instrumentation.host(host).execute(_call("call-unknown")) == "result of call-unknown"


@pytest.mark.parametrize("fault", ["on_start", "start_execution"])
def test_guard_still_refuses_when_telemetry_fails(
    fault: str, monkeypatch: pytest.MonkeyPatch, lenient: None, debug_logs: Any
) -> None:
    rig = Rig(fault, monkeypatch)
    instrumentation = rig.instrumentation(guard=True)
    host = Host()
    with pytest.raises(GuardRefusedError):
        instrumentation.host(host).execute(_call("call-unknown"))
    assert host.executed == []


def test_guard_checks_done_sentinel_variants(captured: Any) -> None:
    """``[DONE]`` alone (no finish_reason) ends a response properly: its calls may run."""
    instrumentation = captured.instrumentation(guard=True)
    list(instrumentation.stream(gen([chunk(fragment(0, "call-x", "read_page", '{"page":1}')), DONE])))
    assert instrumentation.host(Host()).execute(_call("call-x")) == "result of call-x"
