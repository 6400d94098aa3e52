"""The ``openai`` instrumentor on the Responses API, driven by the real client over real HTTP.

Every test talks to :class:`~etf_otel.testing.LocalChatServer` (``/v1/responses``, named
SSE events like the API's) with the real SDK, sync and async: nothing below the client is
mocked. Most scenarios run the same script without and then with the instrumentor and require
the application to see exactly the same events (types and serialized content), the same
return types and the same exception; then they check the spans, events and metrics.

The instrumentor patches ``openai`` classes globally: the ``etf`` fixture always
uninstruments in its finalizer.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from etf_otel.core._identity import IdentityRules
from etf_otel.core._results import ToolCall
from etf_otel.errors import GuardRefusedError
from etf_otel.instrumentation import ObservedAsyncStream, ObservedStream
from etf_otel.integrations.openai._instrumentor import OpenAIInstrumentor, instrument_openai
from etf_otel.integrations.openai._responses import output_run_starts, result_call_ids
from etf_otel.protocols import RESPONSES
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing import responses as R
from tests.conftest import Captured
from tests.integrations.redirect import LocalRedirect
from tests.integrations.support import (
    Harness,
    all_attribute_values,
    hook_points,
    hooked,
    response_span,
    tool_spans,
    wrappers,
)

USER: list[dict[str, Any]] = [{"role": "user", "content": "read page 1 and save a report"}]
MODES = ("sync", "async")

# --- scripts (the SSE events the server sends) ----------------------------------------------------------


def function_call(call_id: str, item_id: str, arguments: str = '{"page":1}', name: str = "read_page") -> dict[str, Any]:
    return R.function_call(call_id=call_id, name=name, arguments=arguments, id=item_id, status="completed")


MESSAGE_DONE = {**R.message_item(), "status": "completed"}


def message(index: int = 0) -> list[dict[str, Any]]:
    """An (empty) assistant message item, opened and closed: not a slot, it shares the output_index numbering."""
    return [R.added(index, item=R.message_item()), R.item_done(index, item=MESSAGE_DONE)]


def proposing(*calls: tuple[str, str], response_id: str = "resp_1") -> list[dict[str, Any]]:
    """A clean response: a message item, then one call per ``(call_id, item id)``, each on its own output_index."""
    events: list[Any] = [message()]
    for index, (call_id, item_id) in enumerate(calls, start=1):
        events.append(R.call(index, call_id, "read_page", ('{"page":', "1}"), item_id=item_id))
    output = [MESSAGE_DONE, *(function_call(call_id, item_id) for call_id, item_id in calls)]
    return R.stream(*events, end=R.completed(output=output, id=response_id), id=response_id)


VALID = proposing(("call_a", "fc_a"), ("call_b", "fc_b"))

# call_id changed on output_item.done: id_conflict (the first call_id stays the identity).
REJECTED = R.stream(
    R.added(0, call_id="call_a", name="read_page", arguments="", id="fc_a"),
    R.delta(0, '{"page":1}', "fc_a"),
    R.arguments_done(0, '{"page":1}', "fc_a"),
    R.item_done(0, call_id="call_b", name="read_page", arguments='{"page":1}', id="fc_a"),
)

INCOMPLETE = R.stream(R.call(0, "call_a", "read_page", ('{"page":', "1}"), item_id="fc_a"), end=R.incomplete())

FAILED = R.stream(R.call(0, "call_a", "read_page", ('{"page":', "1}"), item_id="fc_a"), end=R.failed())

CUT = Script(events=VALID, named=True, cut_after=6)  # before the first call's arguments.done


def script(events: Script | list[Any]) -> Script:
    return events if isinstance(events, Script) else Script(events=events, named=True)


# --- running the real client ------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What the application saw: every event (type and JSON), and the exception that ended it, if any."""

    events: list[tuple[str, str]] = field(default_factory=list)
    objects: list[Any] = field(default_factory=list)
    error: tuple[type[BaseException], str] | None = None
    stream_type: type | None = None
    final: str | None = None


