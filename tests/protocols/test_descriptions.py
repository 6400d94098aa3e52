"""What each built-in protocol's description says outside a stream, and the registry around them.

The CLI tests (``tests/cli``) check the same behaviour end to end; these pin it where it lives:
complete bodies, later responses, follow-ups, slot labels, call objects, finish reasons, paths.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from etf_otel import ABSENT, protocols
from etf_otel.core._vocabulary import OTHER_FINISH_REASON, bounded_finish_reason
from etf_otel.protocols import (
    ANTHROPIC_MESSAGES,
    BEDROCK_CONVERSE,
    CHAT_COMPLETIONS,
    GEMINI,
    OLLAMA,
    RESPONSES,
    WireProtocol,
)
from etf_otel.protocols._base import last_position, typed_starts
from etf_otel.protocols._chat_completions import DONE

CHAT, ANTHROPIC = CHAT_COMPLETIONS, ANTHROPIC_MESSAGES


def _chunk(id: Any = "c1", finish: str | None = None, index: Any = 0) -> dict[str, Any]:
    return {"id": id, "choices": [{"index": index, "delta": {}, "finish_reason": finish}]}


# --- complete bodies -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "chat", "responses", "anthropic"),
    [
        ({"object": "chat.completion"}, "a complete chat.completion body", None, None),
        ({"choices": [{"message": {}}]}, "a complete chat.completion body", None, None),
        ({"choices": [{"message": {}, "delta": {}}]}, None, None, None),
        ({"choices": [{"message": {}}], "type": "x"}, None, None, None),
        ({"choices": []}, None, None, None),
        ({"choices": "no"}, None, None, None),
        ({"choices": ["no"]}, None, None, None),
        ({"object": "response"}, None, "a complete Responses body (object: response)", None),
        ({"object": "response", "type": "response.created"}, None, None, None),
        ({"type": "message"}, None, None, "a complete Messages body (type: message)"),
        ({"type": "message_start"}, None, None, None),
        ("[DONE]", None, None, None),
        (None, None, None, None),
    ],
)
def test_complete_bodies(event: Any, chat: str | None, responses: str | None, anthropic: str | None) -> None:
    assert (CHAT.complete_body(event), RESPONSES.complete_body(event), ANTHROPIC.complete_body(event)) == (
        chat,
        responses,
        anthropic,
    )


# --- later responses -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "starts"),
    [
        ([_chunk(), _chunk(finish="stop"), DONE], []),
        ([_chunk(), DONE, _chunk()], [2]),
        ([DONE, _chunk(), DONE], []),  # a [DONE] before any chunk ends no response
        ([_chunk(finish="stop"), _chunk(id="c2")], [1]),  # another id, every choice finished
        ([_chunk(finish="stop"), _chunk(id="c2", index=1)], []),  # another choice: not a second response
        ([_chunk(), _chunk(id="c2")], []),  # not finished yet: a splice, the adapter's business
        ([_chunk(id=None, finish="stop"), _chunk(id="c2")], []),  # no id to compare
        ([_chunk(finish="stop"), _chunk(id="c1")], []),  # the same response
        ([_chunk(finish="stop", index="x"), _chunk(id="c2", index="y")], [1]),  # index by position
        ([{"choices": "no"}, {"other": 1}, 7, _chunk()], []),
        ([{"id": "c1", "choices": ["no", {"index": 0, "finish_reason": "stop"}]}, _chunk(id="c2")], [1]),
    ],
)
def test_chat_later_responses(events: list[Any], starts: list[int]) -> None:
    assert CHAT.later_responses(events) == starts


@pytest.mark.parametrize(
    ("events", "starts"),
    [
        ([{"type": "response.created"}, {"type": "response.completed"}], []),
        ([{"type": "response.created"}, {"type": "response.completed"}, "[DONE]", {"type": "response.created"}], [3]),
        ([{"type": "response.created"}, {"type": "error"}, {"type": "response.created"}], [2]),
        ([{"type": "response.created"}, {"type": "response.created"}], []),  # a splice
    ],
)
def test_responses_later_responses(events: list[Any], starts: list[int]) -> None:
    assert RESPONSES.later_responses(events) == starts


@pytest.mark.parametrize(
    ("events", "starts"),
    [
        ([{"type": "message_start"}, {"type": "message_stop"}, {"type": "message_start"}], [2]),
        ([{"type": "message_start"}, {"type": "error"}, {"type": "message_start"}], [2]),
        ([{"type": "message_delta", "delta": {"stop_reason": "end_turn"}}, {"type": "message_start"}], [1]),
        ([{"type": "message_delta", "delta": {"stop_reason": None}}, {"type": "message_start"}], []),
        ([{"type": "message_delta", "delta": "no"}, {"type": "message_start"}], []),
        ([{"type": "message_start"}, {"type": "message_start"}], []),
    ],
)
def test_anthropic_later_responses(events: list[Any], starts: list[int]) -> None:
    assert ANTHROPIC.later_responses(events) == starts


# --- follow-ups ------------------------------------------------------------------------------------


def test_chat_follow_up() -> None:
    sdk_message = SimpleNamespace(role="assistant", tool_calls=[])
    messages: list[object] = [
        {"role": "user"},
        sdk_message,
        {"role": "tool", "tool_call_id": "call-a"},
        {"role": "user"},
        {"role": "tool", "tool_call_id": 7},
    ]
    assert CHAT.follow_up(messages) == (1, ["call-a", None])
    assert CHAT.follow_up([{"role": "user"}]) is None
    assert CHAT.follow_up([{"role": "assistant"}]) == (0, [])


class _Dumped:
    """An SDK message: its fields as ``model_dump`` gives them."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields
        self.role = fields.get("role")

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return dict(self.fields)


