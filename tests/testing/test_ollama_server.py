"""The scripted server's Ollama endpoint (``POST /api/chat``), read by the real ``ollama`` client.

A streamed answer must reach the client as the scripted lines, one ``ChatResponse`` each; ``"stream":
false`` gets the one body; an in-band error line makes the client raise as Ollama's would; the command's
tool turn is a whole tool-calling loop for the client.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from etf_otel.protocols import OLLAMA
from etf_otel.testing import OLLAMA_QUIRK_STREAMS, LocalChatServer, Script
from etf_otel.testing._scripted import ANSWER, quirk_responder, tool_turn_responder
from etf_otel.testing.ollama import body, call, chunk, error, stream

ollama = pytest.importorskip("ollama")

QUESTION = {"role": "user", "content": "Weather in Paris?"}


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as running:
        yield running


def dumped(parts: Any) -> list[dict[str, Any]]:
    return [part.model_dump(exclude_none=True) for part in parts]


def test_a_stream_reaches_the_client_line_by_line(server: LocalChatServer) -> None:
    events = stream(chunk(call("get_a", {"a": 1}, id="call_1", index=0)), chunk(content="done"))
    server.enqueue(Script(events=events))
    parts = list(ollama.Client(host=server.root_url).chat(model="m", messages=[QUESTION], stream=True))
    assert len(parts) == len(events)
    assert parts[0].message.tool_calls[0].function.name == "get_a" and parts[-1].done_reason == "stop"
    (request,) = server.requests
    assert (request.path, request.body["stream"]) == (OLLAMA.request_path, True)


@pytest.mark.parametrize(
    "script", [Script(body=body(call("get_a", {"a": 1}))), Script(events=[body(call("get_a", {}))])]
)
def test_stream_false_gets_one_body(server: LocalChatServer, script: Script) -> None:
    server.enqueue(script)
    response = ollama.Client(host=server.root_url).chat(model="m", messages=[QUESTION])
    assert response.done and response.message.tool_calls[0].function.name == "get_a"


def test_an_error_line_makes_the_client_raise(server: LocalChatServer) -> None:
    server.enqueue(Script(events=[chunk(call("get_a", {"a": 1})), error("model crashed")]))
    client = ollama.Client(host=server.root_url)
    with pytest.raises(ollama.ResponseError, match="model crashed"):
        list(client.chat(model="m", messages=[QUESTION], stream=True))


@pytest.mark.parametrize("streamed", [True, False])
def test_the_tool_turn_is_a_whole_loop(streamed: bool) -> None:
    with LocalChatServer(responder=tool_turn_responder) as server:
        client = ollama.Client(host=server.root_url)
        first = client.chat(model="m", messages=[QUESTION], stream=streamed)
        parts = list(first) if streamed else [first]
        calls = [tool for part in parts for tool in part.message.tool_calls or ()]
        assert [tool.function.name for tool in calls] == ["get_weather", "get_time"]
        messages = [QUESTION, {"role": "assistant", "content": "", "tool_calls": calls}]
        messages += [{"role": "tool", "content": "ok", "tool_name": tool.function.name} for tool in calls]
        answer = client.chat(model="m", messages=messages, stream=streamed)
        text = "".join(part.message.content for part in answer) if streamed else answer.message.content
        assert text == ANSWER
        assert [request.body["stream"] for request in server.requests] == [streamed, streamed]


def test_a_quirk_stream_is_served_and_the_follow_up_answered() -> None:
    with LocalChatServer(responder=quirk_responder("several calls on index 0, no ids")) as server:
        client = ollama.Client(host=server.root_url)
        parts = list(client.chat(model="m", messages=[QUESTION], stream=True))
        assert dumped(parts)[0]["message"]["tool_calls"] == [
            {"function": {"name": "get_a", "arguments": {"a": 1}}},
            {"function": {"name": "get_b", "arguments": {"b": 2}}},
        ]
        assert len(parts) == len(OLLAMA_QUIRK_STREAMS["several calls on index 0, no ids"])
        messages = [QUESTION, {"role": "tool", "content": "ok", "tool_name": "get_a"}]
        assert client.chat(model="m", messages=messages).message.content == ANSWER
