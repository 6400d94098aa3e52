"""The ``anthropic`` instrumentor, driven by the real ``anthropic`` client over real HTTP.

Every test talks to :class:`~etf_otel.testing.LocalChatServer` on 127.0.0.1 with the real
SDK (HTTP stack, SSE decoder, event models, the ``messages.stream(...)`` helper): nothing below
the client is mocked. Scripts are ``named=True``: the SDK skips an SSE event without an
``event:`` line. Most scenarios run the same script twice, once without and once with the
instrumentor, and require the application to see exactly the same events, final message and
exception, then check what was emitted.

The instrumentor patches ``anthropic`` classes globally and is a singleton: the ``etf``
fixture always uninstruments in its finalizer.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.lib.streaming import AsyncMessageStream, AsyncMessageStreamManager, MessageStream, MessageStreamManager
from anthropic.resources.messages import messages as messages_module
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from etf_otel.errors import GuardRefusedError
from etf_otel.instrumentation import ObservedAsyncStream, ObservedStream
from etf_otel.integrations.anthropic import (
    AnthropicInstrumentor,
    instrument_accumulator,
    instrument_anthropic,
    provider_of_client,
)
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing import anthropic as E
from tests.conftest import Captured
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

MODEL = "claude-sonnet-5-5"  # not one the SDK warns about as deprecated (warnings are errors here)
USER: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Paris, and the time?"}]

# --- scripts (the SSE events the server sends) ----------------------------------------------------------

VALID = E.stream(
    E.text_block(0),
    E.tool_call(1, "toolu_01", "get_weather", '{"city":', ' "Paris"}'),
    E.tool_call(2, "toolu_02", "get_time", '{"tz":"CET"}'),
)

# A second content_block_start at index 0 with another id: an identity conflict on the slot.
REUSED_INDEX = E.stream(
    E.tool_call(0, "toolu_01", "get_weather", '{"city":"Paris"}'),
    E.tool_call(0, "toolu_02", "get_weather", '{"city":"Rome"}'),
)

# max_tokens hit while the API buffered the only parameter: the block closes with just the "" delta.
MAX_TOKENS_EMPTY = E.stream(E.tool_call(0, "toolu_01", "write_file"), stop_reason="max_tokens")

ERROR_EVENT = [
    *E.stream(E.tool_call(0, "toolu_01", "get_weather", '{"city":"Paris"}'), stop_reason=E.MISSING, stop=False)
]
ERROR_EVENT.append(E.error("overloaded_error"))

# Cut after message_start, the text block (3 events), the tool start, its "" delta and '{"city":'.
CUT_MID_ARGUMENTS = Script(events=VALID, named=True, cut_after=7)


def proposing(*ids: str) -> list[dict[str, Any]]:
    """A clean message proposing one ``get_weather`` call per id, each in its own block."""
    return E.stream(*(E.tool_call(i, call_id, "get_weather", '{"city":"Paris"}') for i, call_id in enumerate(ids)))


TEXT_ONLY = E.stream(E.text_block(0, "It is sunny."), stop_reason="end_turn")


def named(events: Script | list[Any]) -> Script:
    return events if isinstance(events, Script) else Script(events=events, named=True)


# --- running the real client --------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What the application saw: every event (type and JSON), the final message, the exception."""

    events: list[tuple[str, str]] = field(default_factory=list)
    error: tuple[type[BaseException], str] | None = None
    final: str | None = None
    text: str | None = None
    types: tuple[type, ...] = ()


def consume(client: anthropic.Anthropic, messages: Any = USER, *, stop_after: int | None = None) -> Outcome:
    """Iterate one ``messages.create(stream=True)`` like an application does; ``stop_after`` breaks then closes."""
    outcome = Outcome()
    try:
        stream = client.messages.create(model=MODEL, max_tokens=1024, messages=messages, stream=True)
        outcome.types = (type(stream),)
        drain(stream, outcome.events, stop_after)
    except Exception as error:  # the test compares it with the uninstrumented run
        outcome.error = (type(error), str(error))
    return outcome


async def consume_async(
    client: anthropic.AsyncAnthropic, messages: Any = USER, *, stop_after: int | None = None
) -> Outcome:
    outcome = Outcome()
    try:
        stream = await client.messages.create(model=MODEL, max_tokens=1024, messages=messages, stream=True)
        outcome.types = (type(stream),)
        await drain_async(stream, outcome.events, stop_after)
    except Exception as error:
        outcome.error = (type(error), str(error))
    return outcome