def test_anthropic_follow_up() -> None:
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}
    assert ANTHROPIC.follow_up([{"role": "user"}, _Dumped(role="assistant", content=[]), result]) == (1, ["toolu_1"])
    assert ANTHROPIC.follow_up([{"role": "user"}]) is None
    assert ANTHROPIC.follow_up([SimpleNamespace(role="assistant")]) is None  # no model_dump: not that shape


def test_followup_shapes_and_the_default() -> None:
    assert CHAT.followup_shape == ANTHROPIC.followup_shape == "the messages list, or the request object holding it"
    assert RESPONSES.followup_shape == "the input list, or the request object holding it"
    assert RESPONSES.follow_up([{"role": "assistant"}]) is None  # linked by the integration's own rules


# --- slots, calls, finish reasons, paths ----------------------------------------------------------


def test_slot_labels() -> None:
    assert (CHAT.slot_label(1, 2), CHAT.slot_label(1, None)) == ("choice 1 \u00b7 tool_calls[2]", "no slot (choice 1)")
    assert (RESPONSES.slot_label(0, 3), RESPONSES.slot_label(0, None)) == ("output_index 3", "no open call")
    assert (ANTHROPIC.slot_label(0, 1), ANTHROPIC.slot_label(0, None)) == ("content block 1", "no open call")


