"""The ``openai`` instrumentor, driven by the real ``openai`` client over real HTTP.

Every test talks to :class:`~etf_otel.testing.LocalChatServer` on 127.0.0.1 with the real
SDK (HTTP stack, SSE decoder, chunk models): nothing below the client is mocked. Most
scenarios run the same script twice, once without and once with the instrumentor, and
require the application to see exactly the same chunks (types and serialized content) and
the same exception, then check what was emitted: spans, their attributes and events, and
metrics (docs/categories.md, 6 and 7).

The instrumentor patches ``openai`` classes globally and is a singleton: the ``etf``
fixture always uninstruments in its finalizer.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import logging
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
import openai.resources.chat.completions as completions_module
import pytest
import wrapt
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from etf_otel.instrumentation import ObservedAsyncStream, ObservedStream
from etf_otel.integrations.openai import _instrumentor as instrumentor_module
from etf_otel.integrations.openai._instrumentor import OpenAIInstrumentor, detect_provider, instrument_openai
from etf_otel.protocols._chat_completions import assemble
from etf_otel.testing import DONE, LocalChatServer, Script
from etf_otel.testing.chat import chunk
from tests.conftest import Captured
from tests.integrations.redirect import LocalRedirect
from tests.integrations.support import (
    Harness,
    all_attribute_values,
    by_id,
    drain,
    drain_async,
    dump,
    hook_points,
    hooked,
    response_span,
    tool_spans,
    wrappers,
)

USER: list[dict[str, Any]] = [{"role": "user", "content": "read page 1 and save a report"}]


def frag(index: Any = 0, **fields: Any) -> dict[str, Any]:
    """One tool-call fragment; ``index=None`` leaves the key out entirely."""
    return fields if index is None else {"index": index, **fields}


def fn(name: str | None = None, arguments: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if name is not None:
        out["name"] = name
    if arguments is not None:
        out["arguments"] = arguments
    return out


def end(reason: str = "tool_calls") -> list[Any]:
    return [chunk(finish_reason=reason), DONE]


# --- scripts (the SSE events the server sends) ----------------------------------------------------------

NULL_CONTINUATION = [
    chunk(tool_calls=[frag(0, id="call-a", type="function", function=fn("read_page", '{"page":'))]),
    chunk(tool_calls=[frag(0, id=None, function=fn(arguments="1}"))]),
    *end(),
]

PARALLEL = [
    chunk(content=""),
    chunk(tool_calls=[frag(0, id="call-1", type="function", function=fn("read_page", '{"pa'))]),
    chunk(tool_calls=[frag(1, id="call-2", type="function", function=fn("read_page", '{"page":'))]),
    chunk(tool_calls=[frag(0, function=fn(arguments='ge":1}'))]),
    chunk(tool_calls=[frag(2, id="call-3", type="function", function=fn("save_report", '{"title":"r"}'))]),
    chunk(tool_calls=[frag(1, function=fn(arguments="2}"))]),
    *end(),
]

EMPTY_CONTINUATION = [
    chunk(tool_calls=[frag(0, id="call-a", type="function", function=fn("read_page", '{"page":'))]),
    chunk(tool_calls=[frag(0, id="", function=fn(arguments="1}"))]),
    *end(),
]

CONFLICTING_ID = [
    chunk(tool_calls=[frag(0, id="call-a", type="function", function=fn("read_page", '{"page":'))]),
    chunk(tool_calls=[frag(0, id="call-b", function=fn(arguments="1}"))]),
    *end(),
]

ALL_ON_INDEX_ZERO = [
    chunk(tool_calls=[frag(0, id="call-1", type="function", function=fn("read_page", '{"page":1}'))]),
    chunk(tool_calls=[frag(0, id="call-2", type="function", function=fn("read_page", '{"page":2}'))]),
    chunk(tool_calls=[frag(0, id="call-3", type="function", function=fn("save_report", '{"title":"r"}'))]),
    *end(),
]

MISSING_INDEX = [
    chunk(tool_calls=[frag(0, id="call-a", type="function", function=fn("read_page", '{"page":'))]),
    chunk(tool_calls=[frag(None, id=None, function=fn(arguments="1}"))]),
    *end(),
]

PARALLEL_IDS = ("call-1", "call-2", "call-3")

CUT_MID_ARGUMENTS = Script(events=NULL_CONTINUATION, cut_after=1)

NO_TERMINAL_EVENT = NULL_CONTINUATION[:2]

TEXT_ONLY = [chunk(content="done"), *end("stop")]


def proposing(*ids: str, name: str = "read_page") -> list[Any]:
    """A clean response proposing one call per id, each on its own index."""
    events: list[Any] = [
        chunk(tool_calls=[frag(i, id=call_id, type="function", function=fn(name, f'{{"page":{i + 1}}}'))])
        for i, call_id in enumerate(ids)
    ]
    return [*events, *end()]


# --- running the real client --------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What the application saw: every chunk (type and JSON), and the exception that ended it, if any."""

    chunks: list[tuple[str, str]] = field(default_factory=list)
    error: tuple[type[BaseException], str] | None = None
    stream_type: type | None = None


def consume(client: openai.OpenAI, messages: Sequence[Any] = USER, *, stop_after: int | None = None) -> Outcome:
    """Iterate one streamed ``create`` like an application does; ``stop_after`` breaks then closes."""
    outcome = Outcome()
    try:
        stream = client.chat.completions.create(model="m", messages=messages, stream=True)
        outcome.stream_type = type(stream)
        drain(stream, outcome.chunks, stop_after)
    except Exception as error:  # the test compares it with the uninstrumented run
        outcome.error = (type(error), str(error))
    return outcome