def consume_helper(client: anthropic.Anthropic, messages: Any = USER) -> Outcome:
    """``with client.messages.stream(...) as stream``: every event, then ``get_final_message()``."""
    outcome = Outcome()
    try:
        manager = client.messages.stream(model=MODEL, max_tokens=1024, messages=messages)
        with manager as stream:
            outcome.types = (type(manager), type(stream))
            for event in stream:
                outcome.events.append(dump(event))
            outcome.final = stream.get_final_message().model_dump_json(warnings=False)
    except Exception as error:
        outcome.error = (type(error), str(error))
    return outcome


def consume_text(client: anthropic.Anthropic, messages: Any = USER) -> Outcome:
    """The helper read through ``text_stream`` only, then ``get_final_message()`` and ``get_final_text()``."""
    with client.messages.stream(model=MODEL, max_tokens=1024, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
        assert stream.get_final_text() == text
    return Outcome(final=final.model_dump_json(warnings=False), text=text)


async def consume_helper_async(client: anthropic.AsyncAnthropic, messages: Any = USER) -> Outcome:
    outcome = Outcome()
    try:
        manager = client.messages.stream(model=MODEL, max_tokens=1024, messages=messages)
        async with manager as stream:
            outcome.types = (type(manager), type(stream))
            async for event in stream:
                outcome.events.append(dump(event))
            outcome.final = (await stream.get_final_message()).model_dump_json(warnings=False)
    except Exception as error:
        outcome.error = (type(error), str(error))
    return outcome


async def consume_text_async(client: anthropic.AsyncAnthropic, messages: Any = USER) -> Outcome:
    async with client.messages.stream(model=MODEL, max_tokens=1024, messages=messages) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    return Outcome(final=final.model_dump_json(warnings=False), text=text)


_METHODS = hook_points("anthropic")


def wrapped_methods() -> list[str]:
    """The anthropic SDK's hook points etf-otel's instrumentor wraps right now."""
    return hooked("anthropic")


class Etf(Harness[AnthropicInstrumentor]):
    """Instruments on demand with the captured providers; always uninstrumented afterwards."""

    def instrument(self, **config: Any) -> AnthropicInstrumentor:
        assert wrapped_methods() == [], "a previous test left anthropic instrumented"
        self.instrumentor = instrument_anthropic(**self.providers(), **config)
        assert len(wrapped_methods()) == len(hook_points("anthropic"))
        return self.instrumentor


@pytest.fixture
def etf(captured: Captured) -> Iterator[Etf]:
    with Etf(captured) as harness:
        yield harness


@pytest.fixture
def client(server: LocalChatServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.root_url, api_key="t", max_retries=0, timeout=5.0) as c:
        yield c


def async_client(server: LocalChatServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.root_url, api_key="t", max_retries=0, timeout=5.0)


def run_both(
    etf: Etf,
    server: LocalChatServer,
    client: anthropic.Anthropic,
    events: Script | list[Any],
    run: Callable[[anthropic.Anthropic], Outcome] = consume,
    **config: Any,
) -> tuple[Outcome, Outcome]:
    """Run ``events`` uninstrumented, then instrumented; the application must see the same thing."""
    server.enqueue(named(events), named(events))
    baseline = run(client)
    etf.instrument(**config)
    observed = run(client)
    assert observed.events == baseline.events
    assert observed.error == baseline.error
    assert observed.final == baseline.final
    assert observed.text == baseline.text
    first, second = server.requests[-2:]
    assert second.body == first.body  # the request on the wire is the same too
    return baseline, observed


def run_both_async(
    etf: Etf, server: LocalChatServer, events: Script | list[Any], run: Callable[[Any], Any]
) -> tuple[Outcome, Outcome]:
    async def both() -> tuple[Outcome, Outcome]:
        async with async_client(server) as client:
            baseline = await run(client)
            etf.instrument()
            return baseline, await run(client)

    server.enqueue(named(events), named(events))
    baseline, observed = asyncio.run(both())
    assert (observed.events, observed.error, observed.final, observed.text) == (
        baseline.events,
        baseline.error,
        baseline.final,
        baseline.text,
    )
    return baseline, observed


def assert_valid_response(captured: Captured, provider: str = "anthropic") -> None:
    """The spans of :data:`VALID`: two proposed calls with their ``toolu_`` ids, a completed response."""
    spans = by_id(tool_spans(captured))
    assert set(spans) == {"toolu_01", "toolu_02"}
    for call_id, name, index in (("toolu_01", "get_weather", 1), ("toolu_02", "get_time", 2)):
        attributes = spans[call_id].attributes
        assert attributes["gen_ai.tool.name"] == name
        assert attributes["etf.tool_call.index"] == index
        assert attributes["etf.tool_call.verdict"] == "proposed"
        assert attributes["gen_ai.provider.name"] == provider
        assert "error.type" not in attributes
    response = response_span(captured)
    assert response.attributes["etf.stream.state"] == "completed"
    assert response.attributes["etf.stream.dispatchable"] is True
    assert response.attributes["etf.protocol"] == "anthropic_messages"
    assert response.attributes["gen_ai.provider.name"] == provider
    assert all(span.parent is not None and span.parent.span_id == response.context.span_id for span in spans.values())
    assert captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed") == 2
    assert captured.metric_sum("etf.streams", etf__stream__state="completed") == 1


# --- messages.create(stream=True) ------------------------------------------------------------------------------


def test_valid_calls_are_proposed_under_their_tool_use_ids(etf: Etf, server: LocalChatServer, client: Any) -> None:
    baseline, observed = run_both(etf, server, client, VALID)
    assert observed.error is None and len(observed.events) == len(VALID)
    assert baseline.types == (anthropic.Stream,)
    assert observed.types == (ObservedStream,)
    assert_valid_response(etf.captured)


def test_reused_block_index_with_another_id_is_an_id_conflict(etf: Etf, server: LocalChatServer, client: Any) -> None:
    baseline, _ = run_both(etf, server, client, REUSED_INDEX, consume_helper)
    # What the SDK makes of it: the repeated start becomes a second block, and the second
    # block's deltas went to the first one (by index). Executing the final message would run
    # toolu_02 with {} and toolu_01 with arguments that no single block streamed.
    assert baseline.final is not None
    content = json.loads(baseline.final)["content"]
    assert [(block["id"], block["input"]) for block in content] == [("toolu_01", {"city": "Paris"}), ("toolu_02", {})]

    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "toolu_01"
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    assert span.attributes["error.type"] == "id_conflict"
    rejected = [dict(event.attributes) for event in span.events if event.name == "etf.identity.rejected"]
    assert [event["etf.error.category"] for event in rejected] == ["id_conflict"]
    assert "toolu_02" not in all_attribute_values(etf.captured)  # a rejected id is never recorded
    assert response_span(etf.captured).attributes["etf.stream.dispatchable"] is False
    assert etf.captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed") == 0


def test_max_tokens_with_the_empty_placeholder_is_incomplete(etf: Etf, server: LocalChatServer, client: Any) -> None:
    _, observed = run_both(etf, server, client, MAX_TOKENS_EMPTY, consume_helper)
    # The SDK's final message shows a valid-looking call: input {} (the block start's placeholder).
    assert observed.error is None and observed.final is not None
    final = json.loads(observed.final)
    assert final["stop_reason"] == "max_tokens"
    assert [(block["type"], block["id"], block["input"]) for block in final["content"]] == [
        ("tool_use", "toolu_01", {})
    ]

    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "toolu_01"
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    assert "incomplete_response" in span.attributes["etf.tool_call.categories"]
    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "completed"  # ended properly, and said it was cut
    assert response.attributes["etf.stream.dispatchable"] is False
    assert response.attributes["error.type"] == "incomplete_response"
    assert etf.captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed") == 0


@pytest.mark.parametrize("run", [consume, consume_helper], ids=["create", "stream"])
def test_error_event_raises_the_sdk_error_unchanged(
    etf: Etf, server: LocalChatServer, client: Any, run: Callable[[Any], Outcome]
) -> None:
    _, observed = run_both(etf, server, client, ERROR_EVENT, run)
    # The SDK raises on the SSE error event (status 200, so the generic APIStatusError).
    assert observed.error is not None and observed.error[0] is anthropic.APIStatusError
    assert "overloaded_error" in observed.error[1]
    assert len(observed.events) > 0

    (span,) = tool_spans(etf.captured)
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "failed"
    assert response.attributes["error.type"] == "truncated_stream"
    assert response.status.status_code is StatusCode.ERROR
    assert etf.captured.metric_sum("etf.streams", etf__stream__state="failed") == 1


def test_connection_cut_mid_arguments_reaches_the_app_unchanged(etf: Etf, server: LocalChatServer, client: Any) -> None:
    _, observed = run_both(etf, server, client, CUT_MID_ARGUMENTS)
    # The anthropic SDK lets the transport's error through (openai wraps it in APIConnectionError).
    assert observed.error is not None and observed.error[0] is httpx2.RemoteProtocolError
    assert len(observed.events) == 7

    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "toolu_01"
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    assert "truncated_stream" in span.attributes["etf.tool_call.categories"]
    assert response_span(etf.captured).attributes["etf.stream.state"] == "failed"


def test_consumer_that_breaks_early_then_closes_is_abandoned(etf: Etf, server: LocalChatServer, client: Any) -> None:
    _, observed = run_both(etf, server, client, VALID, lambda c: consume(c, stop_after=6))
    assert observed.error is None and len(observed.events) == 6
    assert response_span(etf.captured).attributes["etf.stream.state"] == "abandoned"
    assert etf.captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed") == 0


def test_async_create(etf: Etf, server: LocalChatServer) -> None:
    baseline, observed = run_both_async(etf, server, VALID, consume_async)
    assert observed.error is None and len(observed.events) == len(VALID)
    assert baseline.types == (anthropic.AsyncStream,)
    assert observed.types == (ObservedAsyncStream,)
    assert_valid_response(etf.captured)


def test_async_create_still_checks_its_arguments_at_the_call(etf: Etf, server: LocalChatServer) -> None:
    """The SDK raises on missing arguments when ``create`` is called, before any ``await``."""

    async def call() -> tuple[type, str]:
        async with async_client(server) as client:
            with pytest.raises(TypeError) as info:
                client.messages.create(stream=True)  # type: ignore[call-overload]
            return type(info.value), str(info.value)

    baseline = asyncio.run(call())
    etf.instrument()
    assert asyncio.run(call()) == baseline
    assert server.requests == []


def test_stream_is_still_an_anthropic_stream_with_its_response(etf: Etf, server: LocalChatServer, client: Any) -> None:
    server.enqueue(named(VALID))
    etf.instrument()
    stream = client.messages.create(model=MODEL, max_tokens=1024, messages=USER, stream=True)
    try:
        assert isinstance(stream, anthropic.Stream)
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"].startswith("text/event-stream")
    finally:
        stream.close()
    assert response_span(etf.captured).attributes["etf.stream.state"] == "abandoned"


def test_raw_response_is_returned_untouched_and_observed_when_parsed(etf: Etf, server: LocalChatServer) -> None:
    """``with_raw_response`` gives the SDK's own response object; the stream its ``parse()`` gives is observed.

    A new client each time: ``messages.with_raw_response`` is cached per client.
    """

    def run() -> tuple[type, list[tuple[str, str]]]:
        with anthropic.Anthropic(base_url=server.root_url, api_key="t", max_retries=0, timeout=5.0) as client:
            raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=1024, messages=USER, stream=True)
            return type(raw), [dump(event) for event in raw.parse()]

    server.enqueue(named(VALID), named(VALID))
    baseline = run()
    etf.instrument()
    assert run() == baseline
    assert [span.attributes["gen_ai.tool.call.id"] for span in tool_spans(etf.captured)] == ["toolu_01", "toolu_02"]
    assert response_span(etf.captured).attributes["etf.response.streamed"] is True