@pytest.mark.parametrize(
    ("call", "chat", "responses", "anthropic"),
    [
        ({"id": "c", "function": {"name": "f", "arguments": "{}"}}, ("c", "f", "{}"), None, None),
        ({"id": "c", "function": None, "name": "f", "arguments": "{}"}, None, None, None),
        (
            {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": "{}"},
            None,
            ("c", "f", "{}"),
            None,
        ),
        ({"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}, None, None, ("t", "f", {"a": 1})),
        ({"id": "t", "name": "f"}, None, None, None),
    ],
)
def test_call_objects(call: Any, chat: Any, responses: Any, anthropic: Any) -> None:
    assert (CHAT.call_fields(call), RESPONSES.call_fields(call), ANTHROPIC.call_fields(call)) == (
        chat,
        responses,
        anthropic,
    )


def test_finish_reasons_are_the_protocols_and_bounded_by_their_union() -> None:
    assert "stop" in CHAT.finish_reasons and "end_turn" in ANTHROPIC.finish_reasons
    assert "max_output_tokens" in RESPONSES.finish_reasons
    known = protocols.known_finish_reasons()
    everyone = CHAT.finish_reasons | RESPONSES.finish_reasons | ANTHROPIC.finish_reasons | GEMINI.finish_reasons
    assert known == everyone | BEDROCK_CONVERSE.finish_reasons | OLLAMA.finish_reasons
    assert bounded_finish_reason("end_turn", known) == protocols.bounded_finish_reason("end_turn") == "end_turn"
    assert bounded_finish_reason("raw provider text", known) == OTHER_FINISH_REASON
    assert bounded_finish_reason("stop", frozenset()) == OTHER_FINISH_REASON


def test_request_paths_and_headings() -> None:
    assert set(protocols.REQUEST_PATHS) == {
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/messages",
        ":streamGenerateContent",
        "/converse-stream",
        "/api/chat",
    }
    assert len(protocols.REQUEST_PATHS) == 6
    assert "/v1/messages" in protocols.REQUEST_PATHS and "/v1/other" not in protocols.REQUEST_PATHS
    assert [p.heading for p in protocols.registered()] == [
        "Chat Completions",
        "OpenAI Responses",
        "Anthropic Messages",
        "Gemini",
        "Amazon Bedrock Converse",
        "Ollama",
    ]


# --- the neutral defaults and the registry ----------------------------------------------------------

BARE = WireProtocol(name="bare", assembler=CHAT.assembler, recognizes=lambda event: False, result_ids=lambda _: None)


def test_a_description_states_only_what_it_has() -> None:
    assert (BARE.heading, BARE.finish_reasons, BARE.request_path) == ("bare", frozenset(), None)
    assert BARE.followup_shape == "the request as the protocol sends it"
    assert BARE.follow_up([{"role": "assistant"}]) is None
    assert BARE.complete_body({"object": "chat.completion"}) is None
    assert BARE.later_responses([_chunk(), DONE, _chunk()]) == []
    assert (BARE.slot_label(0, 4), BARE.slot_label(0, None)) == ("slot 4", "no open call")
    assert BARE.call_fields({"id": "c", "function": {"name": "f"}}) is None
    assert BARE.binary_events(b"\x00\x00\x00\x10") is None


def test_register_and_unregister() -> None:
    assert protocols.register(BARE) is BARE
    try:
        assert protocols.register(BARE) is BARE  # the same description again: nothing changes
        assert list(protocols.PROTOCOLS) == [
            "chat_completions",
            "responses",
            "anthropic_messages",
            "gemini",
            "bedrock_converse",
            "ollama",
            "bare",
        ]
        assert protocols.registered()[-1] is BARE and protocols.get("bare") is BARE
        assert len(protocols.REQUEST_PATHS) == 6  # it has none
        other = WireProtocol(name="bare", assembler=CHAT.assembler, recognizes=bool, result_ids=lambda _: None)
        with pytest.raises(ValueError, match="protocol name 'bare' is taken"):
            protocols.register(other)
        with pytest.raises(ValueError, match="'bare' is not registered"):
            protocols.unregister(other)
    finally:
        protocols.unregister("bare")
    assert "bare" not in protocols.PROTOCOLS and BARE not in protocols.registered()
    with pytest.raises(ValueError, match="'bare' is not registered"):
        protocols.unregister(BARE)
    with pytest.raises(ValueError, match="'responses' is built in"):
        protocols.unregister(RESPONSES)
    with pytest.raises(TypeError, match="takes a WireProtocol, not str"):
        protocols.register("bare")  # type: ignore[arg-type]


def test_base_helpers() -> None:
    assert last_position([{"role": "assistant"}, {"role": "user"}], "assistant") == 0
    assert last_position([SimpleNamespace(role="user")], "assistant") is None
    assert typed_starts([7, {"type": "end"}, {"type": "start"}], "start", lambda e: e["type"] == "end") == [2]
    assert ABSENT is protocols.field({}, "missing")


# --- what replay --html reads per event -----------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "responses", "anthropic"),
    [
        ({"type": "response.function_call_arguments.delta", "output_index": 2}, 2, None),
        ({"type": "content_block_delta", "index": 1}, None, 1),
        ({"output_index": True, "index": "1"}, None, None),  # a bool is no key, a string neither
        ("[DONE]", None, None),
    ],
)
def test_an_event_names_its_lifecycle_slot_by_the_protocols_own_key(event: Any, responses: Any, anthropic: Any) -> None:
    assert (RESPONSES.event_slot(event), ANTHROPIC.event_slot(event), CHAT.event_slot(event)) == (
        responses,
        anthropic,
        None,
    )


@pytest.mark.parametrize(
    ("event", "restates"),
    [
        ({"type": "response.function_call_arguments.done", "arguments": "{}"}, True),
        ({"type": "response.output_item.done", "item": {"type": "function_call"}}, True),
        ({"type": "response.output_item.done", "item": None}, False),
        ({"type": "response.function_call_arguments.delta", "delta": "{}"}, False),
        ("[DONE]", False),
    ],
)
def test_only_the_responses_done_events_restate_a_whole_call(event: Any, restates: bool) -> None:
    assert RESPONSES.states_arguments(event) is restates
    assert ANTHROPIC.states_arguments(event) is False and CHAT.states_arguments(event) is False
