"""The local Chat Completions SSE server, driven by the real ``openai`` client.

These tests also pin what the SDK (openai 3.x over httpx2) does with the inputs the identity rules care
about, so that a change in the SDK shows up here rather than as a puzzling failure elsewhere:

- ``"id": null`` in a fragment arrives as ``None`` and stays distinguishable from an absent ``id``
  (``"id" in fragment.model_fields_set``);
- the SDK does not validate fragments: an integer id stays an ``int``, a missing index reads as ``None``;
- ``[DONE]`` ends iteration; anything after it is never seen;
- a body that ends properly without a terminal event ends iteration silently (no error);
- a connection cut mid-body raises ``openai.APIConnectionError`` (cause ``httpx2.RemoteProtocolError``)
  after every event sent before the cut has been yielded.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest

from etf_otel.testing import DONE, LocalChatServer, Script
from etf_otel.testing.chat import chunk

MESSAGES: list[Any] = [{"role": "user", "content": "read page 1"}]


def fragment(index: Any = 0, **fields: Any) -> dict[str, Any]:
    return {"index": index, **fields}


NULL_CONTINUATION = [
    chunk(tool_calls=[fragment(id="call_a", type="function", function={"name": "read_page", "arguments": '{"page":'})]),
    chunk(tool_calls=[fragment(id=None, function={"arguments": "1}"})]),
    chunk(tool_calls=[fragment(function={"arguments": ""})]),
    chunk(finish_reason="tool_calls"),
    DONE,
]


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as srv:
        yield srv


@pytest.fixture
def client(server: LocalChatServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=5.0) as c:
        yield c


def stream(client: openai.OpenAI, messages: list[Any] = MESSAGES) -> Any:
    return client.chat.completions.create(model="m", messages=messages, stream=True)


def test_null_id_reaches_the_sdk_as_none_and_stays_distinct_from_an_absent_id(
    server: LocalChatServer, client: openai.OpenAI
) -> None:
    server.enqueue(Script(events=NULL_CONTINUATION))

    with stream(client) as events:
        chunks = list(events)

    fragments = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices[0].delta.tool_calls]
    first, null_continuation, omitted = fragments
    assert first.id == "call_a"
    assert first.function.name == "read_page"
    assert null_continuation.id is None
    assert "id" in null_continuation.model_fields_set
    assert omitted.id is None
    assert "id" not in omitted.model_fields_set
    assert [f.function.arguments for f in fragments] == ['{"page":', "1}", ""]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_sdk_passes_invalid_fragments_through_without_validation(
    server: LocalChatServer, client: openai.OpenAI
) -> None:
    server.enqueue(Script(events=[chunk(tool_calls=[{"id": 7, "function": {"arguments": ""}}]), DONE]))

    with stream(client) as events:
        (only,) = list(events)

    tool_call = only.choices[0].delta.tool_calls[0]
    assert tool_call.id == 7  # an int, not coerced to str and not rejected
    assert tool_call.index is None  # the missing index reads as None
    assert "index" not in tool_call.model_fields_set


def test_done_ends_iteration_and_events_after_it_are_never_seen(server: LocalChatServer, client: openai.OpenAI) -> None:
    server.enqueue(Script(events=[chunk(content="a"), DONE, chunk(content="after")]))

    with stream(client) as events:
        contents = [c.choices[0].delta.content for c in events]

    assert contents == ["a"]


def test_body_ending_without_terminal_event_ends_iteration_silently(
    server: LocalChatServer, client: openai.OpenAI
) -> None:
    server.enqueue(Script(events=[chunk(content="a"), chunk(content="b")]))

    with stream(client) as events:
        chunks = list(events)

    assert [c.choices[0].delta.content for c in chunks] == ["a", "b"]
    assert all(c.choices[0].finish_reason is None for c in chunks)


def test_cut_stream_raises_api_connection_error_after_yielding_every_event_sent(
    server: LocalChatServer, client: openai.OpenAI
) -> None:
    server.enqueue(Script(events=NULL_CONTINUATION, cut_after=2))
    received = []

    with pytest.raises(openai.APIConnectionError) as raised, stream(client) as events:
        for c in events:
            received.append(c)

    assert len(received) == 2
    assert received[1].choices[0].delta.tool_calls[0].id is None
    assert isinstance(raised.value.__cause__, httpx2.RemoteProtocolError)
    assert "incomplete chunked read" in str(raised.value.__cause__)


def test_cut_before_any_event_raises_on_first_read(server: LocalChatServer, client: openai.OpenAI) -> None:
    server.enqueue(Script(events=NULL_CONTINUATION, cut_after=0))

    with pytest.raises(openai.APIConnectionError), stream(client) as events:
        next(iter(events))


async def test_async_client_streams_null_continuation_and_sees_the_cut(server: LocalChatServer) -> None:
    server.enqueue(Script(events=NULL_CONTINUATION), Script(events=NULL_CONTINUATION, cut_after=1))

    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=5.0) as client:
        events = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        async with events:
            ids = [c.choices[0].delta.tool_calls[0].id async for c in events if c.choices[0].delta.tool_calls]
        assert ids == ["call_a", None, None]

        received = []
        events = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        with pytest.raises(openai.APIConnectionError):
            async with events:
                async for c in events:
                    received.append(c)
        assert len(received) == 1


def test_requests_are_recorded_with_body_and_headers(server: LocalChatServer, client: openai.OpenAI) -> None:
    server.enqueue(Script(events=NULL_CONTINUATION), Script(events=[chunk(content="done"), DONE]))
    with stream(client) as events:
        list(events)
    follow_up = [
        *MESSAGES,
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "read_page", "arguments": '{"page":1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "page one"},
    ]
    with stream(client, follow_up) as events:
        list(events)

    first, second = server.requests
    assert first.method == "POST"
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer test"
    assert first.body == {"model": "m", "messages": MESSAGES, "stream": True}
    assert second.body["messages"][-1] == {"role": "tool", "tool_call_id": "call_a", "content": "page one"}
    assert server.pending == 0


def test_unscripted_request_gets_500_and_is_still_recorded(server: LocalChatServer, client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError, match="no script queued"):
        stream(client)

    assert len(server.requests) == 1


def test_scripted_status_answers_the_scripts_json_error(server: LocalChatServer, client: openai.OpenAI) -> None:
    server.enqueue(Script(status=429, events=[{"error": {"message": "slow down", "type": "rate_limit"}}]))

    with pytest.raises(openai.RateLimitError, match="slow down"):
        stream(client)


def test_consumer_closing_early_does_not_disturb_the_next_request(
    server: LocalChatServer, client: openai.OpenAI
) -> None:
    many = [chunk(content=str(i)) for i in range(200)]
    server.enqueue(Script(events=[*many, DONE]), Script(events=[chunk(content="next"), DONE]))

    with stream(client) as events:
        assert next(iter(events)).choices[0].delta.content == "0"
    with stream(client) as events:
        assert [c.choices[0].delta.content for c in events] == ["next"]


def test_wire_format_is_chunked_event_stream_with_one_data_frame_per_event(server: LocalChatServer) -> None:
    server.enqueue(Script(events=[chunk(content="a"), "line one\nline two", DONE]))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("POST", "/v1/chat/completions", body=b"{}", headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()

    assert response.status == 200
    assert response.version == 11
    assert response.getheader("Content-Type", "").startswith("text/event-stream")
    assert response.getheader("Transfer-Encoding") == "chunked"
    assert response.getheader("Connection") == "close"
    expected_chunk = json.dumps(chunk(content="a"), separators=(",", ":"))
    assert body == f"data: {expected_chunk}\n\ndata: line one\ndata: line two\n\ndata: [DONE]\n\n".encode()


def test_chunk_builds_a_chat_completion_chunk_and_passes_tool_calls_verbatim() -> None:
    tool_calls = [{"index": 0, "id": None}, {"function": {"arguments": 3}}]

    built = chunk(tool_calls=tool_calls, finish_reason="tool_calls", choice=1, id="chatcmpl-9")

    assert built["id"] == "chatcmpl-9"
    assert built["object"] == "chat.completion.chunk"
    assert built["model"] == "etf-demo"
    assert isinstance(built["created"], int)
    (choice,) = built["choices"]
    assert choice["index"] == 1
    assert choice["finish_reason"] == "tool_calls"
    assert choice["delta"]["tool_calls"] is tool_calls
    assert chunk()["choices"][0]["delta"] == {}
    assert chunk(content="hi")["choices"][0]["delta"] == {"content": "hi"}


def test_script_is_immutable_and_validated() -> None:
    events = [chunk(content="a")]
    script = Script(events=events)
    events.append(DONE)

    assert script.events == (chunk(content="a"),)
    with pytest.raises(ValueError):
        Script(cut_after=-1)
    with pytest.raises(ValueError):
        Script(status=42)


def test_close_is_prompt_idempotent_and_frees_the_port() -> None:
    server = LocalChatServer()
    port = server.port
    assert server.base_url == f"http://127.0.0.1:{port}/v1"

    started = time.monotonic()
    server.close()
    server.close()

    assert time.monotonic() - started < 1.0
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


RESPONSES_EVENTS: list[Any] = [
    {
        "type": "response.created",
        "sequence_number": 0,
        "response": {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "m",
            "output": [],
            "status": "in_progress",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        },
    },
    {
        "type": "response.output_item.added",
        "sequence_number": 1,
        "output_index": 0,
        "item": {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "read_page",
            "arguments": "",
            "status": "in_progress",
        },
    },
    {
        "type": "response.function_call_arguments.delta",
        "sequence_number": 2,
        "output_index": 0,
        "item_id": "fc_1",
        "delta": '{"page":1}',
    },
]


def test_responses_events_are_named_and_reach_the_responses_api_client(
    server: LocalChatServer, client: openai.OpenAI
) -> None:
    """``named=True`` frames each event as the Responses API does (``event:`` then ``data:``)."""
    server.enqueue(Script(events=RESPONSES_EVENTS, named=True))
    events = list(client.responses.create(model="m", input="read page 1", stream=True))
    assert [event.type for event in events] == [event["type"] for event in RESPONSES_EVENTS]
    assert events[1].item.call_id == "call_1"  # type: ignore[union-attr]
    assert server.requests[0].path == "/v1/responses"


def test_named_frames_carry_the_event_type_line(server: LocalChatServer) -> None:
    server.enqueue(Script(events=[{"type": "message_start", "message": {}}, "[DONE]"], named=True))
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    connection.request("POST", "/v1/messages", body=b"{}", headers={"Content-Type": "application/json"})
    body = connection.getresponse().read().decode()
    assert body == 'event: message_start\ndata: {"type":"message_start","message":{}}\n\ndata: [DONE]\n\n'
    assert server.root_url == f"http://127.0.0.1:{server.port}"


def _post(server: LocalChatServer, path: str) -> tuple[int, str, str]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request("POST", path, body=b"{}", headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read().decode()
    finally:
        connection.close()


def test_gemini_paths_are_routed_by_their_method_suffix_whatever_the_model_and_version(
    server: LocalChatServer,
) -> None:
    """Streamed ``:streamGenerateContent`` (Developer API and Vertex paths) as plain ``data: `` lines,
    non-streamed ``:generateContent`` as the script's first event, in one JSON body."""
    first = {"candidates": [{"content": {"parts": [{"text": "a"}]}}]}
    server.enqueue(Script(events=[first]), Script(events=[first]), Script(events=[first, {"x": 1}]))
    streamed = _post(server, "/v1beta/models/gemini-test:streamGenerateContent?alt=sse")
    vertex = _post(server, "/v1beta/projects/p/locations/l/publishers/google/models/g:streamGenerateContent?alt=sse")
    whole = _post(server, "/v1beta/models/gemini-test:generateContent")
    frame = f"data: {json.dumps(first, separators=(',', ':'))}\n\n"
    assert streamed == vertex == (200, "text/event-stream; charset=utf-8", frame)
    assert whole[:2] == (200, "application/json") and json.loads(whole[2]) == first
    assert [request.path for request in server.requests][0] == "/v1beta/models/gemini-test:streamGenerateContent"
    assert _post(server, "/v1beta/models/gemini-test:countTokens")[0] == 404
    assert server.pending == 0