# --- messages.stream(...) ---------------------------------------------------------------------------------------


def test_stream_helper_is_the_sdks_own_and_observed_once(etf: Etf, server: LocalChatServer, client: Any) -> None:
    baseline, observed = run_both(etf, server, client, VALID, consume_helper)
    assert observed.error is None
    assert observed.types == baseline.types == (MessageStreamManager, MessageStream)
    assert {kind for kind, _ in observed.events} >= {"InputJsonEvent", "TextEvent", "ParsedContentBlockStopEvent"}
    assert_valid_response(etf.captured)  # one response span: the helper does not go through create


def test_stream_helper_text_stream_and_final_text(etf: Etf, server: LocalChatServer, client: Any) -> None:
    _, observed = run_both(etf, server, client, VALID, consume_text)
    assert observed.text == "Let me check."
    assert_valid_response(etf.captured)


def test_stream_manager_never_entered_sends_nothing(etf: Etf, server: LocalChatServer, client: Any) -> None:
    etf.instrument()
    manager = client.messages.stream(model=MODEL, max_tokens=1024, messages=USER)
    assert type(manager) is MessageStreamManager
    del manager
    gc.collect()
    assert server.requests == [] and etf.captured.spans() == []


def test_with_the_divergence_check_the_message_is_still_recorded_once(
    etf: Etf, server: LocalChatServer, client: Any
) -> None:
    """``instrument_accumulator`` sees the raw stream is already observed and only compares."""

    def run(c: Any) -> Outcome:
        manager = c.messages.stream(model=MODEL, max_tokens=1024, messages=USER)
        if etf.instrumentor is not None:
            manager = instrument_accumulator(manager, instrumentation=etf.instrumentor.instrumentation)
        with manager as stream:
            events = [dump(event) for event in stream]
            return Outcome(events=events, final=stream.get_final_message().model_dump_json(warnings=False))

    run_both(etf, server, client, VALID, run)
    assert_valid_response(etf.captured)


