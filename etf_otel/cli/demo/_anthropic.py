"""``etf-otel demo``: the Anthropic Messages part, through ``client.messages`` of the real ``anthropic`` client.

One valid call runs through the guarded host and its result is sent back, then the failures;
``get_final_message()`` is what the SDK alone hands the app.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from etf_otel.cli.demo._cases import (
    ANTHROPIC_MISSING,
    DISPATCHED,
    MODEL,
    READ,
    SAVE,
    USER,
    Part,
    ProtocolCase,
    describe_call,
    hand_to_host,
    run_case,
)
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing import anthropic as a

__all__ = ["run_anthropic"]


def _a_tool_block(index: int, tool_id: str, name: str, arguments: str) -> list[dict[str, Any]]:
    """One ``tool_use`` block as the API streams it: start (input ``{}``), ``""`` then two pieces, stop."""
    half = len(arguments) // 2
    return a.tool_call(index, tool_id, name, *dict.fromkeys(p for p in (arguments[:half], arguments[half:]) if p))


def _a_script(message_id: str, blocks: Sequence[dict[str, Any]], stop_reason: str = "tool_use") -> Script:
    """``message_start``, the blocks' events, ``message_delta`` with ``stop_reason``, ``message_stop``."""
    return Script(
        events=a.stream(list(blocks), stop_reason=stop_reason, message_id=message_id, model=MODEL), named=True
    )


def _a_cases() -> list[tuple[ProtocolCase, Script]]:
    reused = [*_a_tool_block(0, "toolu_a3", "read_source", READ), *_a_tool_block(0, "toolu_a4", "save_report", SAVE)]
    return [
        (
            ProtocolCase("valid call, tool_use block to the host", DISPATCHED),
            _a_script("msg_a1", _a_tool_block(0, "toolu_a1", "read_source", READ)),
        ),
        (
            ProtocolCase("path parameter cut by max_tokens", "incomplete_response"),
            _a_script("msg_a2", _a_tool_block(0, "toolu_a2", "read_source", ""), "max_tokens"),
        ),
        (ProtocolCase("block index reused by a second call", "id_conflict"), _a_script("msg_a3", reused)),
    ]


_A_TOOLS: Any = [
    {"name": "read_source", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "save_report", "input_schema": {"type": "object", "properties": {"title": {}, "body": {}}}},
]


def _a_case(client: Any, host: Any, server: LocalChatServer, case: ProtocolCase) -> None:
    """One ``messages.stream(...)`` turn: the final message's ``tool_use`` blocks to the host, results back."""
    history: list[Any] = [{"role": "user", "content": USER}]
    try:
        with client.messages.stream(model=MODEL, max_tokens=256, messages=history, tools=_A_TOOLS) as stream:
            final = stream.get_final_message()
    except Exception as error:  # what the SDK alone raises at the app
        case.sdk = f"raises {type(error).__name__}: {error}"
        return
    calls = [block for block in final.content if block.type == "tool_use"]
    case.sdk = "\n".join(describe_call(call.id, call.name, call.input) for call in calls) or "no call"
    if final.stop_reason != "tool_use":
        case.sdk += f"\n(stop_reason {final.stop_reason})"
    results: list[Any] = []
    for call in calls:
        output = hand_to_host(case, host, call)
        if output is not None:
            results.append({"type": "tool_result", "tool_use_id": call.id, "content": output})
    if results:
        text = [a.block_start(0, a.block("text", text="Done.")), a.block_stop(0)]
        server.enqueue(_a_script(f"{final.id}_next", text, "end_turn"))
        follow_up = [*history, {"role": "assistant", "content": final.content}, {"role": "user", "content": results}]
        for _ in client.messages.create(model=MODEL, max_tokens=256, messages=follow_up, stream=True):
            pass


def run_anthropic(
    part: Part, tracer_provider: TracerProvider, meter_provider: MeterProvider, provider_name: str
) -> list[ProtocolCase] | str:
    """The Anthropic cases through the instrumented ``anthropic`` client, or the line saying why they were skipped."""
    try:
        import anthropic
    except ImportError:
        return ANTHROPIC_MISSING
    from etf_otel.integrations.anthropic._instrumentor import AnthropicInstrumentor

    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        provider_name=provider_name,
        allow=(),  # the strict rules, whatever OTEL_INSTRUMENTATION_ETF_ALLOW says
        skip_dep_check=True,
    )
    try:
        instrumentation = instrumentor.instrumentation
        if instrumentation is None:  # instrument() declined
            return "Anthropic Messages: skipped, the anthropic client is instrumented by another setup"
        host = instrumentation.host(part.host, guard=True)
        client = anthropic.Anthropic(base_url=part.server.root_url, api_key="etf-demo", max_retries=0)
        cases = []
        for case, script in _a_cases():
            part.server.enqueue(script)
            cases.append(run_case(part, "anthropic", case, partial(_a_case, client, host, part.server)))
        return cases
    finally:
        instrumentor.uninstrument()
