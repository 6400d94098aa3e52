"""``tool_rounds_responder``: a scripted model that goes several tool rounds before its answer, driven by the
real ``openai``, ``anthropic`` and ``boto3`` (Bedrock Converse) clients, stateless and along a
``previous_response_id`` chain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from etf_otel.testing import LocalChatServer, RecordedRequest
from etf_otel.testing._rounds import Round, round_of, tool_rounds_responder
from etf_otel.testing._scripted import ANSWER

ROUNDS: tuple[Round, ...] = (
    (("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})),
    (("get_weather", {"city": "Lyon"}),),
)


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer(responder=tool_rounds_responder(ROUNDS)) as scripted:
        yield scripted


def proposed(calls: list[tuple[str, str, Any]]) -> list[tuple[int | None, str, Any]]:
    return [(round_of(call_id), name, arguments) for call_id, name, arguments in calls]


EXPECTED = [
    [(1, "get_weather", {"city": "Paris"}), (1, "get_time", {"tz": "CET"})],
    [(2, "get_weather", {"city": "Lyon"})],
    [],
]


@pytest.mark.parametrize("stream", [False, True], ids=["body", "streamed"])
def test_a_stateless_chat_history_gets_each_round_then_the_answer(server: LocalChatServer, stream: bool) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "weather?"}]
    seen, ids = [], []
    for _ in EXPECTED:
        if stream:
            with client.chat.completions.stream(model="m", messages=messages) as events:
                message = events.get_final_completion().choices[0].message
        else:
            message = client.chat.completions.create(model="m", messages=messages).choices[0].message
        calls = message.tool_calls or []
        seen.append(proposed([(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls]))
        ids += [call.id for call in calls]
        results = [{"role": "tool", "tool_call_id": call.id, "content": "ok"} for call in calls]
        messages += [message.model_dump(exclude_none=True), *results]
    assert seen == EXPECTED and message.content == ANSWER
    assert len(set(ids)) == len(ids)  # unique per response


@pytest.mark.parametrize("stream", [False, True], ids=["body", "streamed"])
def test_a_previous_response_id_chain_gets_each_round_then_the_answer(server: LocalChatServer, stream: bool) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    items: list[Any] = [{"role": "user", "content": "weather?"}]
    chained: dict[str, Any] = {}
    seen, response_ids = [], []
    for _ in EXPECTED:
        if stream:
            with client.responses.stream(model="m", input=items, **chained) as events:
                response = events.get_final_response()
        else:
            response = client.responses.create(model="m", input=items, **chained)
        calls = [item for item in response.output if item.type == "function_call"]
        seen.append(proposed([(call.call_id, call.name, json.loads(call.arguments)) for call in calls]))
        response_ids.append(response.id)
        items = [{"type": "function_call_output", "call_id": call.call_id, "output": "ok"} for call in calls]
        chained = {"previous_response_id": response.id}  # only the newest results from now on
    assert seen == EXPECTED and response.output_text == ANSWER
    assert len(set(response_ids)) == 3


def test_an_anthropic_history_gets_each_round_then_the_answer(server: LocalChatServer) -> None:
    client = anthropic.Anthropic(base_url=server.root_url, api_key="x", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "weather?"}]
    seen, ids = [], []
    for _ in EXPECTED:
        with client.messages.stream(model="m", max_tokens=64, messages=messages) as events:
            final = events.get_final_message()
        calls = [block for block in final.content if block.type == "tool_use"]
        seen.append(proposed([(call.id, call.name, call.input) for call in calls]))
        ids += [call.id for call in calls]
        results = [{"type": "tool_result", "tool_use_id": call.id, "content": "ok"} for call in calls]
        messages += [{"role": "assistant", "content": final.content}, {"role": "user", "content": results}]
    assert seen == EXPECTED and final.stop_reason == "end_turn" and final.content[0].text == ANSWER  # type: ignore[union-attr]
    assert len(ids) == 3 and all(call_id.startswith("toolu_") for call_id in ids)


def converse_turn(client: Any, messages: list[Any], stream: bool) -> tuple[list[Any], str, str]:
    """The calls ``(toolUseId, name, input)``, the text and the stop reason of one Converse turn."""
    if not stream:
        answer = client.converse(modelId="m", messages=messages)
        content = answer["output"]["message"]["content"]
        uses = [block["toolUse"] for block in content if "toolUse" in block]
        text = "".join(block.get("text", "") for block in content)
        return [(use["toolUseId"], use["name"], use["input"]) for use in uses], text, answer["stopReason"]
    calls: dict[int, list[Any]] = {}
    text, stop = "", ""
    for event in client.converse_stream(modelId="m", messages=messages)["stream"]:
        if "contentBlockStart" in event:
            use = event["contentBlockStart"]["start"]["toolUse"]
            calls[event["contentBlockStart"]["contentBlockIndex"]] = [use["toolUseId"], use["name"], ""]
        elif "contentBlockDelta" in event:
            delta = event["contentBlockDelta"]["delta"]
            text += delta.get("text", "")
            if "toolUse" in delta:
                calls[event["contentBlockDelta"]["contentBlockIndex"]][2] += delta["toolUse"]["input"]
        elif "messageStop" in event:
            stop = event["messageStop"]["stopReason"]
    return [(call_id, name, json.loads(pieces)) for call_id, name, pieces in calls.values()], text, stop


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse_stream"])
def test_a_bedrock_converse_history_gets_each_round_then_the_answer(server: LocalChatServer, stream: bool) -> None:
    boto3 = pytest.importorskip("boto3")
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=server.root_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    messages: list[Any] = [{"role": "user", "content": [{"text": "weather?"}]}]
    seen, ids = [], []
    for _ in EXPECTED:
        calls, text, stop = converse_turn(client, messages, stream)
        seen.append(proposed(calls))
        ids += [call[0] for call in calls]
        uses = [{"toolUse": {"toolUseId": i, "name": n, "input": a}} for i, n, a in calls]
        results = [{"toolResult": {"toolUseId": call[0], "content": [{"text": "ok"}]}} for call in calls]
        messages += [{"role": "assistant", "content": uses or [{"text": text}]}, {"role": "user", "content": results}]
    assert seen == EXPECTED and stop == "end_turn" and text == ANSWER
    assert len(ids) == 3 and all(call_id.startswith("tooluse_") for call_id in ids)


def test_ids_never_repeat_across_responders() -> None:
    """Two loops of one process (two tests, two servers) never share an id, as real providers' never do."""
    ids = []
    for _ in range(2):
        with LocalChatServer(responder=tool_rounds_responder(ROUNDS)) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
            message = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "?"}])
            ids += [call.id for call in message.choices[0].message.tool_calls or []]
    assert len(ids) == 4 and len(set(ids)) == 4