def test_async_stream_helper(etf: Etf, server: LocalChatServer) -> None:
    baseline, observed = run_both_async(etf, server, VALID, consume_helper_async)
    assert observed.error is None
    assert observed.types == baseline.types == (AsyncMessageStreamManager, AsyncMessageStream)
    assert_valid_response(etf.captured)


def test_async_stream_helper_text_stream(etf: Etf, server: LocalChatServer) -> None:
    _, observed = run_both_async(etf, server, VALID, consume_text_async)
    assert observed.text == "Let me check."
    assert_valid_response(etf.captured)


def test_async_stream_helper_error_event(etf: Etf, server: LocalChatServer) -> None:
    _, observed = run_both_async(etf, server, ERROR_EVENT, consume_helper_async)
    assert observed.error is not None and observed.error[0] is anthropic.APIStatusError
    assert response_span(etf.captured).attributes["etf.stream.state"] == "failed"


# --- the instrumentor's lifecycle ----------------------------------------------------------------------------------


def test_uninstrument_restores_the_client(etf: Etf, server: LocalChatServer, client: Any) -> None:
    originals = [cls.__dict__[name] for cls, name in _METHODS]
    instrumentor = etf.instrument()
    # (identity: a wrapt wrapper compares equal to the function it wraps)
    assert all(cls.__dict__[name] is not original for (cls, name), original in zip(_METHODS, originals, strict=True))
    instrumentor.uninstrument()
    etf.instrumentor = None
    assert all(cls.__dict__[name] is original for (cls, name), original in zip(_METHODS, originals, strict=True))
    assert all(wrappers(cls, name) == [] for cls, name in _METHODS)

    server.enqueue(named(VALID), named(VALID))
    assert consume(client).types == (anthropic.Stream,)
    with client.messages.stream(model=MODEL, max_tokens=1024, messages=USER) as stream:
        assert type(stream._raw_stream) is anthropic.Stream
        stream.until_done()
    assert etf.captured.spans() == []