def _dump(item: Any) -> tuple[str, str]:
    return type(item).__qualname__, item.model_dump_json(warnings=False)


def _client_options(server: LocalChatServer, **options: Any) -> dict[str, Any]:
    return {"base_url": server.base_url, "api_key": "t", "max_retries": 0, "timeout": 5.0, **options}


def consume(server: LocalChatServer, mode: str = "sync", **request: Any) -> Outcome:
    """One streamed ``responses.create`` consumed like an application does, with a fresh client."""
    request = {"model": "m", "input": USER, **request}
    outcome = Outcome()

    def record(item: Any) -> None:
        outcome.events.append(_dump(item))
        outcome.objects.append(item)

    if mode == "sync":
        with openai.OpenAI(**_client_options(server)) as client:
            try:
                stream = client.responses.create(stream=True, **request)
                outcome.stream_type = type(stream)
                for item in stream:
                    record(item)
            except Exception as error:  # compared with the uninstrumented run
                outcome.error = (type(error), str(error))
        return outcome

    async def run() -> None:
        async with openai.AsyncOpenAI(**_client_options(server)) as client:
            try:
                stream = await client.responses.create(stream=True, **request)
                outcome.stream_type = type(stream)
                async for item in stream:
                    record(item)
            except Exception as error:
                outcome.error = (type(error), str(error))

    asyncio.run(run())
    return outcome


def consume_helper(server: LocalChatServer, mode: str = "sync", **request: Any) -> Outcome:
    """``with client.responses.stream(...) as stream``: the helper's events and final response."""
    if "response_id" not in request:
        request = {"model": "m", "input": USER, **request}
    http_client = request.pop("http_client", None)
    outcome = Outcome()
    if mode == "sync":
        with openai.OpenAI(**_client_options(server, http_client=http_client)) as client:
            with client.responses.stream(**request) as stream:
                outcome.stream_type = type(stream)
                outcome.events = [_dump(event) for event in stream]
                outcome.final = stream.get_final_response().model_dump_json(warnings=False)
        return outcome

    async def run() -> None:
        async with openai.AsyncOpenAI(**_client_options(server, http_client=http_client)) as client:
            async with client.responses.stream(**request) as stream:
                outcome.stream_type = type(stream)
                outcome.events = [_dump(event) async for event in stream]
                outcome.final = (await stream.get_final_response()).model_dump_json(warnings=False)

    asyncio.run(run())
    return outcome


def is_wrapped() -> bool:
    return bool(hooked("openai"))


class Etf(Harness[OpenAIInstrumentor]):
    """Instruments on demand with the captured providers; always uninstrumented afterwards."""

    def instrument(self, **config: Any) -> OpenAIInstrumentor:
        assert not is_wrapped(), "a previous test left openai instrumented"
        self.instrumentor = instrument_openai(**self.providers(), **config)
        return self.instrumentor


@pytest.fixture
def etf(captured: Captured) -> Iterator[Etf]:
    with Etf(captured) as harness:
        yield harness


def run_both(
    etf: Etf, server: LocalChatServer, events: Script | list[Any], mode: str = "sync", **config: Any
) -> Outcome:
    """Run ``events`` uninstrumented, then instrumented; the application must see the same thing."""
    server.enqueue(script(events), script(events))
    baseline = consume(server, mode)
    assert baseline.stream_type is (openai.Stream if mode == "sync" else openai.AsyncStream)
    etf.instrument(**config)
    observed = consume(server, mode)
    assert observed.events == baseline.events
    assert observed.error == baseline.error
    assert observed.stream_type is (ObservedStream if mode == "sync" else ObservedAsyncStream)
    first, second = server.requests[-2:]
    assert second.path == first.path == "/v1/responses"
    assert second.body == first.body  # the request on the wire is the same too
    return observed


def violations(span: ReadableSpan) -> list[dict[str, Any]]:
    return [dict(event.attributes) for event in span.events if event.name == "etf.integrity.violation"]


