"""The scripted server's Converse endpoint, read by the real ``boto3`` client (BEDROCK.md 9.4, 9.5).

``converse_stream`` must yield exactly the scripted events (botocore drops Bedrock's padding member
``p`` and ``null`` members), ``converse`` the scripted body; every way a stream breaks must reach the
application the way BEDROCK.md says botocore raises it. The adapter then judges what the SDK handed over.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from etf_otel import ErrorCategory, IdentityRules, StreamState
from etf_otel.protocols import BEDROCK_CONVERSE
from etf_otel.protocols._bedrock_converse import assemble
from etf_otel.protocols._bodies import judge_body
from etf_otel.testing import BEDROCK_QUIRK_STREAMS, LocalChatServer, Script
from etf_otel.testing.bedrock import (
    MODEL,
    body,
    error_frame,
    exception,
    frames,
    input_delta,
    message_start,
    stream,
    tool_call,
    tool_start,
    tool_use,
)

boto3 = pytest.importorskip("boto3")
botocore_config = pytest.importorskip("botocore.config")
botocore_exceptions = pytest.importorskip("botocore.exceptions")
botocore_eventstream = pytest.importorskip("botocore.eventstream")
urllib3_exceptions = pytest.importorskip("urllib3.exceptions")

MESSAGES = [{"role": "user", "content": [{"text": "Weather in Paris?"}]}]


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as running:
        yield running


@pytest.fixture
def client(server: LocalChatServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=server.root_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore_config.Config(retries={"total_max_attempts": 1}),  # max_attempts counts retries
    )
    yield client
    client.close()


def streamed(client: Any, received: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every event ``converse_stream`` yields, into ``received``; the stream is closed however it ends."""
    received = [] if received is None else received
    events = client.converse_stream(modelId=MODEL, messages=MESSAGES)["stream"]
    try:
        received.extend(events)
    finally:
        events.close()
    return received


def test_converse_stream_yields_the_scripted_events(server: LocalChatServer, client: Any) -> None:
    events = stream(tool_call(1, "tooluse_a", "get_weather", "", '{"city":', '"Paris"}'))
    server.enqueue(Script(events=events))
    received = streamed(client)
    assert received == events  # the padding member p is dropped by botocore
    assert assemble(received).dispatchable
    (request,) = server.requests
    assert request.path == "/model/us.anthropic.claude-test-v1%3A0/converse-stream"
    assert request.body["messages"] == MESSAGES
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 ")
    assert "AWS_BEARER_TOKEN_BEDROCK" not in os.environ


def test_converse_returns_the_scripted_body(server: LocalChatServer, client: Any) -> None:
    document = body(tool_use("tooluse_a", "get_weather", {"city": "Paris"}))
    server.enqueue(Script(body=document))
    answer = client.converse(modelId=MODEL, messages=MESSAGES)
    assert server.requests[0].path.endswith("/converse")
    assert answer["output"] == document["output"] and answer["stopReason"] == "tool_use"
    judged = judge_body(BEDROCK_CONVERSE, answer, IdentityRules.for_rules())  # ResponseMetadata and all
    assert judged is not None and judged.dispatchable
    assert [call.id for call in judged.calls] == ["tooluse_a"]


def test_null_members_reach_the_application_absent(server: LocalChatServer, client: Any) -> None:
    server.enqueue(Script(events=stream(tool_call(1, None, "get_weather", '{"city":"Paris"}'))))
    received = streamed(client)
    assert received[3] == {"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolUse": {"name": "get_weather"}}}}
    assert assemble(received).calls[0].categories[0] is ErrorCategory.MISSING_ID  # not initial_null: null was dropped


def test_a_stream_without_message_stop_ends_quietly_and_is_truncated(server: LocalChatServer, client: Any) -> None:
    events = stream(tool_call(1, "tooluse_a", "get_weather", '{"city":'), stop_reason=None)[:-2]
    server.enqueue(Script(events=events))
    received = streamed(client)  # no exception: exhaustion is not success
    assert received == events
    assert assemble(received).state is StreamState.TRUNCATED


def test_an_exception_frame_raises_event_stream_error(server: LocalChatServer, client: Any) -> None:
    call = [message_start(), tool_start(1, "tooluse_a", "get_weather"), input_delta(1, '{"city":')]
    server.enqueue(Script(events=[*call, exception("modelStreamErrorException", "invalid sequence")]))
    received: list[dict[str, Any]] = []
    with pytest.raises(botocore_exceptions.EventStreamError) as raised:
        streamed(client, received)
    assert raised.value.response["Error"]["Code"] == "modelStreamErrorException"
    assert isinstance(raised.value, botocore_exceptions.ClientError)


def test_an_error_frame_raises_with_its_code(server: LocalChatServer, client: Any) -> None:
    server.enqueue(Script(events=[message_start(), error_frame("InternalFailure", "boom")]))
    with pytest.raises(botocore_exceptions.EventStreamError) as raised:
        streamed(client)
    assert raised.value.response["Error"]["Code"] == "InternalFailure"