def test_instrument_twice_is_a_no_op(etf: Etf, server: LocalChatServer, client: Any) -> None:
    first = etf.instrument()
    wrapper = messages_module.Messages.__dict__["create"]
    second = instrument_anthropic(tracer_provider=etf.captured.tracer_provider)
    assert second is first  # BaseInstrumentor is a singleton
    assert messages_module.Messages.__dict__["create"] is wrapper
    server.enqueue(named(VALID))
    consume(client)
    assert len(etf.captured.spans("assemble_response")) == 1


def test_non_streaming_error_status_is_unchanged_and_records_the_refused_span(
    etf: Etf, server: LocalChatServer, client: Any
) -> None:
    error_body = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad request"}}

    def call() -> tuple[type, str, Any]:
        server.enqueue(Script(events=[error_body], status=400))
        with pytest.raises(anthropic.BadRequestError) as info:
            client.messages.create(model=MODEL, max_tokens=1024, messages=USER)
        return type(info.value), str(info.value), info.value.body

    baseline = call()
    etf.instrument()
    assert call() == baseline
    # The refused request gets its response's span, ended with the error (AGENT-STACKS 11.8); no stream was observed.
    (span,) = etf.captured.spans()
    assert dict(span.attributes or {}) == {
        "error.type": "BadRequestError",
        "etf.protocol": "anthropic_messages",
        "gen_ai.provider.name": "anthropic",
    }
    assert "etf.streams" not in etf.captured.metrics()


def test_error_status_on_a_streaming_request_is_unchanged(etf: Etf, server: LocalChatServer, client: Any) -> None:
    error_body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    _, observed = run_both(etf, server, client, Script(events=[error_body], status=429))
    assert observed.error is not None and observed.error[0] is anthropic.RateLimitError
    assert etf.captured.spans() == []  # no stream was ever returned