# --- one response ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_valid_call_is_dispatchable_under_its_call_id(etf: Etf, server: LocalChatServer, mode: str) -> None:
    outcome = run_both(etf, server, VALID, mode)
    assert outcome.error is None
    assert outcome.events[0][0] == "ResponseCreatedEvent" and outcome.events[-1][0] == "ResponseCompletedEvent"

    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "completed"
    assert response.attributes["etf.stream.dispatchable"] is True
    assert response.attributes["etf.stream.slots"] == 2
    assert response.attributes["etf.protocol"] == "responses"
    assert response.status.status_code is StatusCode.UNSET
    assert response.attributes["gen_ai.provider.name"] == "openai"  # localhost: the fallback, the client's provider

    spans = {span.attributes["gen_ai.tool.call.id"]: span for span in tool_spans(etf.captured)}
    assert set(spans) == {"call_a", "call_b"}
    for call_id, index in (("call_a", 1), ("call_b", 2)):
        attributes = spans[call_id].attributes
        assert attributes["etf.tool_call.verdict"] == "proposed"
        assert attributes["etf.tool_call.index"] == index  # the output_index
        assert attributes["etf.choice.index"] == 0
        assert attributes["gen_ai.tool.name"] == "read_page"
        assert spans[call_id].parent is not None and spans[call_id].parent.span_id == response.context.span_id
    # The item ids route events; they are never the identity and never recorded.
    values = all_attribute_values(etf.captured)
    assert "fc_a" not in values and "fc_b" not in values
    assert etf.captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed") == 2
    assert etf.captured.metric_sum("etf.streams", etf__stream__state="completed") == 1


@pytest.mark.parametrize("mode", MODES)
def test_call_id_changed_on_item_done_is_rejected(etf: Etf, server: LocalChatServer, mode: str) -> None:
    outcome = run_both(etf, server, REJECTED, mode)
    assert outcome.error is None

    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "call_a"
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    assert span.attributes["error.type"] == "id_conflict"
    assert span.status.status_code is StatusCode.ERROR
    assert "call_b" not in all_attribute_values(etf.captured)
    assert response_span(etf.captured).attributes["etf.stream.dispatchable"] is False
    assert etf.captured.metric_sum("etf.tool_call.identity_errors", etf__error__category="id_conflict") == 1


@pytest.mark.parametrize("mode", MODES)
def test_incomplete_response_is_not_dispatchable(etf: Etf, server: LocalChatServer, mode: str) -> None:
    run_both(etf, server, INCOMPLETE, mode)

    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "completed"  # it ended properly, and said it was cut
    assert response.attributes["etf.stream.dispatchable"] is False
    assert response.attributes["error.type"] == "incomplete_response"
    assert tuple(response.attributes["gen_ai.response.finish_reasons"]) == ("max_output_tokens",)
    (span,) = tool_spans(etf.captured)
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    assert "incomplete_response" in span.attributes["etf.tool_call.categories"]


@pytest.mark.parametrize("mode", MODES)
def test_failed_response_is_failed(etf: Etf, server: LocalChatServer, mode: str) -> None:
    outcome = run_both(etf, server, FAILED, mode)
    assert outcome.error is None and outcome.events[-1][0] == "ResponseFailedEvent"

    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "failed"
    assert response.attributes["etf.stream.dispatchable"] is False
    assert response.attributes["error.type"] == "truncated_stream"
    assert response.status.status_code is StatusCode.ERROR
    assert etf.captured.metric_sum("etf.streams", etf__stream__state="failed") == 1


@pytest.mark.parametrize("mode", MODES)
def test_connection_cut_reaches_the_app_unchanged(etf: Etf, server: LocalChatServer, mode: str) -> None:
    outcome = run_both(etf, server, CUT, mode)
    assert outcome.error is not None and outcome.error[0] is openai.APIConnectionError
    assert len(outcome.events) == 6

    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "failed"
    assert response.attributes["error.type"] == "truncated_stream"
    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "call_a"
    assert span.attributes["etf.tool_call.verdict"] == "rejected"
    assert "truncated_stream" in span.attributes["etf.tool_call.categories"]


