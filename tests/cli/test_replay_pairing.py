"""``etf-otel replay FILE --followup NEXT``: the next request as its provider pairs calls and results (issue 37,
AGENT-STACKS 11.8; docs/cli.md). Each broken request is named with its position and reason; a consistent
one, or one a target without known limits receives, is not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from etf_otel.testing import anthropic, responses
from etf_otel.testing.chat import chunk, finished, fragment

from .test_cli_replay import assert_followup_shape, run, write_jsonl

CANARY = "CANARY-never-printed"


def chat_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "read", "arguments": "{}"}}


def tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


USER = {"role": "user", "content": "hi"}


def chat_response(tmp_path: Path, *ids: str) -> Path:
    fragments = [chunk(fragment(index, call_id, "read", "{}")) for index, call_id in enumerate(ids)]
    return write_jsonl(tmp_path / "r.jsonl", finished(*fragments))


def replay(
    tmp_path: Path, recording: Path, request: object, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, dict[str, Any], str]:
    """The JSON document and the table of one replay, with the exit code (the same for both)."""
    path = tmp_path / "next.json"
    path.write_text(json.dumps(request))
    code, out, err = run(["replay", str(recording), "--followup", str(path), "--json", *extra], capsys)
    assert err == ""
    document = json.loads(out)
    assert_followup_shape(document)
    table_code, table, err = run(["replay", str(recording), "--followup", str(path), *extra], capsys)
    assert (table_code, err) == (code, "")
    return code, document, table


def problems(document: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(p["kind"], p["position"], p["item"], p["index"], p["reason"], p["id"]) for p in document["pairing"]]


def test_a_clean_stateless_history_of_three_rounds_is_no_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = chat_response(tmp_path, "call_c")
    rounds = [USER]
    for call_id in ("call_a", "call_b", "call_c"):
        rounds += [{"role": "assistant", "tool_calls": [chat_call(call_id)]}, tool(call_id)]
    code, document, table = replay(tmp_path, recording, {"messages": rounds}, capsys, "--target", "openai")
    assert (code, document["pairing"], document["pairing_omitted"]) == (0, [], 0)
    assert "pairing: every call and result of the next request pairs as its provider requires" in table


def test_a_trimmed_history_is_named_with_its_position_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The assistant message with the call was trimmed away; its tool message was kept."""
    recording = chat_response(tmp_path, "call_a")
    code, document, table = replay(tmp_path, recording, [USER, tool("call_a")], capsys)
    assert code == 1
    assert problems(document) == [("result_without_call", "messages[1]", "result", 0, "history_trimmed", "call_a")]
    assert "pairing (the next request, as its provider pairs it)" in table
    assert "result_without_call" in table and "messages[1] result 0" in table and "history_trimmed" in table


def test_a_dropped_result_and_a_duplicated_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recording = chat_response(tmp_path, "call_a", "call_b")
    assistant = {"role": "assistant", "tool_calls": [chat_call("call_a"), chat_call("call_b")]}
    code, document, _ = replay(tmp_path, recording, [USER, assistant, tool("call_a")], capsys)
    assert code == 1
    assert problems(document) == [("call_without_result", "messages[1]", "call", 1, "unknown", "call_b")]
    request = [USER, assistant, tool("call_a"), tool("call_b"), tool("call_b")]
    code, document, _ = replay(tmp_path, recording, request, capsys)
    assert code == 1
    assert problems(document) == [("duplicate_result", "messages[4]", "result", 0, "unknown", "call_b")]


def test_a_concatenated_id_is_refused_by_a_target_with_short_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The openai SDK's accumulator runs the ids of one slot together; the history carries the result
    consistently, so only a target whose limit it breaks refuses it (a fallback to Mistral)."""
    recording = chat_response(tmp_path, "call_1", "call_2")
    request = [USER, {"role": "assistant", "tool_calls": [chat_call("call_1call_2")]}, tool("call_1call_2")]
    code, document, _ = replay(tmp_path, recording, request, capsys)
    assert problems(document) == [] and code == 1  # the linkage still finds the concatenated result
    code, document, table = replay(tmp_path, recording, request, capsys, "--target", "mistral")
    assert code == 1
    assert problems(document) == [
        ("id_rejected_by_target", "messages[1]", "call", 0, "concatenated_ids", None),
        ("id_rejected_by_target", "messages[2]", "result", 0, "concatenated_ids", None),
    ]
    assert "call_1call_2" not in table.split("pairing (")[1]  # never a proposal's id: not named


def test_an_over_long_id_is_checked_only_for_a_known_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    long_id = "portkey-6aa6db90-1b84-4155-9f32-f658c97d6b1b"  # 44 characters
    recording = chat_response(tmp_path, long_id)
    request = [USER, {"role": "assistant", "tool_calls": [chat_call(long_id)]}, tool(long_id)]
    code, document, _ = replay(tmp_path, recording, request, capsys)
    assert (code, document["pairing"]) == (0, [])  # an unknown or self-hosted target: no id check
    code, document, _ = replay(tmp_path, recording, request, capsys, "--target", "azure_openai")
    assert code == 1
    assert [(kind, item, reason, call_id) for kind, _, item, _, reason, call_id in problems(document)] == [
        ("id_rejected_by_target", "call", "unknown", long_id),
        ("id_rejected_by_target", "result", "unknown", long_id),
    ]


def test_an_unknown_target_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recording = chat_response(tmp_path, "call_a")
    code, out, err = run(["replay", str(recording), "--target", "openrouter"], capsys)
    assert code == 2 and "invalid choice: 'openrouter'" in err


def test_responses_previous_response_id_holds_the_calls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = responses.stream(
        *responses.call(0, "call_1", "read", ["{}"]), *responses.call(1, "call_2", "read", ["{}"])
    )
    recording = write_jsonl(tmp_path / "r.jsonl", events)
    output = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
    request = {"previous_response_id": "resp_1", "input": [output]}
    code, document, table = replay(tmp_path, recording, request, capsys)
    assert code == 1
    assert problems(document) == [("call_without_result", None, "call", None, "unknown", "call_2")]
    assert "a call the provider holds" in table
    # without previous_response_id, the outputs must answer calls of the input
    code, document, _ = replay(tmp_path, recording, {"input": [output, {**output, "call_id": CANARY}]}, capsys)
    assert problems(document) == [
        ("result_without_call", "input[0]", "result", 0, "history_trimmed", "call_1"),
        ("result_without_call", "input[1]", "result", 0, "unknown", None),
    ]


def test_anthropic_refuses_an_id_reused_in_the_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recording = write_jsonl(tmp_path / "r.jsonl", anthropic.stream(anthropic.tool_call(0, "call_0", "read", "{}")))

    def turn(call_id: str) -> list[dict[str, Any]]:
        use = {"type": "tool_use", "id": call_id, "name": "read", "input": {}}
        result = {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}
        return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]

    code, document, _ = replay(tmp_path, recording, {"messages": [USER, *turn("call_0"), *turn("call_0")]}, capsys)
    assert code == 1
    assert problems(document) == [("duplicate_call_id", "messages[3]", "call", 0, "unknown", "call_0")]
    assert CANARY not in json.dumps(document)