def test_an_unsupported_anthropic_version_is_left_alone(
    etf: Etf, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``opentelemetry-instrument`` skips ``instrumentation_dependencies``: the instrumentor checks itself."""
    from opentelemetry.instrumentation.dependencies import DependencyConflict

    import etf_otel.integrations._instrumentor_base as base

    conflict = DependencyConflict("anthropic >= 2.10", "anthropic 2.0.0")
    monkeypatch.setattr(base, "get_dependency_conflicts", lambda deps: conflict)
    instrumentor = AnthropicInstrumentor()
    with caplog.at_level("WARNING", logger="etf_otel"):
        instrumentor.instrument(skip_dep_check=True)  # as the launcher calls it
    try:
        assert wrapped_methods() == []
        assert "the anthropic client is not instrumented" in caplog.text
    finally:
        instrumentor.uninstrument()


# --- gen_ai.provider.name ------------------------------------------------------------------------------------------


class _ToMessagesPath(httpx2.HTTPTransport):
    """Real HTTP to the local server, the Vertex model path rewritten to ``/v1/messages`` (its only route)."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path.endswith(":streamRawPredict"), request.url.path
        request.url = request.url.copy_with(path="/v1/messages")
        return super().handle_request(request)


def _vertex(server: LocalChatServer) -> anthropic.AnthropicVertex:
    return anthropic.AnthropicVertex(
        region="us-east5",
        project_id="p",
        access_token="t",
        base_url=server.root_url,
        max_retries=0,
        http_client=httpx2.Client(transport=_ToMessagesPath(), timeout=5.0),
    )


def _bedrock_mantle(server: LocalChatServer) -> anthropic.AnthropicBedrockMantle:
    return anthropic.AnthropicBedrockMantle(base_url=server.root_url, skip_auth=True, aws_region="us-east-1")


@pytest.mark.parametrize(
    ("make_client", "provider"),
    [(_vertex, "gcp.vertex_ai"), (_bedrock_mantle, "aws.bedrock")],
    ids=["vertex", "bedrock-mantle"],
)
def test_cloud_clients_share_the_wrapped_resource_and_name_their_provider(
    etf: Etf, server: LocalChatServer, make_client: Callable[[LocalChatServer], Any], provider: str
) -> None:
    with make_client(server) as cloud:
        assert type(cloud.messages) is messages_module.Messages
        _, observed = run_both(etf, server, cloud, VALID, consume_helper)
    assert observed.error is None
    assert_valid_response(etf.captured, provider)


def test_provider_of_each_client() -> None:
    assert provider_of_client(anthropic.Anthropic(api_key="t")) == "anthropic"
    assert provider_of_client(anthropic.AsyncAnthropic(api_key="t")) == "anthropic"
    assert provider_of_client(
        anthropic.AnthropicBedrock(aws_region="us-east-1", aws_access_key="a", aws_secret_key="b")
    ) == ("aws.bedrock")
    assert provider_of_client(anthropic.AsyncAnthropicVertex(region="us-east5", project_id="p", access_token="t")) == (
        "gcp.vertex_ai"
    )
    assert provider_of_client(object()) == "anthropic"


def test_provider_name_override(etf: Etf, server: LocalChatServer, client: Any) -> None:
    run_both(etf, server, client, VALID, provider_name="my.gateway")
    assert_valid_response(etf.captured, "my.gateway")


# --- linkage across turns (tool_result blocks in the next user message) ---------------------------------------


def assistant_turn(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {"city": "Paris"}} for call_id in ids
        ],
    }