async def consume_async(
    client: openai.AsyncOpenAI, messages: Sequence[Any] = USER, *, stop_after: int | None = None
) -> Outcome:
    outcome = Outcome()
    try:
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True)
        outcome.stream_type = type(stream)
        await drain_async(stream, outcome.chunks, stop_after)
    except Exception as error:
        outcome.error = (type(error), str(error))
    return outcome


def is_wrapped() -> bool:
    """Whether etf-otel's instrumentor wraps the openai SDK's hook points (all of them)."""
    wrapped = hooked("openai")
    assert wrapped in ([], [f"{cls.__name__}.{name}" for cls, name in hook_points("openai")]), wrapped
    return bool(wrapped)


class Etf(Harness[OpenAIInstrumentor]):
    """Instruments on demand with the captured providers; always uninstrumented afterwards."""

    def instrument(self, **config: Any) -> OpenAIInstrumentor:
        assert not is_wrapped(), "a previous test left openai instrumented"
        self.instrumentor = instrument_openai(**self.providers(), **config)
        assert is_wrapped()
        return self.instrumentor


@pytest.fixture
def etf(captured: Captured) -> Iterator[Etf]:
    with Etf(captured) as harness:
        yield harness


@pytest.fixture
def client(server: LocalChatServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as c:
        yield c


def script_of(events: Script | list[Any]) -> Script:
    return events if isinstance(events, Script) else Script(events=events)


def run_both(
    etf: Etf,
    server: LocalChatServer,
    client: openai.OpenAI,
    events: Script | list[Any],
    *,
    stop_after: int | None = None,
    **config: Any,
) -> Outcome:
    """Run ``events`` uninstrumented, then instrumented; the application must see the same thing."""
    server.enqueue(script_of(events), script_of(events))
    baseline = consume(client, stop_after=stop_after)
    assert baseline.stream_type is openai.Stream or baseline.error is not None
    etf.instrument(**config)
    observed = consume(client, stop_after=stop_after)
    assert observed.chunks == baseline.chunks
    assert observed.error == baseline.error
    if baseline.stream_type is not None:
        assert observed.stream_type is ObservedStream
    # The request on the wire is the same too.
    first, second = server.requests[-2:]
    assert second.body == first.body
    return observed


def rejected_events(span: ReadableSpan) -> list[dict[str, Any]]:
    return [dict(event.attributes) for event in span.events if event.name == "etf.identity.rejected"]


# --- streams through the real client --------------------------------------------------------------------------


def test_parallel_calls_each_get_a_span_with_their_own_id(etf: Etf, server: LocalChatServer, client: Any) -> None:
    outcome = run_both(etf, server, client, PARALLEL)
    assert outcome.error is None
    assert len(outcome.chunks) == 7  # 6 chunks and the finish chunk; [DONE] is not yielded

    spans = tool_spans(etf.captured)
    assert sorted(span.name for span in spans) == [
        "assemble_tool_call read_page",
        "assemble_tool_call read_page",
        "assemble_tool_call save_report",
    ]
    calls = by_id(spans)
    assert set(calls) == {"call-1", "call-2", "call-3"}
    for call_id, index, fragments in (("call-1", 0, 2), ("call-2", 1, 2), ("call-3", 2, 1)):
        attributes = calls[call_id].attributes
        assert attributes["etf.tool_call.index"] == index
        assert attributes["etf.choice.index"] == 0
        assert attributes["etf.tool_call.fragments"] == fragments
        assert attributes["etf.tool_call.verdict"] == "proposed"
        assert "error.type" not in attributes
        assert calls[call_id].status.status_code is StatusCode.UNSET
        assert calls[call_id].kind is SpanKind.INTERNAL

    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "completed"
    assert response.attributes["etf.stream.slots"] == 3
    assert response.attributes["etf.stream.fragments"] == 5
    assert response.attributes["etf.stream.dispatchable"] is True
    assert tuple(response.attributes["gen_ai.response.finish_reasons"]) == ("tool_calls",)
    assert all(span.parent is not None and span.parent.span_id == response.context.span_id for span in spans)
    # localhost is no known host: the provider falls back to the client's, openai (docs/configuration.md#provider-name).
    assert response.attributes["gen_ai.provider.name"] == "openai"

    captured = etf.captured
    assert captured.metric_sum("etf.tool_call.fragments") == 5
    assert captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed") == 3
    assert captured.metric_sum("etf.tool_calls", gen_ai__tool__name="read_page") == 2
    assert captured.metric_sum("etf.streams", etf__stream__state="completed") == 1
    assert captured.metric_sum("etf.tool_call.id_transitions", etf__id__transition="establish") == 3
    assert captured.metric_sum("etf.tool_call.id_transitions", etf__id__transition="keep_omitted") == 2
    assert "etf.tool_call.identity_errors" not in captured.metrics()
    # Call ids never appear on metrics.
    for points in captured.metrics().values():
        for attributes, _ in points:
            assert not any(str(value).startswith("call-") for value in attributes.values())


def test_null_continuation_keeps_the_established_id(etf: Etf, server: LocalChatServer, client: Any) -> None:
    outcome = run_both(etf, server, client, NULL_CONTINUATION)
    assert outcome.error is None

    (span,) = tool_spans(etf.captured)
    assert span.name == "assemble_tool_call read_page"
    assert span.attributes["gen_ai.tool.call.id"] == "call-a"
    assert span.attributes["gen_ai.tool.name"] == "read_page"
    assert span.attributes["etf.tool_call.verdict"] == "proposed"
    assert span.attributes["etf.tool_call.fragments"] == 2
    assert span.attributes["etf.id.kept_null"] == 1
    assert span.status.status_code is StatusCode.UNSET
    assert not span.events  # compatibility transitions are counted, not one event each
    assert response_span(etf.captured).attributes["etf.stream.state"] == "completed"

    captured = etf.captured
    assert (
        captured.metric_sum("etf.tool_call.id_transitions", etf__id__transition="keep_null", etf__id__kind="null") == 1
    )
    assert captured.metric_sum("etf.tool_call.id_transitions", etf__id__transition="establish") == 1
    assert captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed") == 1
    assert "etf.tool_call.identity_errors" not in captured.metrics()


def test_empty_string_continuation_is_rejected_by_default(etf: Etf, server: LocalChatServer, client: Any) -> None:
    outcome = run_both(etf, server, client, EMPTY_CONTINUATION)
    assert outcome.error is None

    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "call-a"
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    assert span.attributes["error.type"] == "empty_after_established"
    assert span.status.status_code is StatusCode.ERROR
    (event,) = rejected_events(span)
    assert event["etf.error.category"] == "empty_after_established"
    assert event["etf.id.kind"] == "string"
    assert event["etf.id.empty"] is True
    assert event["etf.id.prior_present"] is True
    assert event["etf.id.transition"] == "reject"
    assert response_span(etf.captured).attributes["etf.stream.dispatchable"] is False

    captured = etf.captured
    assert (
        captured.metric_sum(
            "etf.tool_call.identity_errors",
            etf__error__category="empty_after_established",
            etf__id__prior_present=True,
            etf__id__empty=True,
        )
        == 1
    )
    assert captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="rejected") == 1


