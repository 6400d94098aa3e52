"""The stream proxies at their edges: the attributes the app sees, and a loop left then resumed.

The SDKs' own stream classes (``openai.Stream``/``AsyncStream``, ``anthropic.Stream``/``AsyncStream``)
are made by the real clients over real HTTP against :class:`~etf_otel.testing.LocalChatServer`,
then compared with the same stream observed (docs/telemetry.md, "Streams").
"""

from __future__ import annotations

import collections.abc as abc
import gc
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from etf_otel import attributes as A
from etf_otel.instrumentation import Instrumentation, ObservedAsyncStream, ObservedStream
from etf_otel.integrations.openai import instrument_openai
from etf_otel.protocols import ANTHROPIC_MESSAGES
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing import anthropic as messages
from etf_otel.testing.chat import chunk, finished, fragment

USER: list[dict[str, Any]] = [{"role": "user", "content": "read page 1 and save a report"}]

TWO_CALLS = finished(
    chunk(fragment(0, "call-a", "read_page", '{"page":'), fragment(1, "call-b", "save", "{")),
    chunk(fragment(0, None, arguments="1}"), fragment(1, arguments='"x":2}')),
)
"""Three chunks (and ``[DONE]``): a loop broken after the first still has both calls to finish."""

MESSAGE = messages.stream(messages.tool_call(0, "toolu_1", "get_weather", '{"city":', '"Paris"}'))

PROBES = (
    "close",
    "aclose",
    "__iter__",
    "__next__",
    "__aiter__",
    "__anext__",
    "__enter__",
    "__exit__",
    "__aenter__",
    "__aexit__",
    "response",
)
"""Names an application may probe with ``hasattr``, besides the stream's public ``dir``."""

ABCS = (abc.Iterable, abc.Iterator, abc.AsyncIterable, abc.AsyncIterator, abc.Generator, abc.AsyncGenerator)


class SpanLedger(SpanProcessor):
    """Counts starts and ends per span id: every span started must end exactly once."""

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

    def balanced(self) -> bool:
        return all(self.ended[span_id] == 1 for span_id in self.started) and set(self.ended) <= set(self.started)


class Rig:
    """An ``Instrumentation`` with a span ledger and an in-memory exporter of its own."""

    def __init__(self) -> None:
        self.ledger = SpanLedger()
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(self.ledger)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.meter_provider = MeterProvider()
        self.etf = Instrumentation(self.tracer_provider, self.meter_provider)

    def spans(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.exporter.get_finished_spans() if span.name.startswith(name)]

    def responses(self) -> list[tuple[str, list[str]]]:
        """Each recorded response: its state and its calls' ids (the calls are its children)."""
        out = []
        calls = self.spans(A.SPAN_ASSEMBLE_TOOL_CALL)
        for response in self.spans(A.SPAN_ASSEMBLE_RESPONSE):
            assert response.context is not None
            ids = sorted(
                str(call.attributes[A.GEN_AI_TOOL_CALL_ID])
                for call in calls
                if call.parent is not None and call.parent.span_id == response.context.span_id
            )
            out.append((str(response.attributes[A.ETF_STREAM_STATE]), ids))
        return out


@pytest.fixture
def rig() -> Rig:
    return Rig()


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as srv:
        yield srv


def visible(stream: object, extra: Sequence[str] = ()) -> dict[str, bool]:
    """``hasattr`` for each public name of ``dir(stream)``, each probe and ``extra``."""
    names = {name for name in dir(stream) if not name.startswith("_")} | set(PROBES) | set(extra)
    return {name: hasattr(stream, name) for name in sorted(names)}


def assert_same_surface(plain: object, observed: object) -> None:
    """The observed stream answers ``hasattr``, ``dir`` and the iteration ABCs as the plain one does."""
    assert dir(observed) == dir(plain)
    own = [name for name in dir(type(observed)) if not name.startswith(("__", "_self_"))]
    assert visible(observed, own) == visible(plain, own)
    assert [isinstance(observed, kind) for kind in ABCS] == [isinstance(plain, kind) for kind in ABCS]
    assert isinstance(observed, type(plain))


# --- 1. the attributes of the SDKs' streams ----------------------------------------------------


def _openai_stream(client: openai.OpenAI, server: LocalChatServer) -> Any:
    server.enqueue(Script(events=TWO_CALLS))
    return client.chat.completions.create(model="m", messages=USER, stream=True)


