"""The providers' pairing refusals recognised from their messages (the messages are the public reports cited in
docs/protocols.md, shortened; the ids are made up)."""

from __future__ import annotations

import pytest

from etf_otel.core._pairing_refusals import is_pairing_refusal

REFUSALS = [
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
    "Messages with role 'tool' must be a response to a preceding message with 'tool_calls'",
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
    "The following tool_call_ids did not have response messages: call_x1",
    "Invalid parameter: 'tool_call_id' of 'call_x1' not found in 'tool_calls' of previous message.",
    "Invalid parameter: Duplicate value for 'tool_call_id' of 'call_x1', in messages[7] and messages[8].",
    "No tool output found for function call call_x1.",
    "No tool call found for function call output with call_id call_x1.",
    "messages.22: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_x1. Each "
    "`tool_use` block must have a corresponding `tool_result` block in the next message.",
    "messages.48.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x1.",
    "messages.1.content.1: `tool_use` ids must be unique",
    "Expected toolResult blocks at messages.2.content for the following Ids: tooluse_x1",
    "The number of toolResult blocks at messages.2.content exceeds the number of toolUse blocks of previous turn.",
    "Please ensure that function response turn comes immediately after a function call turn.",
    "Please ensure that the number of function response parts is equal to the number of function call parts of "
    "the function call turn.",
    "Tool call id was call_PTLP8xhu3uwZk4l3nlnrrJha but must be a-z, A-Z, 0-9, with a length of 9.",
    "Invalid 'messages[68].tool_calls[0].id': string too long. Expected a string with maximum length 40, but got "
    "a string with length 46 instead.",
    "Invalid 'input[95].call_id': string too long. Expected a string with maximum length 64.",
]

OTHERS = [
    "Invalid 'messages[1].content': string too long. Expected a string with maximum length 1048576.",
    "This model's maximum context length is 8192 tokens.",
    "Rate limit reached",
    "",
]


@pytest.mark.parametrize("message", REFUSALS)
def test_each_provider_pairing_refusal_is_recognised(message: str) -> None:
    assert is_pairing_refusal(message)


@pytest.mark.parametrize("message", [*OTHERS, None, 400])
def test_other_refusals_and_non_messages_are_not(message: object) -> None:
    assert not is_pairing_refusal(message)