def test_empty_string_continuation_is_kept_with_the_named_rule(etf: Etf, server: LocalChatServer, client: Any) -> None:
    run_both(etf, server, client, EMPTY_CONTINUATION, allow=("empty_continuation",))
    (span,) = tool_spans(etf.captured)
    assert span.attributes["etf.tool_call.verdict"] == "proposed"
    assert span.attributes["gen_ai.tool.call.id"] == "call-a"
    assert span.attributes["etf.id.kept_empty"] == 1
    assert etf.captured.metric_sum("etf.tool_call.id_transitions", etf__id__transition="keep_empty") == 1


def test_conflicting_id_is_rejected_and_never_recorded(etf: Etf, server: LocalChatServer, client: Any) -> None:
    run_both(etf, server, client, CONFLICTING_ID)

    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "call-a"
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    assert span.attributes["error.type"] == "id_conflict"
    (event,) = rejected_events(span)
    assert event["etf.error.category"] == "id_conflict"
    assert event["etf.id.prior_present"] is True
    assert "call-b" not in all_attribute_values(etf.captured)
    assert etf.captured.metric_sum("etf.tool_call.identity_errors", etf__error__category="id_conflict") == 1


def test_parallel_calls_all_on_index_zero_are_id_conflicts(etf: Etf, server: LocalChatServer, client: Any) -> None:
    run_both(etf, server, client, ALL_ON_INDEX_ZERO)

    (span,) = tool_spans(etf.captured)  # one slot: nothing is split or invented
    assert span.attributes["gen_ai.tool.call.id"] == "call-1"
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    assert span.attributes["etf.tool_call.fragments"] == 3
    assert span.attributes["error.type"] == "id_conflict"
    categories = [event["etf.error.category"] for event in rejected_events(span)]
    assert categories.count("id_conflict") == 2
    values = all_attribute_values(etf.captured)
    assert "call-2" not in values and "call-3" not in values
    assert response_span(etf.captured).attributes["etf.stream.dispatchable"] is False
    assert etf.captured.metric_sum("etf.tool_call.identity_errors", etf__error__category="id_conflict") == 2


def test_missing_index_blocks_the_response(etf: Etf, server: LocalChatServer, client: Any) -> None:
    run_both(etf, server, client, MISSING_INDEX)

    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "call-a"
    assert span.attributes["etf.tool_call.fragments"] == 1  # the index-less fragment merged nowhere
    response = response_span(etf.captured)
    assert response.attributes["etf.stream.dispatchable"] is False
    assert (
        etf.captured.metric_sum(
            "etf.tool_call.identity_errors", etf__error__category="missing_index", etf__id__kind="null"
        )
        == 1
    )


def test_connection_cut_mid_arguments_reaches_the_app_unchanged(etf: Etf, server: LocalChatServer, client: Any) -> None:
    outcome = run_both(etf, server, client, CUT_MID_ARGUMENTS)
    assert outcome.error is not None and outcome.error[0] is openai.APIConnectionError
    assert len(outcome.chunks) == 1

    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "call-a"
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    # Cut mid-arguments: "{\"page\":" does not parse either, and that check comes first (docs/identity-rules.md).
    assert tuple(span.attributes["etf.tool_call.categories"]) == ("invalid_arguments", "truncated_stream")
    assert span.attributes["error.type"] == "invalid_arguments"
    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "failed"
    assert response.attributes["error.type"] == "truncated_stream"
    assert response.status.status_code is StatusCode.ERROR
    assert etf.captured.metric_sum("etf.streams", etf__stream__state="failed") == 1
    assert etf.captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="rejected") == 1


def test_body_without_terminal_event_is_truncated(etf: Etf, server: LocalChatServer, client: Any) -> None:
    outcome = run_both(etf, server, client, NO_TERMINAL_EVENT)
    assert outcome.error is None and len(outcome.chunks) == 2

    (span,) = tool_spans(etf.captured)
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    assert span.attributes["error.type"] == "truncated_stream"  # the arguments are complete: only this
    assert tuple(span.attributes["etf.tool_call.categories"]) == ("truncated_stream",)
    assert span.attributes["gen_ai.tool.call.id"] == "call-a"
    assert response_span(etf.captured).attributes["etf.stream.state"] == "truncated"
    assert etf.captured.metric_sum("etf.streams", etf__stream__state="truncated") == 1