def _anthropic_stream(client: anthropic.Anthropic, server: LocalChatServer) -> Any:
    server.enqueue(Script(events=MESSAGE, named=True))
    return client.messages.create(model="m", max_tokens=64, messages=USER, stream=True)


def test_sync_sdk_streams_have_the_same_attributes_observed(rig: Rig, server: LocalChatServer) -> None:
    with (
        openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as oa,
        anthropic.Anthropic(base_url=server.root_url, api_key="t", max_retries=0, timeout=5.0) as an,
    ):
        for make, protocol in (
            (lambda: _openai_stream(oa, server), None),
            (lambda: _anthropic_stream(an, server), ANTHROPIC_MESSAGES),
        ):
            plain = make()
            assert type(plain).__name__ == "Stream"
            observed = rig.etf.stream(make(), **({"protocol": protocol} if protocol else {}))
            assert type(observed) is ObservedStream
            assert_same_surface(plain, observed)
            plain.close()
            observed.close()
    assert [state for state, _ in rig.responses()] == ["abandoned", "abandoned"]
    assert rig.ledger.balanced()


async def test_async_sdk_streams_have_the_same_attributes_observed(rig: Rig, server: LocalChatServer) -> None:
    async with (
        openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as oa,
        anthropic.AsyncAnthropic(base_url=server.root_url, api_key="t", max_retries=0, timeout=5.0) as an,
    ):
        server.enqueue(Script(events=TWO_CALLS), Script(events=TWO_CALLS))
        openai_plain = await oa.chat.completions.create(model="m", messages=USER, stream=True)
        openai_observed = rig.etf.stream(await oa.chat.completions.create(model="m", messages=USER, stream=True))
        server.enqueue(Script(events=MESSAGE, named=True), Script(events=MESSAGE, named=True))
        anthropic_plain = await an.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
        anthropic_observed = rig.etf.stream(
            await an.messages.create(model="m", max_tokens=64, messages=USER, stream=True),
            protocol=ANTHROPIC_MESSAGES,
        )
        for plain, observed in ((openai_plain, openai_observed), (anthropic_plain, anthropic_observed)):
            assert type(plain).__name__ == "AsyncStream"
            assert type(observed) is ObservedAsyncStream
            assert_same_surface(plain, observed)

        # The SDK's anthropic AsyncStream has no aclose: the observed one fails the same way.
        assert not hasattr(anthropic_plain, "aclose")
        with pytest.raises(AttributeError) as plain_error:
            anthropic_plain.aclose  # noqa: B018
        with pytest.raises(AttributeError) as observed_error:
            anthropic_observed.aclose  # noqa: B018
        assert str(observed_error.value) == str(plain_error.value)
        # openai's has one, and closing through it ends the response.
        await openai_plain.aclose()
        await openai_observed.aclose()
        assert rig.responses() == [("abandoned", [])]
        await anthropic_plain.close()
        await anthropic_observed.close()
    assert [state for state, _ in rig.responses()] == ["abandoned", "abandoned"]
    assert rig.ledger.balanced()


def test_close_exists_only_when_the_wrapped_stream_has_it(rig: Rig) -> None:
    listed = rig.etf.stream(iter([1, 2]))
    assert not hasattr(listed, "close")
    with pytest.raises(AttributeError, match="'list_iterator' object has no attribute 'close'"):
        listed.close()
    assert hasattr(rig.etf.stream(x for x in [1]), "close")


async def test_aclose_and_close_exist_only_when_the_wrapped_stream_has_them(rig: Rig) -> None:
    class OnlyAnext:
        def __aiter__(self) -> OnlyAnext:
            return self

        async def __anext__(self) -> Any:
            raise StopAsyncIteration

    bare = rig.etf.stream(OnlyAnext())
    assert not hasattr(bare, "aclose") and not hasattr(bare, "close")
    assert not hasattr(bare, "__iter__")  # an async stream is not iterable synchronously
    with pytest.raises(TypeError):
        iter(bare)

    async def agen() -> AsyncIterator[int]:
        yield 1

    generator = rig.etf.stream(agen())
    assert hasattr(generator, "aclose") and not hasattr(generator, "close")
    await generator.aclose()
    assert [state for state, _ in rig.responses()] == ["abandoned"]