def test_round_of_reads_only_its_own_ids() -> None:
    assert [round_of(value) for value in ("call_0007r2c1", "toolu_0001r10c3", "call_1", "", None, 3)] == [
        2,
        10,
        None,
        None,
        None,
        None,
    ]


def test_a_gemini_round_is_read_from_the_model_turns_its_history_carries() -> None:
    """Gemini's calls may have no id to read a round from: the round is the number of ``model`` turns with calls
    the history carries; the calls carry no id unless ``gemini_ids``."""
    respond = tool_rounds_responder(ROUNDS)
    path = "/v1beta/models/m:streamGenerateContent"
    first = respond(RecordedRequest("POST", path, {}, {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}))
    assert first is not None
    parts = [part for chunk in first.events for part in chunk["candidates"][0]["content"].get("parts", ())]
    assert [part["functionCall"]["name"] for part in parts] == ["get_weather", "get_time"]
    assert all("id" not in part["functionCall"] for part in parts)
    model_turn = {"role": "model", "parts": parts}
    answers = {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {}}}]}
    second = respond(RecordedRequest("POST", path, {}, {"contents": [model_turn, answers]}))
    assert second is not None
    names = [p["functionCall"]["name"] for c in second.events for p in c["candidates"][0]["content"].get("parts", ())]
    assert names == ["get_weather"]  # round two


@pytest.mark.parametrize("chained", [False, True], ids=["stateless", "previous-response-id"])
def test_reused_ids_number_every_responses_calls_again(chained: bool) -> None:
    """``reused_ids``: ``call_0``, ``call_1`` in every response; the round read from the history (and the
    response a ``previous_response_id`` continues)."""
    with LocalChatServer(responder=tool_rounds_responder(ROUNDS, reused_ids=True)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        items: list[Any] = [{"role": "user", "content": "weather?"}]
        history: list[Any] = list(items)
        options: dict[str, Any] = {}
        seen = []
        for _ in EXPECTED:
            response = client.responses.create(model="m", input=items if chained else history, **options)
            calls = [item for item in response.output if item.type == "function_call"]
            seen.append([(call.call_id, call.name, json.loads(call.arguments)) for call in calls])
            outputs = [{"type": "function_call_output", "call_id": call.call_id, "output": "ok"} for call in calls]
            history += [call.model_dump(exclude_none=True) for call in calls] + outputs
            items, options = outputs, ({"previous_response_id": response.id} if chained else {})
    assert seen == [
        [("call_0", "get_weather", {"city": "Paris"}), ("call_1", "get_time", {"tz": "CET"})],
        [("call_0", "get_weather", {"city": "Lyon"})],
        [],
    ]
    assert response.output_text == ANSWER