def test_consumer_that_breaks_early_then_closes_is_abandoned(etf: Etf, server: LocalChatServer, client: Any) -> None:
    outcome = run_both(etf, server, client, NULL_CONTINUATION, stop_after=1)
    assert outcome.error is None and len(outcome.chunks) == 1

    (span,) = tool_spans(etf.captured)
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    assert "truncated_stream" in span.attributes["etf.tool_call.categories"]
    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "abandoned"
    assert response.attributes["error.type"] == "truncated_stream"
    assert response.status.status_code is StatusCode.ERROR
    assert etf.captured.metric_sum("etf.streams", etf__stream__state="abandoned") == 1


def test_stream_used_as_context_manager_ends_once(etf: Etf, server: LocalChatServer, client: Any) -> None:
    server.enqueue(Script(events=NULL_CONTINUATION))
    etf.instrument()
    with client.chat.completions.create(model="m", messages=USER, stream=True) as stream:
        assert isinstance(stream, openai.Stream)
        next(iter(stream))
    assert response_span(etf.captured).attributes["etf.stream.state"] == "abandoned"
    stream.close()  # a second end records nothing more
    assert len(etf.captured.spans("assemble_response")) == 1
    assert etf.captured.metric_sum("etf.streams") == 1


def test_async_client(etf: Etf, server: LocalChatServer) -> None:
    async def both() -> tuple[Outcome, Outcome, Outcome]:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client:
            baseline = await consume_async(client)
            etf.instrument()
            observed = await consume_async(client)
            abandoned = await consume_async(client, stop_after=1)
            return baseline, observed, abandoned

    server.enqueue(*(Script(events=NULL_CONTINUATION) for _ in range(3)))
    baseline, observed, abandoned = asyncio.run(both())
    assert baseline.stream_type is openai.AsyncStream
    assert observed.stream_type is ObservedAsyncStream
    assert observed.chunks == baseline.chunks and observed.error is None
    assert abandoned.chunks == baseline.chunks[:1]

    spans = tool_spans(etf.captured)
    assert [span.attributes["gen_ai.tool.call.id"] for span in spans] == ["call-a", "call-a"]
    assert [span.attributes["etf.tool_call.verdict"] for span in spans] == ["proposed", "rejected"]
    assert spans[0].attributes["etf.id.kept_null"] == 1
    states = sorted(span.attributes["etf.stream.state"] for span in etf.captured.spans("assemble_response"))
    assert states == ["abandoned", "completed"]
    assert etf.captured.metric_sum("etf.tool_call.id_transitions", etf__id__transition="keep_null") == 1


def test_async_connection_cut_raises_the_sdk_error(etf: Etf, server: LocalChatServer) -> None:
    async def run() -> Outcome:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client:
            return await consume_async(client)

    server.enqueue(CUT_MID_ARGUMENTS)
    baseline = asyncio.run(run())
    etf.instrument()
    server.enqueue(CUT_MID_ARGUMENTS)
    observed = asyncio.run(run())
    assert observed.error == baseline.error
    assert observed.error is not None and observed.error[0] is openai.APIConnectionError
    assert observed.chunks == baseline.chunks
    assert response_span(etf.captured).attributes["etf.stream.state"] == "failed"


def test_stream_helper_still_works_and_is_observed(etf: Etf, server: LocalChatServer, client: Any) -> None:
    def run() -> tuple[list[tuple[str, str]], Any]:
        with client.chat.completions.stream(model="m", messages=USER) as stream:
            events = [dump(event) for event in stream]
            final = stream.get_final_completion()
        return events, final

    server.enqueue(Script(events=NULL_CONTINUATION), Script(events=NULL_CONTINUATION))
    baseline_events, baseline_final = run()
    etf.instrument()
    events, final = run()

    assert events == baseline_events
    assert {kind for kind, _ in events} >= {"ChunkEvent", "FunctionToolCallArgumentsDeltaEvent"}
    assert final.model_dump_json(warnings=False) == baseline_final.model_dump_json(warnings=False)
    (tool_call,) = final.choices[0].message.tool_calls
    assert tool_call.id == "call-a" and tool_call.function.arguments == '{"page":1}'

    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "call-a"
    assert span.attributes["etf.id.kept_null"] == 1
    assert response_span(etf.captured).attributes["etf.stream.state"] == "completed"


# --- the proxy and the instrumentor lifecycle -------------------------------------------------------------------


def test_stream_is_still_an_openai_stream_with_its_response(etf: Etf, server: LocalChatServer, client: Any) -> None:
    server.enqueue(Script(events=NULL_CONTINUATION))
    etf.instrument()
    stream = client.chat.completions.create(model="m", messages=USER, stream=True)
    try:
        assert isinstance(stream, openai.Stream)
        assert isinstance(stream, ObservedStream)
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        assert stream.__wrapped__.response is stream.response
    finally:
        stream.close()