# --- 2. a loop left with break, then resumed -----------------------------------------------------


def _resume_with_for(stream: Iterator[Any]) -> list[Any]:
    seen = []
    for item in stream:
        seen.append(item)
        break
    for item in stream:
        seen.append(item)
    return seen


def _resume_with_next(stream: Iterator[Any]) -> list[Any]:
    seen = []
    for item in stream:
        seen.append(item)
        break
    while True:
        try:
            seen.append(next(stream))
        except StopIteration:
            return seen


@pytest.mark.parametrize("resume", [_resume_with_for, _resume_with_next], ids=["for", "next"])
def test_a_sync_loop_left_and_resumed_is_one_response_with_every_call(rig: Rig, resume: Any) -> None:
    source = iter(TWO_CALLS)
    stream = rig.etf.stream(source)
    assert resume(stream) == TWO_CALLS
    assert rig.responses() == [("completed", ["call-a", "call-b"])]
    assert rig.ledger.balanced()


@pytest.mark.parametrize("resume", [_resume_with_for, _resume_with_next], ids=["for", "next"])
def test_a_real_openai_stream_left_and_resumed_is_one_response(rig: Rig, server: LocalChatServer, resume: Any) -> None:
    with openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client:
        server.enqueue(Script(events=TWO_CALLS), Script(events=TWO_CALLS))
        plain = [item.model_dump_json() for item in resume(_openai_stream_unqueued(client))]
        observed = [item.model_dump_json() for item in resume(rig.etf.stream(_openai_stream_unqueued(client)))]
    assert observed == plain and len(plain) == 3
    assert rig.responses() == [("completed", ["call-a", "call-b"])]
    assert rig.ledger.balanced()


def _openai_stream_unqueued(client: openai.OpenAI) -> Any:
    return client.chat.completions.create(model="m", messages=USER, stream=True)


@pytest.mark.parametrize("resume", [_resume_with_for, _resume_with_next], ids=["for", "next"])
def test_the_openai_instrumentor_records_a_resumed_stream_once(server: LocalChatServer, resume: Any) -> None:
    rig = Rig()
    instrumentor = instrument_openai(tracer_provider=rig.tracer_provider, meter_provider=rig.meter_provider)
    try:
        with openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client:
            server.enqueue(Script(events=TWO_CALLS))
            seen = resume(_openai_stream_unqueued(client))
    finally:
        instrumentor.uninstrument()
    assert len(seen) == 3
    assert rig.responses() == [("completed", ["call-a", "call-b"])]
    assert rig.ledger.balanced()


async def test_an_async_loop_left_and_resumed_is_one_response_with_every_call(rig: Rig) -> None:
    async def agen() -> AsyncIterator[Any]:
        for item in TWO_CALLS:
            yield item

    stream = rig.etf.stream(agen())
    seen = []
    async for item in stream:
        seen.append(item)
        break
    assert rig.responses() == []
    seen.append(await stream.__anext__())
    async for item in stream:
        seen.append(item)
    assert seen == TWO_CALLS
    assert rig.responses() == [("completed", ["call-a", "call-b"])]
    assert rig.ledger.balanced()


async def test_a_real_async_openai_stream_left_and_resumed_is_one_response(rig: Rig, server: LocalChatServer) -> None:
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client:
        server.enqueue(Script(events=TWO_CALLS))
        stream = rig.etf.stream(await client.chat.completions.create(model="m", messages=USER, stream=True))
        seen = []
        async for item in stream:
            seen.append(item)
            break
        seen.append(await anext(stream))
        async for item in stream:
            seen.append(item)
    assert len(seen) == 3
    assert rig.responses() == [("completed", ["call-a", "call-b"])]
    assert rig.ledger.balanced()


def test_leaving_a_loop_does_not_end_the_response(rig: Rig) -> None:
    stream = rig.etf.stream(iter(TWO_CALLS))
    for _ in stream:
        break
    gc.collect()
    assert rig.responses() == []  # paused, not abandoned: the stream is still referenced


def test_a_stream_left_and_dropped_is_abandoned_when_collected(rig: Rig) -> None:
    stream = rig.etf.stream(iter(TWO_CALLS))
    for _ in stream:
        break
    del stream
    gc.collect()
    assert [state for state, _ in rig.responses()] == ["abandoned"]
    assert len(rig.ledger.started) == 3  # the response and its two slots
    assert rig.ledger.balanced()