def test_stream_is_still_an_openai_stream_with_its_response(etf: Etf, server: LocalChatServer) -> None:
    server.enqueue(script(VALID))
    etf.instrument()
    with openai.OpenAI(**_client_options(server)) as client:
        stream = client.responses.create(model="m", input="hi", stream=True)
        try:
            assert isinstance(stream, openai.Stream) and isinstance(stream, ObservedStream)
            assert stream.response.status_code == 200
            assert stream.__wrapped__.response is stream.response
        finally:
            stream.close()
    assert response_span(etf.captured).attributes["etf.stream.state"] == "abandoned"


# --- the stream helper --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_stream_helper_is_observed_once_and_unchanged(etf: Etf, server: LocalChatServer, mode: str) -> None:
    server.enqueue(script(VALID), script(VALID))
    baseline = consume_helper(server, mode)
    etf.instrument()
    observed = consume_helper(server, mode)

    helper = openai.lib.streaming.responses
    assert baseline.stream_type is (helper.ResponseStream if mode == "sync" else helper.AsyncResponseStream)
    assert observed.stream_type is baseline.stream_type
    assert observed.events == baseline.events
    assert observed.final == baseline.final
    # The helper posts through the wrapped create: one response, recorded once.
    response = response_span(etf.captured)
    assert response.attributes["etf.stream.dispatchable"] is True
    assert {span.attributes["gen_ai.tool.call.id"] for span in tool_spans(etf.captured)} == {"call_a", "call_b"}
    assert etf.captured.metric_sum("etf.streams") == 1


class _ReplayOnPost(httpx2.HTTPTransport):
    """A real HTTP transport that sends ``GET /v1/responses/{id}`` to the local server's ``POST /v1/responses``.

    The server only serves ``POST``; the SDK's request (method aside) and everything after it are real.
    """

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET" and request.url.path.startswith("/v1/responses/"):
            request = httpx2.Request("POST", request.url.copy_with(path="/v1/responses", query=None), content=b"{}")
        return super().handle_request(request)


class _AsyncReplayOnPost(httpx2.AsyncHTTPTransport):
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET" and request.url.path.startswith("/v1/responses/"):
            request = httpx2.Request("POST", request.url.copy_with(path="/v1/responses", query=None), content=b"{}")
        return await super().handle_async_request(request)


@pytest.mark.parametrize("mode", MODES)
def test_stream_helper_by_response_id_is_observed_through_retrieve(
    etf: Etf, server: LocalChatServer, mode: str
) -> None:
    """``responses.stream(response_id=...)`` replays the stored response with ``retrieve(stream=True)``."""
    events = proposing(("call_a", "fc_a"), response_id="resp_9")

    def run() -> Outcome:
        if mode == "sync":
            http_client: Any = openai.DefaultHttpxClient(transport=_ReplayOnPost())
        else:
            http_client = openai.DefaultAsyncHttpxClient(transport=_AsyncReplayOnPost())
        return consume_helper(server, mode, response_id="resp_9", starting_after=2, http_client=http_client)

    server.enqueue(script(events), script(events))
    baseline = run()
    etf.instrument()
    observed = run()
    assert observed.events == baseline.events and observed.final == baseline.final
    assert len(observed.events) == len(events) - 3  # the helper drops events up to sequence number 2 itself
    response = response_span(etf.captured)
    assert response.attributes["etf.stream.state"] == "completed"
    assert response.attributes["etf.stream.dispatchable"] is True
    (span,) = tool_spans(etf.captured)
    assert span.attributes["gen_ai.tool.call.id"] == "call_a"