def test_instrument_twice_is_a_no_op(
    etf: Etf, server: LocalChatServer, client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    first = etf.instrument()
    wrapper = completions_module.Completions.__dict__["create"]
    with caplog.at_level(logging.WARNING):
        second = instrument_openai(tracer_provider=etf.captured.tracer_provider)
    assert second is first  # BaseInstrumentor is a singleton
    assert completions_module.Completions.__dict__["create"] is wrapper  # not wrapped twice
    assert "already instrumented" in caplog.text.lower()

    server.enqueue(Script(events=NULL_CONTINUATION))
    consume(client)
    assert len(tool_spans(etf.captured)) == 1  # one wrapper, one span


def test_uninstrument_restores_the_client(etf: Etf, server: LocalChatServer, client: Any) -> None:
    points = hook_points("openai")
    originals = [cls.__dict__[name] for cls, name in points]
    assert not is_wrapped()
    instrumentor = etf.instrument()
    # (identity: a wrapt wrapper compares equal to the function it wraps)
    assert all(cls.__dict__[name] is not before for (cls, name), before in zip(points, originals, strict=True))
    instrumentor.uninstrument()
    etf.instrumentor = None
    assert all(cls.__dict__[name] is before for (cls, name), before in zip(points, originals, strict=True))
    assert all(wrappers(cls, name) == [] for cls, name in hook_points("openai"))
    assert wrappers(completions_module.Completions) == []

    server.enqueue(Script(events=NULL_CONTINUATION))
    outcome = consume(client)
    assert outcome.stream_type is openai.Stream
    assert etf.captured.spans() == []


def test_non_streaming_create_is_untouched(etf: Etf, server: LocalChatServer, client: Any) -> None:
    """LocalChatServer answers 200 with SSE only, so a non-stream call is exercised through an error status."""
    error_body = {"error": {"message": "bad request", "type": "invalid_request_error", "param": None, "code": "x"}}

    def call() -> tuple[type, str, Any]:
        server.enqueue(Script(events=[error_body], status=400))
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="m", messages=USER)
        return type(info.value), str(info.value), info.value.body

    baseline = call()
    etf.instrument()
    assert call() == baseline
    # The refused request gets the span its response would have had (AGENT-STACKS 11.8), ended with the error;
    # a request without tool turns has nothing of its pairing to say, and no stream was observed.
    (span,) = etf.captured.spans()
    assert span.name == "assemble_response"
    assert dict(span.attributes or {}) == {
        "error.type": "BadRequestError",
        "etf.protocol": "chat_completions",
        "gen_ai.provider.name": "openai",
    }
    assert "etf.streams" not in etf.captured.metrics()


def test_error_status_on_a_streaming_request_is_unchanged(etf: Etf, server: LocalChatServer, client: Any) -> None:
    error_body = {"error": {"message": "rate limited", "type": "rate_limit", "param": None, "code": "429"}}
    outcome = run_both(etf, server, client, Script(events=[error_body], status=429))
    assert outcome.error is not None and outcome.error[0] is openai.RateLimitError
    assert etf.captured.spans() == []  # no stream was ever returned


@pytest.mark.parametrize(
    ("base_url", "provider"),
    [
        ("https://api.openai.com/v1", "openai"),
        ("https://API.OpenAI.com/v1/", "openai"),
        ("https://my-resource.openai.azure.com/openai/deployments/x", "azure.ai.openai"),
        ("https://api.groq.com/openai/v1", "groq"),
        ("http://localhost:8000/v1", None),
        ("http://127.0.0.1:1234/v1", None),
        ("https://api.openai.com.evil.example/v1", None),
        ("https://notopenai.azure.com/v1", None),
        ("", None),
    ],
)
def test_detect_provider(base_url: str, provider: str | None) -> None:
    assert detect_provider(base_url) == provider


def test_provider_name_override_labels_spans_and_metrics(etf: Etf, server: LocalChatServer, client: Any) -> None:
    run_both(etf, server, client, NULL_CONTINUATION, provider_name="openai")
    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.provider.name"] == "openai"
    assert response_span(etf.captured).attributes["gen_ai.provider.name"] == "openai"
    assert etf.captured.metric_sum("etf.tool_call.fragments", gen_ai__provider__name="openai") == 2
    assert etf.captured.metric_sum("etf.streams", gen_ai__provider__name="openai") == 1


def test_provider_is_detected_from_the_clients_base_url(etf: Etf, server: LocalChatServer) -> None:
    http_client = openai.DefaultHttpxClient(transport=LocalRedirect(server.port))
    with openai.OpenAI(
        base_url="https://api.openai.com/v1", api_key="t", max_retries=0, timeout=5.0, http_client=http_client
    ) as client:
        etf.instrument()
        server.enqueue(Script(events=NULL_CONTINUATION))
        assert consume(client).error is None
    assert server.requests[-1].path == "/v1/chat/completions"
    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.provider.name"] == "openai"
    assert etf.captured.metric_sum("etf.streams", gen_ai__provider__name="openai") == 1


# --- linkage across turns ----------------------------------------------------------------------------------------


def assistant_turn(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "read_page", "arguments": '{"page":1}'}}
            for call_id in ids
        ],
    }


def tool_message(call_id: str, content: str = "page text") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def converse(server: LocalChatServer, client: Any, turns: list[tuple[list[Any], list[Any]]]) -> None:
    """Send each ``(messages, response events)`` turn through the real client, consuming every stream."""
    for messages, events in turns:
        server.enqueue(Script(events=events))
        sent = copy.deepcopy(messages)
        outcome = consume(client, messages)
        assert outcome.error is None
        assert messages == sent  # the app's messages are not modified
        assert server.requests[-1].body["messages"] == sent  # nor what reaches the server


def violations(span: ReadableSpan) -> list[dict[str, Any]]:
    return [dict(event.attributes) for event in span.events if event.name == "etf.integrity.violation"]


def last_response(captured: Captured) -> ReadableSpan:
    return captured.spans("assemble_response")[-1]