def test_a_loop_kept_alive_by_its_iterator_ends_at_exhaustion(rig: Rig) -> None:
    """``iter(stream)`` held by the app keeps the stream: dropping the stream itself abandons nothing."""
    iterator = iter(rig.etf.stream(iter(TWO_CALLS)))
    first = next(iterator)
    gc.collect()
    assert rig.responses() == []
    assert [first, *iterator] == TWO_CALLS
    assert rig.responses() == [("completed", ["call-a", "call-b"])]
    assert rig.ledger.balanced()


@pytest.mark.parametrize("how", ["close", "with"])
def test_a_stream_left_then_closed_is_abandoned_at_once(rig: Rig, how: str) -> None:
    def source() -> Iterator[Any]:
        yield from TWO_CALLS

    stream = rig.etf.stream(source())
    if how == "close":
        for _ in stream:
            break
        stream.close()
    else:
        with stream:
            for _ in stream:
                break
    assert [state for state, _ in rig.responses()] == ["abandoned"]
    assert rig.ledger.balanced()


def test_a_stream_resumed_after_exhaustion_is_recorded_once(rig: Rig) -> None:
    stream = rig.etf.stream(iter(TWO_CALLS))
    assert list(stream) == TWO_CALLS
    assert list(stream) == []
    with pytest.raises(StopIteration):
        next(stream)
    assert rig.responses() == [("completed", ["call-a", "call-b"])]
    assert rig.ledger.balanced()


async def test_the_other_kind_of_context_manager_fails_as_on_the_sdk_stream(rig: Rig, server: LocalChatServer) -> None:
    """wrapt's base proxy has both kinds; an observed SDK stream has the kind the SDK's has."""
    with openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client:
        server.enqueue(Script(events=TWO_CALLS), Script(events=TWO_CALLS))
        plain = _openai_stream_unqueued(client)
        observed = rig.etf.stream(_openai_stream_unqueued(client))
        errors = []
        for stream in (plain, observed):
            with pytest.raises(TypeError) as raised:
                async with stream:
                    pass  # pragma: no cover
            errors.append(str(raised.value))
        assert errors[1] == errors[0]
        assert "asynchronous context manager protocol" in errors[1]
        with observed as entered:  # its own kind still works, and ends the response
            assert entered is observed
    assert [state for state, _ in rig.responses()] == ["abandoned"]
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as aclient:
        server.enqueue(Script(events=TWO_CALLS), Script(events=TWO_CALLS))
        async_plain = await aclient.chat.completions.create(model="m", messages=USER, stream=True)
        async_observed = rig.etf.stream(await aclient.chat.completions.create(model="m", messages=USER, stream=True))
        errors = []
        for stream in (async_plain, async_observed):
            with pytest.raises(TypeError) as raised:
                with stream:
                    pass  # pragma: no cover
            errors.append(str(raised.value))
        assert errors[1] == errors[0]
        async with async_observed as entered:
            assert entered is async_observed
        await async_plain.close()
    assert [state for state, _ in rig.responses()] == ["abandoned", "abandoned"]


async def test_the_anthropic_instrumentor_returns_an_async_stream_without_aclose(server: LocalChatServer) -> None:
    """The symptom as an application meets it: instrumented, ``hasattr(stream, "aclose")`` is unchanged."""
    from etf_otel.integrations.anthropic import instrument_anthropic

    rig = Rig()
    async with anthropic.AsyncAnthropic(base_url=server.root_url, api_key="t", max_retries=0, timeout=5.0) as client:
        server.enqueue(Script(events=MESSAGE, named=True), Script(events=MESSAGE, named=True))
        plain = await client.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
        instrumentor = instrument_anthropic(tracer_provider=rig.tracer_provider, meter_provider=rig.meter_provider)
        try:
            observed = await client.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
            assert_same_surface(plain, observed)
            assert not hasattr(observed, "aclose")
            seen = []
            async for event in observed:
                seen.append(event)
                break
            async for event in observed:  # resumed: the same response
                seen.append(event)
        finally:
            instrumentor.uninstrument()
        await plain.close()
    assert len(seen) == len(MESSAGE)
    assert rig.responses() == [("completed", ["toolu_1"])]
    assert rig.ledger.balanced()
