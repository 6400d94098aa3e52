"""Every call shape of the ``openai`` and ``anthropic`` SDKs is observed (docs/integrations.md, "Call shapes").

Each shape runs twice against the scripted server with the real SDK, uninstrumented then
instrumented: the application must get the very same thing (types, parsed objects, events,
headers), and etf-otel must record one response with both tool calls under their ids.
"""

# ruff: noqa: E501 - the table of shapes reads best one shape per line
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletion

from etf_otel.integrations.anthropic import instrument_anthropic
from etf_otel.integrations.openai import instrument_openai
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing import anthropic as A
from etf_otel.testing import chat as C
from etf_otel.testing import responses as R
from tests.conftest import Captured
from tests.integrations.support import dump, response_span, tool_spans

MODEL = "m"
USER: list[dict[str, Any]] = [{"role": "user", "content": "weather and time in Paris?"}]
CALLS = (("call_a", "get_weather", '{"city":"Paris"}'), ("call_b", "get_time", '{"tz":"CET"}'))
IDS = [call_id for call_id, _, _ in CALLS]

# --- what the server answers ----------------------------------------------------------------------------------

CHAT_STREAM = C.finished(
    *(
        C.chunk(C.fragment(i, call_id, name, arguments, type="function"))
        for i, (call_id, name, arguments) in enumerate(CALLS)
    )
)
CHAT_BODY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": MODEL,
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                    for call_id, name, arguments in CALLS
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
}
RESPONSES_STREAM = R.stream(
    *(R.call(i, call_id, name, [arguments], item_id=f"fc_{i}") for i, (call_id, name, arguments) in enumerate(CALLS))
)
RESPONSES_BODY = {
    "id": "resp_1",
    "object": "response",
    "created_at": 0,
    "model": MODEL,
    "status": "completed",
    "output": [
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": "completed",
        }
        for i, (call_id, name, arguments) in enumerate(CALLS)
    ],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}