def tool_result(call_id: str, content: str = "sunny", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def converse(server: LocalChatServer, client: Any, turns: list[tuple[list[Any], list[Any]]]) -> None:
    """Send each ``(messages, response events)`` turn through the real client, consuming every stream."""
    for messages, events in turns:
        server.enqueue(named(events))
        sent = copy.deepcopy(messages)
        outcome = consume(client, messages)
        assert outcome.error is None
        assert messages == sent  # the app's messages are not modified
        assert server.requests[-1].body["messages"] == sent  # nor what reaches the server


def violations(span: ReadableSpan) -> list[dict[str, Any]]:
    return [dict(event.attributes) for event in span.events if event.name == "etf.integrity.violation"]


@pytest.mark.parametrize(
    ("follow_up", "expected"),
    [
        pytest.param(
            [user(tool_result("toolu_a"), tool_result("toolu_b"), tool_result("toolu_zzz"))],
            [{"etf.error.category": "orphaned_result", "etf.linkage.orphan_reason": "unknown"}],
            id="orphaned_result",
        ),
        pytest.param(
            [user(tool_result("toolu_a"))],
            [{"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "toolu_b"}],
            id="unanswered_call",
        ),
        pytest.param(
            [user(tool_result("toolu_a"), tool_result("toolu_b"), tool_result("toolu_a", "again"))],
            [{"etf.error.category": "duplicate_result", "gen_ai.tool.call.id": "toolu_a"}],
            id="duplicate_result",
        ),
        pytest.param(
            [user(tool_result("toolu_a")), user(tool_result("toolu_b"))],
            [
                {"etf.error.category": "orphaned_result", "etf.linkage.orphan_reason": "unknown"},
                {"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "toolu_b"},
            ],
            id="result_in_a_later_message",
        ),
        pytest.param(
            [{"role": "user", "content": "never mind, just summarize"}],
            [
                {"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "toolu_a"},
                {"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "toolu_b"},
            ],
            id="results_skipped",
        ),
    ],
)
def test_linkage_problems_are_recorded_on_the_next_response(
    etf: Etf, server: LocalChatServer, client: Any, follow_up: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> None:
    etf.instrument()
    second_request = [*USER, assistant_turn("toolu_a", "toolu_b"), *follow_up]
    converse(server, client, [(USER, proposing("toolu_a", "toolu_b")), (second_request, TEXT_ONLY)])

    first, second = etf.captured.spans("assemble_response")
    assert violations(first) == []
    assert violations(second) == expected
    assert "toolu_zzz" not in all_attribute_values(etf.captured)  # never-proposed ids are not recorded
    for category in {finding["etf.error.category"] for finding in expected}:
        count = sum(finding["etf.error.category"] == category for finding in expected)
        assert etf.captured.metric_sum("etf.integrity.violations", etf__error__category=category) == count
    assert etf.captured.metric_sum("etf.integrity.violations") == len(expected)


def test_clean_conversation_built_from_the_sdks_final_messages(etf: Etf, server: LocalChatServer, client: Any) -> None:
    """The app sends back ``get_final_message().content`` (SDK objects) and answers every call: nothing to report."""
    etf.instrument()
    messages: list[Any] = list(USER)
    for events in (VALID, proposing("toolu_03"), TEXT_ONLY):
        server.enqueue(named(events))
        with client.messages.stream(model=MODEL, max_tokens=1024, messages=messages) as stream:
            final = stream.get_final_message()
        assert server.requests[-1].body["messages"] == json.loads(json.dumps(messages, default=lambda b: b.to_dict()))
        calls = [block for block in final.content if block.type == "tool_use"]
        messages = [
            *messages,
            {"role": "assistant", "content": final.content},
            user(*(tool_result(c.id) for c in calls)),
        ]

    responses = etf.captured.spans("assemble_response")
    assert len(responses) == 3
    assert all(violations(span) == [] for span in responses)
    assert "etf.integrity.violations" not in etf.captured.metrics()
    assert sorted(span.attributes["gen_ai.tool.call.id"] for span in tool_spans(etf.captured)) == [
        "toolu_01",
        "toolu_02",
        "toolu_03",
    ]


def test_unrelated_conversations_are_not_linked(etf: Etf, server: LocalChatServer, client: Any) -> None:
    """A follow-up whose call ids and prefix match no earlier response is not checked (nothing to link it to)."""
    etf.instrument()
    other = [{"role": "user", "content": "something else"}, assistant_turn("toolu_q"), user(tool_result("toolu_x"))]
    converse(server, client, [(USER, proposing("toolu_a")), (other, TEXT_ONLY)])
    assert all(violations(span) == [] for span in etf.captured.spans("assemble_response"))
    assert "etf.integrity.violations" not in etf.captured.metrics()


def test_messages_given_as_an_iterator_are_sent_unread(etf: Etf, server: LocalChatServer, client: Any) -> None:
    follow_up = [*USER, assistant_turn("toolu_a"), user(tool_result("toolu_a"))]
    run_both(etf, server, client, TEXT_ONLY, lambda c: consume(c, iter(follow_up)))
    assert server.requests[-1].body["messages"] == follow_up
    assert response_span(etf.captured).attributes["etf.stream.state"] == "completed"


@pytest.mark.parametrize("way", ["stream_helper", "async_create", "async_stream_helper"])
def test_messages_given_as_a_generator_are_sent_unread(
    etf: Etf, server: LocalChatServer, client: Any, way: str
) -> None:
    """The other ways in, with a generator: every message reaches the server, the stream is still observed."""
    follow_up = [*USER, assistant_turn("toolu_a"), user(tool_result("toolu_a"))]

    def generated() -> Any:
        return (message for message in follow_up)

    if way == "stream_helper":
        run_both(etf, server, client, TEXT_ONLY, lambda c: consume_helper(c, generated()))
    else:
        run = consume_async if way == "async_create" else consume_helper_async
        run_both_async(etf, server, TEXT_ONLY, lambda c: run(c, generated()))
    first, second = server.requests[-2:]
    assert first.body["messages"] == follow_up
    assert second.body["messages"] == follow_up
    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "completed"
    assert violations(response) == []


# --- guard mode ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "refusals", "reasons"),
    [
        pytest.param(MAX_TOKENS_EMPTY, ["incomplete_response"], ["rejected_call"], id="max_tokens"),
        # The SDK's final message has a second block, toolu_02, that the rules never accepted.
        pytest.param(
            REUSED_INDEX,
            ["id_conflict", "orphaned_result"],
            ["rejected_call", "rejected_incoming_id"],
            id="id_conflict",
        ),
    ],
)
def test_guard_refuses_the_calls_of_a_rejected_message(
    etf: Etf, server: LocalChatServer, client: Any, events: list[Any], refusals: list[str], reasons: list[str]
) -> None:
    instrumentor = etf.instrument()
    assert instrumentor.instrumentation is not None
    executed: list[Any] = []
    host = instrumentor.instrumentation.host(executed.append, guard=True)

    server.enqueue(named(events))
    with client.messages.stream(model=MODEL, max_tokens=1024, messages=USER) as stream:
        final = stream.get_final_message()
    calls = [block for block in final.content if block.type == "tool_use"]
    assert calls and calls[0].id == "toolu_01"
    categories = []
    for call in calls:
        with pytest.raises(GuardRefusedError) as info:
            host(call)
        categories.append(info.value.category.value)
    assert categories == refusals
    assert executed == []
    refused = etf.captured.spans("execute_tool")
    assert [span.attributes.get("etf.guard.refused") for span in refused] == [True] * len(calls)

    # What the host must send back (docs/protocols.md): an is_error result for every tool_use of the
    # assistant message, in the first user message after it. The request goes out unchanged; the refusal
    # answered is drift (refusal_answered, never a violation): only the rejection the stream caused is a finding.
    follow_up = [
        *USER,
        {"role": "assistant", "content": final.content},
        user(*(tool_result(call.id, "refused: not a valid tool call", is_error=True) for call in calls)),
    ]
    server.enqueue(named(TEXT_ONLY))
    assert consume(client, follow_up).error is None
    assert server.requests[-1].body["messages"][-1]["content"][0]["is_error"] is True
    second = etf.captured.spans("assemble_response")[-1]
    assert violations(second) == []
    drift = [dict(event.attributes or {}) for event in second.events if event.name == "etf.linkage.drift"]
    assert [entry["etf.divergence.kind"] for entry in drift] == ["refusal_answered"] * len(calls)
    assert all(entry.get("gen_ai.tool.name") == calls[0].name for entry in drift[:1])
    # the preserved id of each rejected call, as its own call span carries it (never an id the rules refused)
    preserved = {span.attributes.get("gen_ai.tool.call.id") for span in etf.captured.spans("assemble_tool_call")}
    assert drift[0].get("gen_ai.tool.call.id") == calls[0].id
    assert {entry.get("gen_ai.tool.call.id") for entry in drift} - {None} <= preserved
    assert etf.captured.metric_sum("etf.linkage.drift", etf__divergence__kind="refusal_answered") == len(calls)
    assert reasons  # what linkage said of each result before drift was told apart


def test_guard_lets_a_proposed_call_run(etf: Etf, server: LocalChatServer, client: Any) -> None:
    """A call whose id, name and arguments are the proposal's runs, linked to its assembly span."""
    instrumentor = etf.instrument()
    assert instrumentor.instrumentation is not None
    host = instrumentor.instrumentation.host(lambda call: f"ran {call['id']}", guard=True)
    server.enqueue(named(proposing("toolu_a")))
    consume(client)
    assert host({"id": "toolu_a", "name": "get_weather", "arguments": '{"city":"Paris"}'}) == "ran toolu_a"
    (executed,) = etf.captured.spans("execute_tool")
    (assembled,) = tool_spans(etf.captured)
    assert [link.context.span_id for link in executed.links] == [assembled.context.span_id]
    with pytest.raises(GuardRefusedError):  # the same call with other arguments is not the proposal
        host({"id": "toolu_a", "name": "get_weather", "arguments": '{"city":"Rome"}'})


def test_guard_lets_the_sdks_tool_use_block_run(etf: Etf, server: LocalChatServer, client: Any) -> None:
    instrumentor = etf.instrument()
    assert instrumentor.instrumentation is not None
    host = instrumentor.instrumentation.host(lambda call: call.id, guard=True)
    server.enqueue(named(VALID))
    with client.messages.stream(model=MODEL, max_tokens=1024, messages=USER) as stream:
        final = stream.get_final_message()
    assert [host(block) for block in final.content if block.type == "tool_use"] == ["toolu_01", "toolu_02"]