def test_retrieve_starting_mid_response_is_left_alone(etf: Etf, server: LocalChatServer) -> None:
    """Events before ``starting_after`` never arrive: the rules could only call such a stream broken."""
    etf.instrument()
    server.enqueue(script(VALID[3:]))
    http_client = openai.DefaultHttpxClient(transport=_ReplayOnPost())
    with openai.OpenAI(**_client_options(server, http_client=http_client)) as client:
        stream = client.responses.retrieve("resp_1", stream=True, starting_after=2)
        assert type(stream) is openai.Stream
        assert len(list(stream)) == len(VALID) - 3
    assert etf.captured.spans() == []


# --- linkage across turns -------------------------------------------------------------------------------------


def function_call_output(call_id: str, output: str = "page text") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def output_items(outcome: Outcome) -> list[Any]:
    """The SDK's output items from ``response.completed``: what an app appends to the next input."""
    (completed,) = [event for event in outcome.objects if event.type == "response.completed"]
    return list(completed.response.output)


def converse(server: LocalChatServer, turns: list[tuple[dict[str, Any], list[Any]]], mode: str = "sync") -> None:
    """Send each ``(request, response events)`` turn; a callable ``input`` gets the previous outcome."""
    previous: Outcome | None = None
    for request, events in turns:
        server.enqueue(script(events))
        request = dict(request)
        if callable(request.get("input")):
            request["input"] = request["input"](previous)
        sent = copy.deepcopy(request["input"])
        previous = consume(server, mode, **request)
        assert previous.error is None
        assert request["input"] == sent  # the app's input is not modified


def follow_up(*results: dict[str, Any]) -> Callable[[Outcome], list[Any]]:
    """The next input as apps build it: the previous input, the previous output items, the results."""
    return lambda previous: [*USER, *output_items(previous), *results]


def last_response(captured: Captured) -> ReadableSpan:
    return captured.spans("assemble_response")[-1]