ANTHROPIC_STREAM = A.stream(
    *(A.tool_call(i, call_id, name, arguments) for i, (call_id, name, arguments) in enumerate(CALLS))
)
ANTHROPIC_BODY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [
        {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_b", "name": "get_time", "input": {"tz": "CET"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}
ANSWERS = {
    "chat": (Script(events=CHAT_STREAM), Script(body=CHAT_BODY)),
    "responses": (Script(events=RESPONSES_STREAM, named=True), Script(body=RESPONSES_BODY)),
    "anthropic": (Script(events=ANTHROPIC_STREAM, named=True), Script(body=ANTHROPIC_BODY)),
}


class _ToPath(httpx2.HTTPTransport):
    """Real HTTP to the local server, a cloud client's own path rewritten to the route the server has."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(path=self._path)
        return super().handle_request(request)


class _AsyncToPath(httpx2.AsyncHTTPTransport):
    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(path=self._path)
        return await super().handle_async_request(request)


# --- the clients ------------------------------------------------------------------------------------------------


def clients(server: LocalChatServer, kind: str, asynchronous: bool) -> Any:
    common: dict[str, Any] = {"max_retries": 0, "timeout": 5.0}
    if kind == "openai":
        return (openai.AsyncOpenAI if asynchronous else openai.OpenAI)(base_url=server.base_url, api_key="t", **common)
    if kind == "azure":
        transport = _AsyncToPath("/v1/chat/completions") if asynchronous else _ToPath("/v1/chat/completions")
        http = (httpx2.AsyncClient if asynchronous else httpx2.Client)(transport=transport, timeout=5.0)
        azure = openai.AsyncAzureOpenAI if asynchronous else openai.AzureOpenAI
        return azure(
            azure_endpoint=server.root_url, api_version="2024-10-21", api_key="t", http_client=http, max_retries=0
        )
    if kind == "anthropic":
        return (anthropic.AsyncAnthropic if asynchronous else anthropic.Anthropic)(
            base_url=server.root_url, api_key="t", **common
        )
    if kind == "vertex":
        transport = _AsyncToPath("/v1/messages") if asynchronous else _ToPath("/v1/messages")
        http = (httpx2.AsyncClient if asynchronous else httpx2.Client)(transport=transport, timeout=5.0)
        vertex = anthropic.AsyncAnthropicVertex if asynchronous else anthropic.AnthropicVertex
        return vertex(
            region="us-east5",
            project_id="p",
            access_token="t",
            base_url=server.root_url,
            http_client=http,
            max_retries=0,
        )
    assert kind == "bedrock-mantle"
    mantle = anthropic.AsyncAnthropicBedrockMantle if asynchronous else anthropic.AnthropicBedrockMantle
    return mantle(base_url=server.root_url, skip_auth=True, aws_region="us-east-1", max_retries=0)


# --- the shapes ---------------------------------------------------------------------------------------------------

Got = list[tuple[str, str]]


def events(stream: Any) -> Got:
    return [(stream.__class__.__name__, ""), *(dump(event) for event in stream)]


async def aevents(stream: Any) -> Got:
    return [(stream.__class__.__name__, ""), *[dump(event) async for event in stream]]


@dataclass(frozen=True)
class Shape:
    protocol: str
    """Which answer the server gives: ``chat``, ``responses``, ``anthropic``."""
    name: str
    streamed: bool
    run: Callable[[Any], Got]
    arun: Callable[[Any], Awaitable[Got]]
    client: str = "openai"


def _chat(client: Any, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": USER, **extra}


def _resp(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": "weather and time in Paris?", **extra}


def _msg(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 1024, "messages": USER, **extra}


def _with_streaming(resource: Any, streamed: bool, **kwargs: Any) -> Got:
    with resource.with_streaming_response.create(**kwargs) as response:
        got: Got = [("content-type", response.headers["content-type"])]
        parsed = response.parse()
        return got + (events(parsed) if streamed else [dump(parsed)])


async def _awith_streaming(resource: Any, streamed: bool, **kwargs: Any) -> Got:
    async with resource.with_streaming_response.create(**kwargs) as response:
        got: Got = [("content-type", response.headers["content-type"])]
        parsed = await response.parse()
        return got + (await aevents(parsed) if streamed else [dump(parsed)])


def _raw(resource: Any, streamed: bool, **kwargs: Any) -> Got:
    raw = resource.with_raw_response.create(**kwargs)
    got: Got = [(type(raw).__name__, raw.headers["content-type"])]
    parsed = raw.parse()
    return got + (events(parsed) if streamed else [dump(parsed)])


async def _araw(resource: Any, streamed: bool, **kwargs: Any) -> Got:
    raw = await resource.with_raw_response.create(**kwargs)
    got: Got = [(type(raw).__name__, raw.headers["content-type"])]
    parsed = raw.parse()
    if asyncio.iscoroutine(parsed):
        parsed = await parsed
    return got + (await aevents(parsed) if streamed else [dump(parsed)])


def _chat_helper(client: Any) -> Got:
    with client.chat.completions.stream(**_chat(client)) as stream:
        got = [dump(event) for event in stream]
        return [*got, dump(stream.get_final_completion())]


async def _achat_helper(client: Any) -> Got:
    async with client.chat.completions.stream(**_chat(client)) as stream:
        got = [dump(event) async for event in stream]
        return [*got, dump(await stream.get_final_completion())]


def _responses_helper(client: Any) -> Got:
    with client.responses.stream(**_resp()) as stream:
        got = [dump(event) for event in stream]
        return [*got, dump(stream.get_final_response())]


async def _aresponses_helper(client: Any) -> Got:
    async with client.responses.stream(**_resp()) as stream:
        got = [dump(event) async for event in stream]
        return [*got, dump(await stream.get_final_response())]


def _messages_helper(messages: Any) -> Got:
    with messages.stream(**_msg()) as stream:
        got = [dump(event) for event in stream]
        return [*got, dump(stream.get_final_message())]


async def _amessages_helper(messages: Any) -> Got:
    async with messages.stream(**_msg()) as stream:
        got = [dump(event) async for event in stream]
        return [*got, dump(await stream.get_final_message())]


async def _await_dump(awaitable: Awaitable[Any]) -> Got:
    return [dump(await awaitable)]


async def _await_events(awaitable: Awaitable[Any]) -> Got:
    return await aevents(await awaitable)


def shapes() -> list[Shape]:
    chat = lambda c: c.chat.completions  # noqa: E731
    return [
        # Chat Completions
        Shape("chat", "create-stream", True, lambda c: events(chat(c).create(**_chat(c), stream=True)),
              lambda c: _await_events(chat(c).create(**_chat(c), stream=True))),
        Shape("chat", "create", False, lambda c: [dump(chat(c).create(**_chat(c)))],
              lambda c: _await_dump(chat(c).create(**_chat(c)))),
        Shape("chat", "streaming-response-stream", True, lambda c: _with_streaming(chat(c), True, **_chat(c), stream=True),
              lambda c: _awith_streaming(chat(c), True, **_chat(c), stream=True)),
        Shape("chat", "streaming-response", False, lambda c: _with_streaming(chat(c), False, **_chat(c)),
              lambda c: _awith_streaming(chat(c), False, **_chat(c))),
        Shape("chat", "raw-response-stream", True, lambda c: _raw(chat(c), True, **_chat(c), stream=True),
              lambda c: _araw(chat(c), True, **_chat(c), stream=True)),
        Shape("chat", "raw-response", False, lambda c: _raw(chat(c), False, **_chat(c)),
              lambda c: _araw(chat(c), False, **_chat(c))),
        Shape("chat", "stream-helper", True, _chat_helper, _achat_helper),
        Shape("chat", "parse-helper", False, lambda c: [dump(chat(c).parse(**_chat(c)))],
              lambda c: _await_dump(chat(c).parse(**_chat(c)))),
        Shape("chat", "post", False, lambda c: [dump(c.post("/chat/completions", body=_chat(c), cast_to=ChatCompletion))],
              lambda c: _await_dump(c.post("/chat/completions", body=_chat(c), cast_to=ChatCompletion))),
        Shape("chat", "azure-create-stream", True, lambda c: events(chat(c).create(**_chat(c), stream=True)),
              lambda c: _await_events(chat(c).create(**_chat(c), stream=True)), client="azure"),
        Shape("chat", "azure-create", False, lambda c: [dump(chat(c).create(**_chat(c)))],
              lambda c: _await_dump(chat(c).create(**_chat(c))), client="azure"),
        # Responses
        Shape("responses", "create-stream", True, lambda c: events(c.responses.create(**_resp(), stream=True)),
              lambda c: _await_events(c.responses.create(**_resp(), stream=True))),
        Shape("responses", "create", False, lambda c: [dump(c.responses.create(**_resp()))],
              lambda c: _await_dump(c.responses.create(**_resp()))),
        Shape("responses", "streaming-response-stream", True, lambda c: _with_streaming(c.responses, True, **_resp(), stream=True),
              lambda c: _awith_streaming(c.responses, True, **_resp(), stream=True)),
        Shape("responses", "streaming-response", False, lambda c: _with_streaming(c.responses, False, **_resp()),
              lambda c: _awith_streaming(c.responses, False, **_resp())),
        Shape("responses", "raw-response-stream", True, lambda c: _raw(c.responses, True, **_resp(), stream=True),
              lambda c: _araw(c.responses, True, **_resp(), stream=True)),
        Shape("responses", "raw-response", False, lambda c: _raw(c.responses, False, **_resp()),
              lambda c: _araw(c.responses, False, **_resp())),
        Shape("responses", "stream-helper", True, _responses_helper, _aresponses_helper),
        Shape("responses", "parse-helper", False, lambda c: [dump(c.responses.parse(**_resp()))],
              lambda c: _await_dump(c.responses.parse(**_resp()))),
        # Anthropic Messages
        Shape("anthropic", "create-stream", True, lambda c: events(c.messages.create(**_msg(), stream=True)),
              lambda c: _await_events(c.messages.create(**_msg(), stream=True)), client="anthropic"),
        Shape("anthropic", "create", False, lambda c: [dump(c.messages.create(**_msg()))],
              lambda c: _await_dump(c.messages.create(**_msg())), client="anthropic"),
        Shape("anthropic", "streaming-response-stream", True, lambda c: _with_streaming(c.messages, True, **_msg(), stream=True),
              lambda c: _awith_streaming(c.messages, True, **_msg(), stream=True), client="anthropic"),
        Shape("anthropic", "streaming-response", False, lambda c: _with_streaming(c.messages, False, **_msg()),
              lambda c: _awith_streaming(c.messages, False, **_msg()), client="anthropic"),
        Shape("anthropic", "raw-response-stream", True, lambda c: _raw(c.messages, True, **_msg(), stream=True),
              lambda c: _araw(c.messages, True, **_msg(), stream=True), client="anthropic"),
        Shape("anthropic", "raw-response", False, lambda c: _raw(c.messages, False, **_msg()),
              lambda c: _araw(c.messages, False, **_msg()), client="anthropic"),
        Shape("anthropic", "stream-helper", True, lambda c: _messages_helper(c.messages),
              lambda c: _amessages_helper(c.messages), client="anthropic"),
        Shape("anthropic", "beta-create-stream", True, lambda c: events(c.beta.messages.create(**_msg(), stream=True)),
              lambda c: _await_events(c.beta.messages.create(**_msg(), stream=True)), client="anthropic"),
        Shape("anthropic", "beta-create", False, lambda c: [dump(c.beta.messages.create(**_msg()))],
              lambda c: _await_dump(c.beta.messages.create(**_msg())), client="anthropic"),
        Shape("anthropic", "beta-stream-helper", True, lambda c: _messages_helper(c.beta.messages),
              lambda c: _amessages_helper(c.beta.messages), client="anthropic"),
        Shape("anthropic", "vertex-create", False, lambda c: [dump(c.messages.create(**_msg()))],
              lambda c: _await_dump(c.messages.create(**_msg())), client="vertex"),
        Shape("anthropic", "vertex-create-stream", True, lambda c: events(c.messages.create(**_msg(), stream=True)),
              lambda c: _await_events(c.messages.create(**_msg(), stream=True)), client="vertex"),
        Shape("anthropic", "bedrock-mantle-create", False, lambda c: [dump(c.messages.create(**_msg()))],
              lambda c: _await_dump(c.messages.create(**_msg())), client="bedrock-mantle"),
    ]  # fmt: skip


SHAPES = {f"{shape.protocol}-{shape.name}": shape for shape in shapes()}
PROVIDERS = {"openai": "openai", "azure": "azure.ai.openai", "anthropic": "anthropic", "vertex": "gcp.vertex_ai"}
PROVIDERS["bedrock-mantle"] = "aws.bedrock"


def run(server: LocalChatServer, shape: Shape, asynchronous: bool) -> Got:
    server.enqueue(ANSWERS[shape.protocol][0 if shape.streamed else 1])
    client = clients(server, shape.client, asynchronous)
    if not asynchronous:
        with client:
            return shape.run(client)

    async def main() -> Got:
        async with client:
            return await shape.arun(client)

    return asyncio.run(main())


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_every_call_shape_is_observed_and_the_application_gets_the_same(
    captured: Captured, server: LocalChatServer, shape_name: str, mode: str
) -> None:
    shape = SHAPES[shape_name]
    asynchronous = mode == "async"
    baseline = run(server, shape, asynchronous)
    instrumentors = [
        instrument_openai(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider),
        instrument_anthropic(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider),
    ]
    try:
        observed = run(server, shape, asynchronous)
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
    assert observed == baseline
    response = response_span(captured)
    assert response.attributes["etf.response.streamed"] is shape.streamed
    assert response.attributes["etf.stream.state"] == "completed"
    assert response.attributes["gen_ai.provider.name"] == PROVIDERS[shape.client]
    calls = tool_spans(captured)
    assert [span.attributes["gen_ai.tool.call.id"] for span in calls] == IDS
    assert [span.attributes["gen_ai.tool.name"] for span in calls] == [name for _, name, _ in CALLS]
    assert {span.attributes["etf.tool_call.verdict"] for span in calls} == {"proposed"}
    assert captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed") == 2
    if not shape.streamed:
        assert response.attributes["etf.stream.fragments"] == 0
        assert {span.attributes["etf.tool_call.fragments"] for span in calls} == {0}


# --- complete bodies that fail validation --------------------------------------------------------------------


def _chat_body(finish: str, *calls: tuple[str | None, str, str]) -> dict[str, Any]:
    body: dict[str, Any] = {**CHAT_BODY, "choices": [dict(CHAT_BODY["choices"][0], finish_reason=finish)]}
    message = dict(body["choices"][0]["message"])
    message["tool_calls"] = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        for call_id, name, arguments in calls
    ]
    body["choices"][0]["message"] = message
    return body


def _responses_body(status: str, *calls: tuple[str, str, str]) -> dict[str, Any]:
    output = [
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": "completed",
        }
        for i, (call_id, name, arguments) in enumerate(calls)
    ]
    details = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {**RESPONSES_BODY, "status": status, "output": output, "incomplete_details": details}


def _message_body(stop: str, *calls: tuple[str, str, Any]) -> dict[str, Any]:
    content = [
        {"type": "tool_use", "id": call_id, "name": name, "input": arguments} for call_id, name, arguments in calls
    ]
    return {**ANTHROPIC_BODY, "stop_reason": stop, "content": content}


FAILING_BODIES = {
    "chat-arguments-not-json": ("chat", _chat_body("tool_calls", ("call_a", "f", "{not json")), [["invalid_arguments"]]),
    "chat-duplicate-ids": ("chat", _chat_body("tool_calls", ("call_a", "f", "{}"), ("call_a", "g", "{}")), [["duplicate_call_id"]] * 2),
    "chat-missing-id": ("chat", _chat_body("tool_calls", (None, "f", "{}")), [["missing_id"]]),
    "chat-length-cut": ("chat", _chat_body("length", ("call_a", "f", '{"city": "Par')), [["invalid_arguments"]]),
    "responses-arguments-not-json": ("responses", _responses_body("completed", ("call_a", "f", "[1, 2]")), [["invalid_arguments"]]),
    "responses-duplicate-ids": ("responses", _responses_body("completed", ("call_a", "f", "{}"), ("call_a", "g", "{}")), [["duplicate_call_id"]] * 2),
    "responses-incomplete": ("responses", _responses_body("incomplete", ("call_a", "f", "{}")), [["incomplete_response"]]),
    "anthropic-duplicate-ids": ("anthropic", _message_body("tool_use", ("call_a", "f", {}), ("call_a", "g", {})), [["duplicate_call_id"]] * 2),
    "anthropic-max-tokens": ("anthropic", _message_body("max_tokens", ("call_a", "f", {"x": 1})), [["incomplete_response"]]),
}  # fmt: skip


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("case", list(FAILING_BODIES))
def test_a_complete_body_that_fails_validation_is_recorded_rejected(
    captured: Captured, server: LocalChatServer, case: str, mode: str
) -> None:
    protocol, body, categories = FAILING_BODIES[case]
    shape = SHAPES[f"{protocol}-create"]
    instrumentors = [
        instrument_openai(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider),
        instrument_anthropic(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider),
    ]
    try:
        server.enqueue(Script(body=body))
        client = clients(server, shape.client, mode == "async")
        if mode == "sync":
            with client:
                got = shape.run(client)
        else:

            async def main() -> Got:
                async with client:
                    return await shape.arun(client)

            got = asyncio.run(main())
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
    assert len(got) == 1  # the parsed body, as the SDK returns it
    response = response_span(captured)
    assert response.attributes["etf.response.streamed"] is False
    assert response.attributes["etf.stream.dispatchable"] is False
    calls = tool_spans(captured)
    assert [list(span.attributes["etf.tool_call.categories"]) for span in calls] == categories
    assert {span.attributes["etf.tool_call.verdict"] for span in calls} == {"rejected"}
    assert captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="rejected") == len(categories)


# --- complete bodies take part in linkage -----------------------------------------------------------------------


def _chat_follow_up() -> dict[str, Any]:
    assistant = CHAT_BODY["choices"][0]["message"]
    return _chat(None, messages=[*USER, assistant, {"role": "tool", "tool_call_id": "call_a", "content": "sunny"}])


def _responses_follow_up() -> dict[str, Any]:
    return _resp(
        input=[
            {"role": "user", "content": "weather and time in Paris?"},
            *RESPONSES_BODY["output"],
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        ]
    )


def _messages_follow_up() -> dict[str, Any]:
    assistant = {"role": "assistant", "content": ANTHROPIC_BODY["content"]}
    result = {"type": "tool_result", "tool_use_id": "call_a", "content": "sunny"}
    return _msg(messages=[*USER, assistant, {"role": "user", "content": [result]}])


LINKED = {
    "chat": ("openai", lambda c: c.chat.completions.create(**_chat(c)), lambda c: c.chat.completions.create(**_chat_follow_up())),
    "responses": ("openai", lambda c: c.responses.create(**_resp()), lambda c: c.responses.create(**_responses_follow_up())),
    "anthropic": ("anthropic", lambda c: c.messages.create(**_msg()), lambda c: c.messages.create(**_messages_follow_up())),
}  # fmt: skip


@pytest.mark.parametrize("protocol", list(LINKED))
def test_a_follow_up_of_a_complete_body_is_settled_against_its_calls(
    captured: Captured, server: LocalChatServer, protocol: str
) -> None:
    """Both requests without ``stream``; the follow-up answers only ``call_a``: one ``unanswered_call``, for ``call_b``."""
    kind, first, follow_up = LINKED[protocol]
    instrumentors = [
        instrument_openai(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider),
        instrument_anthropic(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider),
    ]
    try:
        body = ANSWERS[protocol][1]
        server.enqueue(body, body)
        with clients(server, kind, False) as client:
            first(client)
            follow_up(client)
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
    first_span, second_span = captured.spans("assemble_response")
    events = [dict(event.attributes or {}) for event in second_span.events if event.name == "etf.integrity.violation"]
    assert [(event["etf.error.category"], event.get("gen_ai.tool.call.id")) for event in events] == [
        ("unanswered_call", "call_b")
    ]
    assert list(second_span.attributes["etf.linkage.answered_ids"]) == ["call_a"]
    assert second_span.attributes["etf.response.streamed"] is False
