"""Each protocol's request, as its SDK sends it, checked as its provider pairs calls and results
(``check_request``; docs/protocols.md, "The request before it is sent")."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from etf_otel.core._pairing import Answers, PairingMemory, PairingRules, UniqueIds, target_of
from etf_otel.protocols import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, GEMINI, PROTOCOLS, RESPONSES, check_request

USER: dict[str, Any] = {"role": "user", "content": "hi"}


def chat_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "read", "arguments": "{}"}}


def kinds(protocol: Any, request: object, **options: Any) -> list[tuple[str, int | None, str]]:
    outcome = check_request(protocol, request, **options)
    assert outcome is not None
    return [(problem.kind.value, problem.at, problem.reason.value) for problem in outcome.problems]


def test_every_built_in_protocol_states_its_provider_s_pairing_rules() -> None:
    assert CHAT_COMPLETIONS.pairing == PairingRules(Answers.RUN)
    assert RESPONSES.pairing == PairingRules(Answers.ANYWHERE, container="input")
    assert ANTHROPIC_MESSAGES.pairing == PairingRules(Answers.NEXT_TURN, unique_call_ids=UniqueIds.REQUEST)
    assert GEMINI.pairing == PairingRules(Answers.NEXT_TURN, by_name=True, container="contents")
    assert all(protocol.pairing is not None for protocol in PROTOCOLS.values())


def test_a_protocol_without_rules_or_a_request_of_another_shape_is_not_checked() -> None:
    assert check_request(replace(CHAT_COMPLETIONS, pairing=None), {"messages": []}) is None
    assert check_request(CHAT_COMPLETIONS, {"input": "text"}) is None


def test_chat_completions_request() -> None:
    assistant = {"role": "assistant", "tool_calls": [chat_call("call_a"), chat_call("call_b")]}
    tool_a = {"role": "tool", "tool_call_id": "call_a", "content": "ok"}
    tool_b = {"role": "tool", "tool_call_id": "call_b", "content": "ok"}
    assert kinds(CHAT_COMPLETIONS, {"messages": [USER, assistant, tool_a, tool_b]}) == []
    assert kinds(CHAT_COMPLETIONS, [USER, assistant, tool_a, USER, tool_b]) == [
        ("call_without_result", 1, "unknown"),
        ("result_without_call", 4, "unknown"),
    ]


def test_turns_read_already_are_checked_instead_of_the_request_read_again() -> None:
    assistant = {"role": "assistant", "tool_calls": [chat_call("call_a")]}
    turns = CHAT_COMPLETIONS.history([USER, assistant])
    assert kinds(CHAT_COMPLETIONS, {"messages": []}, turns=turns) == [("call_without_result", 1, "unknown")]
    outputs = {"input": [{"type": "function_call_output", "call_id": "call_a", "output": "ok"}]}
    held = {**outputs, "previous_response_id": "resp_1"}
    assert kinds(RESPONSES, held, turns=RESPONSES.history(outputs["input"]), held_calls=["call_a"]) == []


def test_chat_completions_id_limits_follow_the_target() -> None:
    long_id = "call_" + "x" * 40
    request = {"messages": [USER, {"role": "assistant", "tool_calls": [chat_call(long_id)]}]}
    request["messages"].append({"role": "tool", "tool_call_id": long_id, "content": "ok"})
    assert kinds(CHAT_COMPLETIONS, request) == []  # no target: no id check
    assert kinds(CHAT_COMPLETIONS, request, target=target_of("http://127.0.0.1:8000/v1")) == []
    openai = kinds(CHAT_COMPLETIONS, request, target=target_of("https://api.openai.com/v1"))
    assert openai == [("id_rejected_by_target", 1, "unknown"), ("id_rejected_by_target", 2, "unknown")]
    mistral = kinds(CHAT_COMPLETIONS, request, target="mistral")
    assert [kind for kind, *_ in mistral] == ["id_rejected_by_target"] * 2


def test_anthropic_request() -> None:
    def use(call_id: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": call_id, "name": "read", "input": {}}

    def result(call_id: str) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}

    assistant = {"role": "assistant", "content": [{"type": "text", "text": "reading"}, use("toolu_1")]}
    answer = {"role": "user", "content": [result("toolu_1"), {"type": "text", "text": "go on"}]}
    assert kinds(ANTHROPIC_MESSAGES, {"messages": [USER, assistant, answer]}) == []
    assert kinds(ANTHROPIC_MESSAGES, {"messages": [USER, assistant, USER, answer]}) == [
        ("call_without_result", 1, "unknown"),
        ("result_without_call", 3, "unknown"),
    ]
    reused = {"role": "assistant", "content": [use("toolu_1")]}
    assert kinds(ANTHROPIC_MESSAGES, {"messages": [USER, assistant, answer, reused, answer]}) == [
        ("duplicate_call_id", 3, "unknown")
    ]
    colon = {"role": "assistant", "content": [use("functions.read:0")]}
    request = {"messages": [USER, colon, {"role": "user", "content": [result("functions.read:0")]}]}
    assert kinds(ANTHROPIC_MESSAGES, request, target="anthropic") == [
        ("id_rejected_by_target", 1, "unknown"),
        ("id_rejected_by_target", 2, "unknown"),
    ]


def test_gemini_request() -> None:
    model = {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {}}}]}
    model_2 = {"role": "model", "parts": [{"functionCall": {"name": "time", "args": {}}}]}  # a second chunk
    answer = {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "time", "response": {}}},
            {"functionResponse": {"name": "weather", "response": {}}},
        ],
    }
    assert kinds(GEMINI, {"contents": [USER, model, model_2, answer]}) == []
    assert kinds(GEMINI, [USER, model, model_2, {"role": "user", "parts": answer["parts"][:1]}]) == [
        ("call_without_result", 1, "unknown")
    ]


def response_item(kind: str, call_id: str) -> dict[str, Any]:
    if kind == "call":
        return {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": "read", "arguments": "{}"}
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


@pytest.mark.parametrize(
    ("request_", "held_calls", "expected"),
    [
        ({"input": [USER, response_item("call", "call_a"), response_item("out", "call_a")]}, None, []),
        ({"input": [response_item("out", "call_a")]}, None, [("result_without_call", 0, "unknown")]),
        ({"input": [response_item("out", "call_a")], "previous_response_id": "resp_1"}, None, []),
        (
            {"input": [response_item("out", "call_a")], "previous_response_id": ""},
            None,
            [("result_without_call", 0, "unknown")],
        ),
        ({"input": [response_item("out", "call_a")], "conversation": "conv_1"}, None, []),
        (
            {"input": [response_item("out", "call_a")], "previous_response_id": "resp_1"},
            ["call_a", "call_b"],
            [("call_without_result", None, "unknown")],
        ),
        ([response_item("out", "call_a")], ["call_b"], []),  # a bare list cannot tell: not judged
        ("just text", None, []),
    ],
    ids=["clean", "orphan", "previous", "empty_previous", "conversation", "held", "bare_list", "text"],
)
def test_responses_request(request_: object, held_calls: list[str] | None, expected: list[object]) -> None:
    assert kinds(RESPONSES, request_, held_calls=held_calls) == expected


def test_memory_and_preserved_ids_reach_the_check() -> None:
    memory = PairingMemory()
    memory.responded(["call_a"])
    request = {"messages": [USER, {"role": "tool", "tool_call_id": "call_a", "content": "ok"}]}
    outcome = check_request(CHAT_COMPLETIONS, request, memory=memory, preserved=lambda call_id: True)
    assert outcome is not None
    (problem,) = outcome.problems
    assert (problem.kind.value, problem.reason.value, problem.call_id) == (
        "result_without_call",
        "history_trimmed",
        "call_a",
    )
    assert len(memory) == 1  # the check does not change the memory