TEXT_ONLY = R.stream(message(), end=R.completed(output=[MESSAGE_DONE], id="resp_2"), id="resp_2")
TWO_CALLS = proposing(("call_a", "fc_a"), ("call_b", "fc_b"))


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        pytest.param(
            [function_call_output("fc_a"), function_call_output("call_b")],
            [
                {"etf.error.category": "orphaned_result", "etf.linkage.orphan_reason": "unknown"},
                {"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "call_a"},
            ],
            id="item_id_instead_of_call_id",
        ),
        pytest.param(
            [function_call_output("call_a")],
            [{"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "call_b"}],
            id="missing_output",
        ),
        pytest.param(
            [function_call_output("call_a"), function_call_output("call_b"), function_call_output("call_a", "again")],
            [{"etf.error.category": "duplicate_result", "gen_ai.tool.call.id": "call_a"}],
            id="duplicate_output",
        ),
        pytest.param(
            [function_call_output("call_a"), function_call_output("call_b")],
            [],
            id="clean",
        ),
    ],
)
@pytest.mark.parametrize("mode", MODES)
def test_linkage_by_input_prefix(
    etf: Etf, server: LocalChatServer, mode: str, results: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> None:
    etf.instrument()
    converse(server, [({"input": USER}, TWO_CALLS), ({"input": follow_up(*results)}, TEXT_ONLY)], mode)

    first, second = etf.captured.spans("assemble_response")
    assert violations(first) == []
    assert violations(second) == expected
    assert "fc_a" not in all_attribute_values(etf.captured)  # a never-proposed id is not recorded
    assert etf.captured.metric_sum("etf.integrity.violations") == len(expected)


@pytest.mark.parametrize("mode", MODES)
def test_linkage_by_previous_response_id(etf: Etf, server: LocalChatServer, mode: str) -> None:
    etf.instrument()
    converse(
        server,
        [
            ({"input": USER}, TWO_CALLS),
            ({"input": [function_call_output("fc_b")], "previous_response_id": "resp_1"}, TEXT_ONLY),
        ],
        mode,
    )
    first, second = etf.captured.spans("assemble_response")
    assert violations(first) == []
    assert violations(second) == [
        {"etf.error.category": "orphaned_result", "etf.linkage.orphan_reason": "unknown"},
        {"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "call_a"},
        {"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "call_b"},
    ]


def test_multi_turn_chain_by_previous_response_id_reports_nothing(etf: Etf, server: LocalChatServer) -> None:
    etf.instrument()
    turn3 = R.stream(R.call(0, "call_c", "save_report", ('{"title":"r"}',), item_id="fc_c"), id="resp_3")
    converse(
        server,
        [
            ({"input": "read page 1"}, TWO_CALLS),
            (
                {
                    "input": [function_call_output("call_a"), function_call_output("call_b")],
                    "previous_response_id": "resp_1",
                },
                R.stream(R.call(0, "call_c", "save_report", ('{"title":"r"}',), item_id="fc_c"), id="resp_2"),
            ),
            ({"input": [function_call_output("call_c")], "previous_response_id": "resp_2"}, turn3),
        ],
    )
    spans = etf.captured.spans("assemble_response")
    assert len(spans) == 3 and all(violations(span) == [] for span in spans)
    assert "etf.integrity.violations" not in etf.captured.metrics()


def test_multi_turn_by_prefix_settles_the_latest_response(etf: Etf, server: LocalChatServer) -> None:
    """Three turns by prefix: the third input holds two runs of output items; the latest one is the prefix end."""
    etf.instrument()
    turn2_input: list[Any] = []

    def turn2(previous: Outcome) -> list[Any]:
        turn2_input[:] = [
            *USER,
            *output_items(previous),
            function_call_output("call_a"),
            function_call_output("call_b"),
        ]
        return list(turn2_input)

    def turn3(previous: Outcome) -> list[Any]:  # call_d is never answered
        return [*turn2_input, *output_items(previous), function_call_output("call_c")]

    converse(
        server,
        [
            ({"input": USER}, TWO_CALLS),
            ({"input": turn2}, proposing(("call_c", "fc_c"), ("call_d", "fc_d"), response_id="resp_2")),
            ({"input": turn3}, TEXT_ONLY),
        ],
    )
    first, second, third = etf.captured.spans("assemble_response")
    assert violations(first) == violations(second) == []
    assert violations(third) == [{"etf.error.category": "unanswered_call", "gen_ai.tool.call.id": "call_d"}]


def test_conversations_are_bounded(etf: Etf, server: LocalChatServer) -> None:
    """``max_conversations`` bounds the indexes: a response pushed out can no longer be settled."""
    etf.instrument(max_conversations=1)
    unanswered = {"input": [function_call_output("call_zzz")], "previous_response_id": "resp_1"}
    converse(
        server,
        [
            ({"input": USER}, TWO_CALLS),
            ({"input": "another conversation"}, proposing(("call_x", "fc_x"), response_id="resp_2")),
            (unanswered, TEXT_ONLY),
        ],
    )
    assert all(violations(span) == [] for span in etf.captured.spans("assemble_response"))


def test_previous_response_that_is_not_the_latest_is_not_checked(etf: Etf, server: LocalChatServer) -> None:
    """A retry or branch from an older response is not compared with proposals that are not its own."""
    etf.instrument()
    branch = {"input": [function_call_output("call_a")], "previous_response_id": "resp_1"}
    converse(
        server,
        [
            ({"input": USER}, TWO_CALLS),
            (
                {
                    "input": [function_call_output("call_a"), function_call_output("call_b")],
                    "previous_response_id": "resp_1",
                },
                TEXT_ONLY,
            ),
            (branch, R.stream(message(), id="resp_3")),
            ({"input": [function_call_output("call_a")], "previous_response_id": "resp_unknown"}, TEXT_ONLY),
        ],
    )
    assert all(violations(span) == [] for span in etf.captured.spans("assemble_response"))
    assert "etf.integrity.violations" not in etf.captured.metrics()


def test_unrelated_input_is_not_linked(etf: Etf, server: LocalChatServer) -> None:
    etf.instrument()
    other = [{"role": "user", "content": "something else"}, function_call("call_q", "fc_q"), function_call_output("x")]
    converse(server, [({"input": USER}, TWO_CALLS), ({"input": other}, TEXT_ONLY)])
    assert all(violations(span) == [] for span in etf.captured.spans("assemble_response"))


@pytest.mark.parametrize("mode", MODES)
def test_input_given_as_a_generator_is_left_to_the_sdk(etf: Etf, server: LocalChatServer, mode: str) -> None:
    """Only a string, a list or a tuple ``input`` is read: a generator would be consumed before the SDK sends it.

    The SDK itself refuses a generator (it cannot serialize it): the application meets the same
    error with the instrumentor, and the generator is still unread.
    """
    baseline_input = (item for item in USER)
    baseline = consume(server, mode, input=baseline_input)
    etf.instrument()
    observed_input = (item for item in USER)
    observed = consume(server, mode, input=observed_input)
    assert baseline.error is not None and baseline.error[0] is TypeError
    assert observed.error == baseline.error
    assert list(observed_input) == USER
    assert server.requests == []


def test_rejected_response_proposed_nothing(etf: Etf, server: LocalChatServer) -> None:
    """Results for a response that was not dispatchable answer no proposal: it proposed nothing."""
    etf.instrument()
    again = [*USER, function_call("call_a", "fc_a"), function_call_output("call_a")]
    converse(server, [({"input": USER}, REJECTED), ({"input": again}, TEXT_ONLY)])
    assert violations(last_response(etf.captured)) == [
        {"etf.error.category": "orphaned_result", "etf.linkage.orphan_reason": "rejected_call"}
    ]


@pytest.mark.parametrize(
    ("items", "starts", "results"),
    [
        ([], [], []),
        (USER, [], []),
        ([*USER, function_call("call_a", "fc_a"), function_call_output("call_a")], [1], ["call_a"]),
        (
            [
                *USER,
                {"type": "reasoning", "id": "rs_1", "summary": []},
                function_call("a", "fc_a"),
                function_call_output("a"),
            ],
            [1],
            ["a"],
        ),
        (
            [
                *USER,
                function_call("a", "fc_a"),
                function_call_output("a"),
                function_call("b", "fc_b"),
                function_call_output("b"),
            ],
            [1, 3],
            ["a", "b"],
        ),
        ([*USER, {"role": "assistant", "content": "hi"}, *USER], [1], []),
        ([function_call("a", "fc_a"), {"type": "function_call_output", "call_id": 7, "output": ""}], [], [None]),
    ],
)
def test_input_item_reading(items: list[Any], starts: list[int], results: list[str | None]) -> None:
    assert output_run_starts(items) == starts
    assert result_call_ids(items) == results
    # The same results as the protocol's own reading of a next request.
    if all(isinstance(item, dict) for item in items):
        assert RESPONSES.result_ids(items) == [7 if call_id is None else call_id for call_id in results]


# --- guard mode -------------------------------------------------------------------------------------------------


def adapter_calls(outcome: Outcome) -> tuple[ToolCall, ...]:
    """The calls the Responses adapter assembles from the events the app saw: what the host receives."""
    assembler = RESPONSES.assembler(rules=IdentityRules.for_rules(()))
    for event in outcome.objects:
        assembler.feed(event)
    return assembler.finish().calls


@pytest.mark.parametrize("mode", MODES)
def test_guard_executes_a_valid_call_and_refuses_a_rejected_one(etf: Etf, server: LocalChatServer, mode: str) -> None:
    instrumentation = etf.instrument().instrumentation
    assert instrumentation is not None
    executed: list[str] = []

    def execute(call: ToolCall) -> str:
        executed.append(call.id or "")
        return "ok"

    host = instrumentation.host(execute, guard=True)
    server.enqueue(script(VALID), script(REJECTED))
    valid = adapter_calls(consume(server, mode))
    assert [host(call) for call in valid] == ["ok", "ok"]
    assert executed == ["call_a", "call_b"]

    (call,) = adapter_calls(consume(server, mode))  # the same call_a again, its call_id changed on item done
    assert call.id == "call_a"
    with pytest.raises(GuardRefusedError) as refused:
        host(call)
    assert refused.value.category.value == "id_conflict"
    assert executed == ["call_a", "call_b"]
    executions = etf.captured.spans("execute_tool")
    assert [span.attributes.get("etf.guard.refused", False) for span in executions] == [False, False, True]


def test_guard_executes_the_sdks_own_function_call_item(etf: Etf, server: LocalChatServer) -> None:
    """The SDK's ``ResponseFunctionToolCall`` has the ``fc_`` item id in ``id``: the guard reads ``call_id``."""
    instrumentation = etf.instrument().instrumentation
    assert instrumentation is not None
    host = instrumentation.host(lambda call: call.call_id, guard=True)
    server.enqueue(script(VALID))
    items = [item for item in output_items(consume(server)) if item.type == "function_call"]
    assert [(item.id, item.call_id) for item in items] == [("fc_a", "call_a"), ("fc_b", "call_b")]
    assert [host(item) for item in items] == ["call_a", "call_b"]


# --- lifecycle --------------------------------------------------------------------------------------------------


def test_uninstrument_restores_the_client(etf: Etf, server: LocalChatServer) -> None:
    points = hook_points("openai")
    originals = [cls.__dict__[name] for cls, name in points]
    instrumentor = etf.instrument()
    assert is_wrapped()
    instrumentor.uninstrument()
    etf.instrumentor = None
    assert [cls.__dict__[name] for cls, name in points] == originals
    assert not any(wrappers(cls, name) for cls, name in points)

    server.enqueue(script(VALID))
    assert consume(server).stream_type is openai.Stream
    assert etf.captured.spans() == []


def test_raw_response_is_observed_when_parsed_and_an_error_status_records_nothing(
    etf: Etf, server: LocalChatServer
) -> None:
    error_body = {"error": {"message": "rate limited", "type": "rate_limit", "param": None, "code": "429"}}
    etf.instrument()
    server.enqueue(Script(events=[error_body], status=429), script(VALID))
    with openai.OpenAI(**_client_options(server)) as client:
        with pytest.raises(openai.RateLimitError):
            client.responses.create(model="m", input="hi", stream=True)
        assert etf.captured.spans() == []
        raw = client.responses.with_raw_response.create(model="m", input="hi", stream=True)
        assert type(raw).__name__ == "LegacyAPIResponse"
        assert len(list(raw.parse())) == len(VALID)
    assert response_span(etf.captured).attributes["etf.stream.state"] == "completed"
    assert len(tool_spans(etf.captured)) == 2


def test_provider_is_detected_from_the_clients_base_url(etf: Etf, server: LocalChatServer) -> None:
    http_client = openai.DefaultHttpxClient(transport=LocalRedirect(server.port))
    etf.instrument()
    server.enqueue(script(VALID))
    options = _client_options(server, base_url="https://api.openai.com/v1", http_client=http_client)
    with openai.OpenAI(**options) as client:
        assert len(list(client.responses.create(model="m", input="hi", stream=True))) == len(VALID)
    assert server.requests[-1].path == "/v1/responses"
    assert response_span(etf.captured).attributes["gen_ai.provider.name"] == "openai"
    assert {span.attributes["gen_ai.provider.name"] for span in tool_spans(etf.captured)} == {"openai"}


def test_provider_name_override(etf: Etf, server: LocalChatServer) -> None:
    run_both(etf, server, VALID, provider_name="azure.ai.openai")
    assert response_span(etf.captured).attributes["gen_ai.provider.name"] == "azure.ai.openai"
    assert etf.captured.metric_sum("etf.streams", gen_ai__provider__name="azure.ai.openai") == 1