def test_a_corrupt_message_raises_checksum_mismatch(server: LocalChatServer, client: Any) -> None:
    good = frames([input_delta(1, "{}")])
    server.enqueue(Script(events=[message_start(), good[:-1] + bytes([good[-1] ^ 1])]))
    with pytest.raises(botocore_eventstream.ChecksumMismatch):
        streamed(client)


def test_a_connection_dropped_mid_call_raises_protocol_error(server: LocalChatServer, client: Any) -> None:
    events = stream(tool_call(1, "tooluse_a", "get_weather", '{"city":', '"Paris"}'))
    server.enqueue(Script(events=events, cut_after=4))
    received: list[dict[str, Any]] = []
    with pytest.raises(urllib3_exceptions.ProtocolError):
        streamed(client, received)
    assert received == events[:4]
    assert assemble(received).state is StreamState.TRUNCATED


def test_an_http_error_raises_from_the_call(server: LocalChatServer, client: Any) -> None:
    server.enqueue(Script(status=429, events=[{"__type": "ThrottlingException", "message": "slow down"}]))
    with pytest.raises(botocore_exceptions.ClientError) as raised:
        client.converse_stream(modelId=MODEL, messages=MESSAGES)
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"
    assert len(server.requests) == 1  # no retry


@pytest.mark.parametrize("name", sorted(BEDROCK_QUIRK_STREAMS))
def test_every_quirk_stream_reaches_the_application_as_scripted(
    name: str, server: LocalChatServer, client: Any
) -> None:
    events = BEDROCK_QUIRK_STREAMS[name]
    failure = next((e for e in events if isinstance(e, dict) and next(iter(e)).endswith("Exception")), None)
    server.enqueue(Script(events=events))
    received: list[dict[str, Any]] = []
    if failure is not None:
        with pytest.raises(botocore_exceptions.EventStreamError):
            streamed(client, received)
        assert received == events[: events.index(failure)]
        return
    received = streamed(client)
    expected = [_without_nulls(event) for event in events]
    assert received == expected
    assert assemble(received).dispatchable == assemble(events).dispatchable


def _without_nulls(value: Any) -> Any:
    """What botocore hands over: members whose value is ``null`` dropped."""
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    return value


@pytest.mark.parametrize("streamed_turn", [True, False], ids=["converse_stream", "converse"])
def test_the_tool_turn_responder_answers_a_boto3_loop(streamed_turn: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m etf_otel.testing``'s answers: two ``tooluse_`` calls, then the text once results come back."""
    from etf_otel.testing._scripted import ANSWER, tool_turn_responder

    with LocalChatServer(responder=tool_turn_responder) as running:
        for name in ("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        made = boto3.client(
            "bedrock-runtime",
            endpoint_url=running.root_url,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        try:
            if streamed_turn:
                first = assemble(streamed(made))
            else:
                first = judge_body(
                    BEDROCK_CONVERSE, made.converse(modelId=MODEL, messages=MESSAGES), IdentityRules.for_rules()
                )
            assert first is not None and first.dispatchable
            assert [call.name for call in first.calls] == ["get_weather", "get_time"]
            assistant = {
                "role": "assistant",
                "content": [tool_use(c.id, c.name, json.loads(c.arguments)) for c in first.calls],
            }
            results = [{"toolResult": {"toolUseId": c.id, "content": [{"text": "ok"}]}} for c in first.calls]
            follow_up = [*MESSAGES, assistant, {"role": "user", "content": results}]
            if streamed_turn:
                events = list(made.converse_stream(modelId=MODEL, messages=follow_up)["stream"])
                text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)
            else:
                answer = made.converse(modelId=MODEL, messages=follow_up)
                text = answer["output"]["message"]["content"][0]["text"]
            assert text == ANSWER
        finally:
            made.close()


def test_what_botocore_drops_and_what_it_passes_through_unchanged(server: LocalChatServer, client: Any) -> None:
    """BEDROCK.md's "what the parser drops": unknown event types vanish, an unknown delta member becomes
    ``SDK_UNKNOWN_MEMBER``, scalars are not coerced (a string index, an object input, a numeric id)."""
    odd = [
        message_start(),
        {"brandNewEvent": {"x": 1}},
        {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"brandNewDelta": {"y": 2}}}},
        tool_start("1", 7, "get_weather"),
        input_delta(1, {"city": "Paris"}),
    ]
    server.enqueue(Script(events=odd))
    received = streamed(client)
    assert received == [
        odd[0],
        {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"SDK_UNKNOWN_MEMBER": {"name": "brandNewDelta"}}}},
        *odd[3:],
    ]
    result = assemble(received)
    assert result.state is StreamState.TRUNCATED and not result.dispatchable


def test_an_event_with_two_union_members_raises_response_parser_error(server: LocalChatServer, client: Any) -> None:
    parsers = pytest.importorskip("botocore.parsers")
    two = {"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"text": "a", "toolUse": {"input": "{}"}}}}
    server.enqueue(Script(events=[message_start(), two]))
    with pytest.raises(parsers.ResponseParserError):
        streamed(client)
