"""A provider's refusal recognised as a pairing refusal, from its error message alone (docs/protocols.md,
"The request before it is sent").

A refused request that the pairing check did not predict is recorded as ``refused_unexplained`` only when the
provider's 400 is about pairing: the message says so in words each provider uses every time (cited in
docs/protocols.md with the public reports they come from). The message is read, never kept: only the yes or
no leaves this module.

Pure: no OpenTelemetry, no I/O.
"""

from __future__ import annotations

from typing import Final

__all__ = ["PAIRING_REFUSALS", "is_pairing_refusal"]

PAIRING_REFUSALS: Final = (
    # OpenAI Chat Completions (and Azure): a tool message without its call ("preceeding" is OpenAI's spelling).
    "must be a response to a preceeding message with 'tool_calls'",
    "must be a response to a preceding message with 'tool_calls'",
    # ... a call without its tool messages; a result for another id; two results for one call.
    "must be followed by tool messages responding to each 'tool_call_id'",
    "not found in 'tool_calls' of previous message",
    "duplicate value for 'tool_call_id'",
    # Responses: a call without its output, an output without its call.
    "no tool output found for function call",
    "no tool call found for function call output",
    # Anthropic: a call without its result, a result without its call, two calls with one id.
    "ids were found without `tool_result` blocks",
    "ids were found without tool_result blocks",
    "unexpected `tool_use_id` found in `tool_result` blocks",
    "`tool_use` ids must be unique",
    # Bedrock Converse.
    "expected toolresult blocks",
    "toolresult blocks at messages",
    # Gemini.
    "function response turn comes immediately after a function call turn",
    "number of function response parts is equal to the number of function call parts",
    # Mistral: calls and results that do not pair (mistralai/client-ts#106, camel-ai/camel#1467).
    "not the same number of function calls and responses",
    # Mistral's id limit.
    "must be a-z, a-z, 0-9, with a length of 9",
)
"""Lower-cased parts of the providers' pairing refusals; any one of them in a message makes it one."""

_TOO_LONG: Final = "string too long"
_ID_FIELDS: Final = ("tool_calls", "call_id", "tool_call_id", "tool_use")
"""An over-long string is an id refusal only when the field it names is an id (OpenAI: ``'input[95].call_id'``)."""

_READ: Final = 4096
"""Characters of a message read: the refusals say what they refuse first."""


def is_pairing_refusal(message: object) -> bool:
    """Whether a provider's error ``message`` refuses the request for its pairing of calls and results."""
    if not isinstance(message, str):
        return False
    text = message[:_READ].lower()
    if _TOO_LONG in text:
        return any(field in text for field in _ID_FIELDS)
    return any(part in text for part in PAIRING_REFUSALS)
