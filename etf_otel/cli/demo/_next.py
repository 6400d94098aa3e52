"""``etf-otel demo``: what happens next without etf-otel, case by case.

Where a provider refuses the next request, its own error text is quoted (the texts users report
from the OpenAI and Anthropic APIs; ids as in the demo). Where nothing refuses anything, the
text says what the app goes on with.
"""

from __future__ import annotations

from typing import Final

__all__ = ["NEXT", "next_without"]

_CHAT_ORPHANED: Final = (
    "400 \"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.\""
)
_CHAT_DUPLICATE: Final = "400 \"Duplicate value for 'tool_call_id'\""
_RUNS: Final = "it runs, as it should"
_STOPS: Final = "the agent stops on a valid call"

NEXT: Final = {
    # Chat Completions
    "control: continuations omit the id": "both tools run; the report is saved",
    "target: continuations send id: null": "both tools run; the report is saved",
    "id repeated on every fragment": (
        f"runs; its result for call-d1call-d1call-d1 (an id never issued): {_CHAT_ORPHANED}"
    ),
    "first tool call at index 1": _STOPS,
    "type: null on a continuation": _STOPS,
    "second id on the same index": f"runs; its result for call-r1call-r2 (an id never issued): {_CHAT_ORPHANED}",
    "stream ends mid-arguments, no finish_reason": (
        "a tool run with arguments that were cut, or a JSON error in the app"
    ),
    "connection cut mid-call": "the agent stops; the turn is lost",
    "arguments not JSON": "a tool run with arguments that are not JSON, or a JSON error in the app",
    "initial null id": "runs; its result has no id to answer with, and the next request is refused",
    "null id on a new index": "save_report runs; its result has no id, and the next request is refused",
    "empty id after an id": "runs as call-r1; whether the empty id began a second call is never asked",
    "number as id": "runs; its result answers 42, a number, and the next request is refused",
    "two calls, one id": f"read_source runs twice; two results for call-r1: {_CHAT_DUPLICATE}",
    "tool result for an unknown id": f"next request: {_CHAT_ORPHANED}",
    "call without a tool result": (
        "next request: 400 \"An assistant message with 'tool_calls' must be followed by tool messages responding to"
        " each 'tool_call_id'. The following tool_call_ids did not have response messages: call-l2\""
    ),
    "two results for one call": f"next request: {_CHAT_DUPLICATE}",
    # OpenAI Responses
    "valid call, result sent by call_id": _RUNS,
    "call_id changed in response.completed": (
        'runs; its result for call_9: 400 "No tool call found for function call output with call_id call_9."'
    ),
    "response.incomplete (max_output_tokens)": "the agent stops; the turn is lost",
    "result sent with the fc_ item id": (
        'next request: 400 "No tool call found for function call output with call_id fc_r4."'
    ),
    # Anthropic Messages
    "valid call, tool_use block to the host": _RUNS,
    "path parameter cut by max_tokens": "read_source runs with {}: a tool run with arguments that were cut",
    "block index reused by a second call": "save_report runs with {}: its arguments went to the first call",
    # Gemini
    "parallel calls, one per chunk": _RUNS,
    "call withheld by MAX_TOKENS": "read_source runs with {}: a tool run with arguments that were withheld",
    "Vertex partialArgs string never closed": "read_source runs with no arguments: the pieces are the app's to join",
}
"""Case name -> what the app goes on with when only the SDK handled the stream."""


def next_without(case: str) -> str:
    return NEXT.get(case, "-")