@pytest.mark.parametrize(
    ("follow_up_tools", "expected"),
    [
        pytest.param(
            [tool_message("call-a"), tool_message("call-b"), tool_message("call-zzz")],
            [{"etf.error.category": "orphaned_result", "etf.linkage.orphan_reason": "unknown"}],
            id="orphaned_result",
        ),
        pytest.param(
            [tool_message("call-a")],
            [{"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "call-b"}],
            id="unanswered_call",
        ),
        pytest.param(
            [tool_message("call-a"), tool_message("call-b"), tool_message("call-a", "again")],
            [{"etf.error.category": "duplicate_result", "gen_ai.tool.call.id": "call-a"}],
            id="duplicate_result",
        ),
        pytest.param(
            [{"role": "user", "content": "never mind, just summarize"}],
            [
                {"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "call-a"},
                {"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "call-b"},
            ],
            id="tool_messages_skipped",
        ),
    ],
)
def test_linkage_problems_are_recorded_on_the_next_response(
    etf: Etf,
    server: LocalChatServer,
    client: Any,
    follow_up_tools: list[dict[str, Any]],
    expected: list[dict[str, Any]],
) -> None:
    etf.instrument()
    follow_up = [*USER, assistant_turn("call-a", "call-b"), *follow_up_tools]
    converse(server, client, [(USER, proposing("call-a", "call-b")), (follow_up, TEXT_ONLY)])

    first, second = etf.captured.spans("assemble_response")
    assert violations(first) == []
    assert violations(second) == expected
    assert "call-zzz" not in all_attribute_values(etf.captured)  # never-proposed ids are not recorded
    category = expected[0]["etf.error.category"]
    assert etf.captured.metric_sum("etf.integrity.violations", etf__error__category=category) == len(expected)
    assert etf.captured.metric_sum("etf.integrity.violations") == len(expected)


def test_clean_multi_turn_conversation_reports_nothing(etf: Etf, server: LocalChatServer, client: Any) -> None:
    etf.instrument()
    turn2 = [*USER, assistant_turn("call-a"), tool_message("call-a")]
    turn3 = [*turn2, assistant_turn("call-b", "call-c"), tool_message("call-b"), tool_message("call-c", "saved")]
    converse(
        server,
        client,
        [(USER, proposing("call-a")), (turn2, proposing("call-b", "call-c")), (turn3, TEXT_ONLY)],
    )
    responses = etf.captured.spans("assemble_response")
    assert len(responses) == 3
    assert all(violations(span) == [] for span in responses)
    assert "etf.integrity.violations" not in etf.captured.metrics()
    assert sorted(span.attributes["gen_ai.tool.call.id"] for span in tool_spans(etf.captured)) == [
        "call-a",
        "call-b",
        "call-c",
    ]


def test_unrelated_conversations_are_not_linked(etf: Etf, server: LocalChatServer, client: Any) -> None:
    """A follow-up whose call ids and prefix match no earlier response is not checked (nothing to link it to)."""
    etf.instrument()
    other = [{"role": "user", "content": "something else"}, assistant_turn("call-q"), tool_message("call-x")]
    converse(server, client, [(USER, proposing("call-a")), (other, TEXT_ONLY)])
    assert all(violations(span) == [] for span in etf.captured.spans("assemble_response"))
    assert "etf.integrity.violations" not in etf.captured.metrics()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_messages_given_as_a_generator_reach_the_server_intact(etf: Etf, server: LocalChatServer, mode: str) -> None:
    """Messages given as a generator are left to the SDK: reading them first would consume them.

    Every message reaches the server, as without the instrumentor, and the stream is observed as
    usual; only the linkage of that one request is skipped (no prefix to compare).
    """
    follow_up = [*USER, assistant_turn("call-a"), tool_message("call-a")]
    options: dict[str, Any] = {"base_url": server.base_url, "api_key": "t", "max_retries": 0, "timeout": 5.0}

    async def run_async() -> Outcome:
        async with openai.AsyncOpenAI(**options) as client:
            messages: Any = (message for message in follow_up)
            return await consume_async(client, messages)

    def run() -> Outcome:
        if mode == "async":
            return asyncio.run(run_async())
        with openai.OpenAI(**options) as client:
            messages: Any = (message for message in follow_up)
            return consume(client, messages)

    server.enqueue(Script(events=TEXT_ONLY), Script(events=TEXT_ONLY))
    baseline = run()
    etf.instrument()
    observed = run()
    assert (observed.chunks, observed.error) == (baseline.chunks, None)
    assert observed.stream_type is (ObservedStream if mode == "sync" else ObservedAsyncStream)
    first, second = server.requests[-2:]
    assert first.body["messages"] == follow_up
    assert second.body["messages"] == follow_up
    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "completed"
    assert violations(response) == []


# --- coexistence with the OpenTelemetry GenAI instrumentation for openai -----------------------------------------


def _peer_instrumentor() -> Callable[[], Any]:
    module = pytest.importorskip(
        "opentelemetry.instrumentation.genai.openai",
        reason="opentelemetry-instrumentation-genai-openai is not installed (test extra)",
    )
    return module.OpenAIInstrumentor  # type: ignore[no-any-return]


def _restore_create() -> None:
    """Peel off any wrapper left on ``create`` (for the finalizer of the out-of-order test)."""
    for cls in (completions_module.Completions, completions_module.AsyncCompletions):
        while isinstance(cls.__dict__["create"], (wrapt.FunctionWrapper, wrapt.BoundFunctionWrapper)):
            cls.create = cls.__dict__["create"].__wrapped__  # type: ignore[method-assign]


@pytest.mark.parametrize("ours_first", [False, True], ids=["peer-then-etf", "etf-then-peer"])
def test_coexists_with_the_opentelemetry_genai_openai_instrumentation(
    etf: Etf, server: LocalChatServer, client: Any, ours_first: bool
) -> None:
    peer = _peer_instrumentor()()
    server.enqueue(Script(events=PARALLEL), Script(events=PARALLEL))
    baseline = consume(client)

    def instrument_peer() -> None:
        peer.instrument(tracer_provider=etf.captured.tracer_provider, meter_provider=etf.captured.meter_provider)

    try:
        if ours_first:
            etf.instrument()
            instrument_peer()
        else:
            instrument_peer()
            etf.instrument()
        assert len(wrappers(completions_module.Completions)) == 1 and is_wrapped()  # theirs on create, ours below
        observed = consume(client)
    finally:  # last in, first out
        if ours_first:
            peer.uninstrument()
            etf.close()
        else:
            etf.close()
            peer.uninstrument()
        _restore_create()

    assert observed.chunks == baseline.chunks and observed.error is None
    names = [span.name for span in etf.captured.spans()]
    peer_spans = [span for span in etf.captured.spans() if span.instrumentation_scope.name != "etf_otel"]
    assert any(span.kind is SpanKind.CLIENT for span in peer_spans), names
    assert {span.attributes["gen_ai.tool.call.id"] for span in tool_spans(etf.captured)} == set(PARALLEL_IDS)
    assert response_span(etf.captured).attributes["etf.stream.state"] == "completed"
    assert etf.captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed") == 3


def test_uninstrument_removes_only_its_own_wrapper(etf: Etf) -> None:
    peer = _peer_instrumentor()()
    etf.instrument()
    peer.instrument(tracer_provider=etf.captured.tracer_provider, meter_provider=etf.captured.meter_provider)
    try:
        etf.close()
        owners = wrappers(completions_module.Completions)
        assert not is_wrapped(), owners  # ours is gone ...
        assert len(owners) == 1, owners  # ... and the other instrumentor's wrapper is still there
    finally:
        peer.uninstrument()
        _restore_create()


def test_request_body_is_json_identical(etf: Etf, server: LocalChatServer, client: Any) -> None:
    etf.instrument()
    server.enqueue(Script(events=NULL_CONTINUATION))
    consume(client)
    body = server.requests[-1].body
    assert body["messages"] == USER and body["stream"] is True and body["model"] == "m"
    assert json.loads(json.dumps(body)) == body


# --- the [DONE] sentinel, which the SDK swallows -----------------------------------------------------------------

# TGI 3.1.2 and vllm-mlx end a tool-call stream with ``data: [DONE]`` and never send a finish_reason.
DONE_WITHOUT_FINISH_REASON = [
    chunk(tool_calls=[frag(0, id="call-a", type="function", function=fn("read_page", '{"page":'))]),
    chunk(tool_calls=[frag(0, function=fn(arguments="1}"))]),
    DONE,
]

NEITHER_DONE_NOR_FINISH_REASON = DONE_WITHOUT_FINISH_REASON[:-1]


def _replay_verdict(events: Sequence[Any]) -> tuple[str, bool]:
    """What ``etf-otel replay`` decides for the same events (the reference assembler over the raw data)."""
    result = assemble(copy.deepcopy(list(events)))
    return result.state.value, result.dispatchable


@pytest.mark.parametrize(
    ("events", "state", "dispatchable"),
    [
        pytest.param(DONE_WITHOUT_FINISH_REASON, "completed", True, id="done-without-finish-reason"),
        pytest.param(NEITHER_DONE_NOR_FINISH_REASON, "truncated", False, id="neither"),
    ],
)
def test_done_sentinel_reaches_the_rules_through_the_client(
    etf: Etf, server: LocalChatServer, client: Any, events: list[Any], state: str, dispatchable: bool
) -> None:
    outcome = run_both(etf, server, client, events)
    assert outcome.error is None and len(outcome.chunks) == 2  # [DONE] is never yielded to the app

    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == state
    assert response.attributes["etf.stream.dispatchable"] is dispatchable
    assert tuple(response.attributes["gen_ai.response.finish_reasons"]) == ()
    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "call-a"
    assert span.attributes["etf.tool_call.verdict"] == ("proposed" if dispatchable else "rejected")
    # The same judgement as replay of the raw bytes.
    assert _replay_verdict(events) == (state, dispatchable)


def test_done_sentinel_reaches_the_rules_through_the_async_client(etf: Etf, server: LocalChatServer) -> None:
    async def run() -> list[Outcome]:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client:
            baseline = await consume_async(client)
            etf.instrument()
            return [baseline, await consume_async(client), await consume_async(client)]

    server.enqueue(
        Script(events=DONE_WITHOUT_FINISH_REASON),
        Script(events=DONE_WITHOUT_FINISH_REASON),
        Script(events=NEITHER_DONE_NOR_FINISH_REASON),
    )
    baseline, done, neither = asyncio.run(run())
    assert done.chunks == baseline.chunks and done.error is None and len(done.chunks) == 2
    assert neither.chunks == baseline.chunks and neither.error is None
    assert done.stream_type is ObservedAsyncStream

    first, second = etf.captured.spans("assemble_response")
    assert (first.attributes["etf.stream.state"], first.attributes["etf.stream.dispatchable"]) == ("completed", True)
    assert (second.attributes["etf.stream.state"], second.attributes["etf.stream.dispatchable"]) == (
        "truncated",
        False,
    )
    assert [span.attributes["etf.tool_call.verdict"] for span in tool_spans(etf.captured)] == ["proposed", "rejected"]


def _instrumentor_calls_async(etf: Etf, server: LocalChatServer, *responses: list[Any]) -> list[Counter[str]]:
    """How often each function of the instrumentor's module runs while the async client reads each response."""
    calls: Counter[str] = Counter()

    def profile(frame: Any, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename == instrumentor_module.__file__:
            calls[frame.f_code.co_name] += 1

    async def run() -> list[Counter[str]]:
        counted = []
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client:
            await consume_async(client)  # warm-up: the client's provider is worked out once
            for _ in responses:
                calls.clear()
                sys.setprofile(profile)
                try:
                    outcome = await consume_async(client)
                finally:
                    sys.setprofile(None)
                assert outcome.error is None
                counted.append(calls.copy())
        return counted

    server.enqueue(*[Script(events=events) for events in (responses[0], *responses)])
    etf.instrument()
    return asyncio.run(run())


def test_the_async_sentinel_is_looked_for_once_not_per_event(etf: Etf, server: LocalChatServer) -> None:
    """The SDK's SSE events reach its loop unwrapped; whether ``[DONE]`` came is read once, at the end."""
    opening, closing, done = DONE_WITHOUT_FINISH_REASON
    spaces = [chunk(tool_calls=[frag(0, function=fn(arguments=" "))]) for _ in range(8)]
    short, long = _instrumentor_calls_async(etf, server, [opening, closing, done], [opening, *spaces, closing, done])
    assert short == long and "iter_events" in long  # eight more events, not one call more
    states = [
        (span.attributes["etf.stream.state"], span.attributes["etf.stream.dispatchable"])
        for span in etf.captured.spans("assemble_response")
    ]
    assert states == [("completed", True)] * 3  # the warm-up's and the two counted


def test_done_sentinel_through_the_stream_helper(etf: Etf, server: LocalChatServer, client: Any) -> None:
    """``chat.completions.stream(...)`` reads the same raw SDK stream: the sentinel is seen there too."""
    server.enqueue(Script(events=DONE_WITHOUT_FINISH_REASON))
    etf.instrument()
    with client.chat.completions.stream(model="m", messages=USER) as stream:
        kinds = [type(event).__name__ for event in stream]
    assert "FunctionToolCallArgumentsDeltaEvent" in kinds
    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "completed"
    assert response.attributes["etf.stream.dispatchable"] is True


def test_stream_left_before_the_sentinel_is_abandoned(etf: Etf, server: LocalChatServer, client: Any) -> None:
    """The sentinel is observed when the SDK meets it, not assumed: a consumer that stops first sees no end."""
    outcome = run_both(etf, server, client, DONE_WITHOUT_FINISH_REASON, stop_after=2)
    assert len(outcome.chunks) == 2
    assert response_span(etf.captured).attributes["etf.stream.state"] == "abandoned"


def test_raw_response_is_observed_when_the_application_parses_it(
    etf: Etf, server: LocalChatServer, client: Any
) -> None:
    """``with_raw_response.create(stream=True)`` returns the HTTP response; the stream its ``parse()``
    gives is observed (the ``[DONE]`` the SDK swallows included), once however often it is parsed."""
    etf.instrument()
    server.enqueue(Script(events=DONE_WITHOUT_FINISH_REASON))
    raw = client.chat.completions.with_raw_response.create(model="m", messages=USER, stream=True)
    assert type(raw).__name__ == "LegacyAPIResponse"
    assert etf.captured.spans() == []  # nothing parsed yet
    stream = raw.parse()
    assert isinstance(stream, openai.Stream) and raw.parse() is stream
    assert len(list(stream)) == 2
    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "completed"
    assert response.attributes["etf.response.streamed"] is True


@pytest.mark.parametrize("stream_class", [openai.Stream, openai.AsyncStream])
def test_sdk_leaves_its_event_loop_early_only_at_the_sentinel(stream_class: type) -> None:
    """Pins what the ``[DONE]`` detection relies on: ``__stream__`` has one ``break``, at ``[DONE]``, sync and async.

    The SSE events still pending when the chunks end are how the sentinel is told apart from
    a body that simply ended; another early exit in a later SDK must be looked at first.
    """
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(stream_class.__stream__)))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    breaks = [node for node in ast.walk(tree) if isinstance(node, (ast.Break, ast.Return))]
    assert [type(node) for node in breaks] == [ast.Break]
    guard = parents[breaks[0]]
    assert isinstance(guard, ast.If)
    assert ast.unparse(guard.test) == "sse.data.startswith('[DONE]')"


def _cyclic_garbage_per_response(server: LocalChatServer, client: openai.OpenAI, responses: int = 10) -> float:
    """Objects the cycle collector frees after ``responses`` streamed responses, per response."""
    server.enqueue(*[Script(events=NULL_CONTINUATION) for _ in range(responses + 1)])
    consume(client)  # warm-up: lazy imports and caches are not garbage
    gc.collect()
    gc.disable()
    try:
        for _ in range(responses):
            consume(client)
        return gc.collect() / responses
    finally:
        gc.enable()


def test_an_observed_chat_stream_leaves_no_reference_cycle(etf: Etf, server: LocalChatServer) -> None:
    """Each response is freed when it is dropped, as without the instrumentor: none waits for the collector.

    The end-sentinel hook is stored on the SDK's stream; holding the stream strongly from it made a
    cycle that kept every response's stream, HTTP response and request alive until a collection.
    """
    with openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client:
        bare = _cyclic_garbage_per_response(server, client)
        etf.instrument()
        observed = _cyclic_garbage_per_response(server, client)
    assert observed <= bare + 1, (observed, bare)


def _async_cyclic_garbage_per_response(server: LocalChatServer, stop_after: int | None, responses: int = 10) -> float:
    """Objects the cycle collector frees after ``responses`` responses of the async client, per response."""

    async def run() -> float:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client:
            await consume_async(client, stop_after=stop_after)  # warm-up: lazy imports and caches
            await asyncio.sleep(0)  # the SSE iterators' closing, scheduled by their finalizers
            gc.collect()
            gc.disable()
            try:
                for _ in range(responses):
                    await consume_async(client, stop_after=stop_after)
                    await asyncio.sleep(0)
                return gc.collect() / responses
            finally:
                gc.enable()

    server.enqueue(*[Script(events=DONE_WITHOUT_FINISH_REASON) for _ in range(responses + 1)])
    return asyncio.run(run())


@pytest.mark.parametrize("stop_after", [None, 1], ids=["read to the end", "closed early"])
def test_an_observed_async_chat_stream_leaves_no_reference_cycle(
    etf: Etf, server: LocalChatServer, stop_after: int | None
) -> None:
    """The SSE iterator the async sentinel check holds is let go when the response is reported."""
    bare = _async_cyclic_garbage_per_response(server, stop_after)
    etf.instrument()
    observed = _async_cyclic_garbage_per_response(server, stop_after)
    assert observed <= bare + 1, (observed, bare)
