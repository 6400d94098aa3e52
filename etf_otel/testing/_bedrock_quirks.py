"""Named Amazon Bedrock Converse streams, one per quirk seen from Bedrock and the consumers in front of it.

The rows of the Bedrock Converse quirks table (docs/quirks.md), from BEDROCK.md section 10. Events are in
the dict form botocore yields; ids in the shapes seen on the wire (``tooluse_`` and 22 characters for
every family Bedrock normalises, Kimi's ``functions.NAME:N``). The text block at index 0 starts with
its first delta, as every recorded stream does.
"""

from __future__ import annotations

from typing import Any, Final

from etf_otel.testing.bedrock import (
    MISSING,
    block_start,
    block_stop,
    exception,
    input_delta,
    message_start,
    message_stop,
    stream,
    text_delta,
    tool_call,
    tool_start,
)

__all__ = ["BEDROCK_QUIRK_STREAMS"]

_A: Final = "tooluse_Qm3hT9xKp2LwVb8NcR4sYz"
_B: Final = "tooluse_Hf7GjD2kLq9WnXc5Vt1ZrA"
_SERVER: Final = "tooluse_srvNovaCodeInterp01"


def _server_tool() -> list[dict[str, Any]]:
    """Nova's code interpreter: a provider-run ``toolUse``, its input streamed, its result block after it."""
    return [
        tool_start(1, _SERVER, "nova_code_interpreter", type="server_tool_use"),
        input_delta(1, '{"code":"print(1)"}'),
        block_stop(1),
        block_start(
            2, {"toolResult": {"toolUseId": "tooluse_srvNovaCodeInterp01", "type": "nova_code_interpreter_result"}}
        ),
        block_stop(2),
    ]


BEDROCK_QUIRK_STREAMS: Final[dict[str, list[Any]]] = {
    "clean multi-call stream (Anthropic on Bedrock)": stream(
        tool_call(1, _A, "get_a", "", '{"a"', ":1}"), tool_call(2, _B, "get_b", "", '{"b":2}')
    ),
    "stream ends without messageStop": stream(tool_call(1, _A, "get_a", "", '{"a":1'), stop_reason=MISSING),
    "end_turn with toolUse blocks": stream(tool_call(1, _A, "get_a", '{"a":1}'), stop_reason="end_turn"),
    "tool_use without a toolUse block": stream(stop_reason="tool_use"),
    'parameterless tool: input "" (Nova)': stream(tool_call(1, _A, "list_files", ""), text=None),
    "parameterless tool: no delta": stream(tool_call(1, _A, "list_files")),
    "input split at arbitrary positions": stream(tool_call(1, _A, "get_a", "", '{"', 'a":', ' "x', 'y"', "}")),
    "garbled input (gpt-oss)": stream(tool_call(1, _A, "get_a", '{"a":1}<|call|>')),
    "max_tokens cut a call (input {})": stream(tool_call(1, _A, "get_a", ""), stop_reason="max_tokens"),
    "guardrail_intervened": stream(tool_call(1, _A, "get_a", '{"a":1}'), stop_reason="guardrail_intervened"),
    "malformed_tool_use": stream(tool_call(1, _A, "get_a", '{"a":'), stop_reason="malformed_tool_use"),
    "modelStreamErrorException mid-stream (Nova)": [
        message_start(),
        tool_start(1, _A, "get_a"),
        input_delta(1, '{"a":1}'),
        exception("modelStreamErrorException", "Model produced invalid sequence as part of ToolUse."),
    ],
    "interleaved toolUse deltas": stream(
        [tool_start(1, _A, "get_a"), tool_start(2, _B, "get_b"), input_delta(1, '{"a":1}'), input_delta(2, '{"b":2}')],
        [block_stop(1), block_stop(2)],
    ),
    "delta before its contentBlockStart": stream([input_delta(1, '{"a":1}'), *tool_call(1, _A, "get_a")]),
    "block index reused by a second call": stream(
        tool_call(1, _A, "get_a", '{"a":1}'), tool_call(1, _B, "get_b", "{}")
    ),
    "text delta at a toolUse block's index": stream([*tool_call(1, _A, "get_a", '{"a":1}'), text_delta(1, "done")]),
    "duplicate toolUseId": stream(tool_call(1, _A, "get_a", '{"a":1}'), tool_call(2, _A, "get_a", '{"a":1}')),
    "toolUseId null": stream(tool_call(1, None, "get_a", '{"a":1}')),
    "no toolUseId (null dropped by botocore)": stream(tool_call(1, MISSING, "get_a", '{"a":1}')),
    "Kimi ids functions.NAME:N": stream(tool_call(0, "functions.get_a:0", "get_a", '{"a":1}'), text=None),
    "type tool_use on a client call": stream(
        [tool_start(1, _A, "get_a", type="tool_use"), *tool_call(1, _A, "get_a", "{}")[1:]]
    ),
    "server tool (Nova code interpreter) beside a call": stream(_server_tool(), tool_call(3, _A, "get_a", '{"a":1}')),
    "second messageStart (spliced)": [
        message_start(),
        *tool_call(1, _A, "get_a", '{"a":1}'),
        message_start(),
        *tool_call(1, _B, "get_b", '{"b":2}'),
        message_stop("tool_use"),
    ],
    "only messageStop after a toolResult (Claude 3)": [message_start(), message_stop("end_turn")],
}
"""Named recorded Converse streams, one per quirk (the rows of the Bedrock Converse quirks table)."""
