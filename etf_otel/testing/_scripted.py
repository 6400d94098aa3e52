"""What ``python -m etf_otel.testing`` answers: a scripted tool-call turn per protocol, or a quirk stream.

The point of the command is to try an integration without an API key: the application's own
client, pointed at the server, must go through a whole tool-calling turn. So a request that
carries no tool result gets two tool calls (``get_weather`` and ``get_time``, each streamed in
two pieces; for Gemini two whole calls without ids, one per chunk; for Ollama two whole calls with
ids, one per chunk), and the follow-up that
sends their results back gets a short text answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from etf_otel.protocols import ANTHROPIC_MESSAGES, BEDROCK_CONVERSE, CHAT_COMPLETIONS, GEMINI, OLLAMA, RESPONSES
from etf_otel.testing import anthropic as a
from etf_otel.testing import bedrock as b
from etf_otel.testing import chat
from etf_otel.testing import gemini as g
from etf_otel.testing import ollama as o
from etf_otel.testing import responses as r
from etf_otel.testing._quirks import QUIRK_TABLES
from etf_otel.testing._server import RecordedRequest, Responder, Script

__all__ = [
    "ANSWER",
    "BEDROCK_PATH",
    "GEMINI_PATH",
    "PATHS",
    "quirk_protocols",
    "quirk_responder",
    "tool_turn_responder",
]

PATHS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "/v1/chat/completions": CHAT_COMPLETIONS.name,
        "/v1/responses": RESPONSES.name,
        "/v1/messages": ANTHROPIC_MESSAGES.name,
        "/api/chat": OLLAMA.name,
    }
)
"""The streaming path of each protocol, by the protocol's name in :data:`etf_otel.protocols.PROTOCOLS`."""

GEMINI_PATH: Final = "/v1beta/models/{model}:streamGenerateContent"
"""Gemini's streaming path (any model; ``:generateContent`` answers the same turn as one body)."""
_GEMINI_WHOLE: Final = ":generateContent"

BEDROCK_PATH: Final = "/model/{modelId}/converse-stream"
"""Bedrock Converse's streaming path (any model id; ``/converse`` answers the same turn as one body)."""

_NAMED = frozenset({RESPONSES.name, ANTHROPIC_MESSAGES.name})
"""Protocols whose events carry an ``event:`` line."""

_CALLS: Final = (
    ("get_weather", ('{"city":', ' "Paris"}')),
    ("get_time", ('{"timezone":', ' "Europe/Paris"}')),
)
ANSWER = "It is sunny in Paris, and 14:05 there."


def _protocol_of(path: str) -> tuple[str | None, bool | None]:
    """The protocol of a request path, and (Gemini, whose path says it) whether it is streamed."""
    if path.endswith(GEMINI.request_path or ":"):
        return GEMINI.name, True
    if path.endswith(_GEMINI_WHOLE):
        return GEMINI.name, False
    if path.startswith("/model/") and path.endswith(("/converse-stream", "/converse")):
        return BEDROCK_CONVERSE.name, path.endswith("-stream")
    return PATHS.get(path), None


def _bedrock_turn(answered: bool, streamed: bool) -> Script:
    """Two calls with Bedrock's ``tooluse_`` ids after a text block, or the answer; a body when not streamed."""
    ids = [f"tooluse_etfDemo{i + 1:0>14}" for i in range(len(_CALLS))]
    if answered:
        events = b.stream(stop_reason="end_turn", text=ANSWER)
        return Script(events=events) if streamed else Script(body=b.body(stop_reason="end_turn", text=ANSWER))
    if streamed:
        return Script(
            events=b.stream(*(b.tool_call(i + 1, ids[i], name, "", *pieces) for i, (name, pieces) in enumerate(_CALLS)))
        )
    calls = [b.tool_use(ids[i], name, json.loads("".join(pieces))) for i, (name, pieces) in enumerate(_CALLS)]
    return Script(body=b.body(*calls))


def _gemini_turn(answered: bool, streamed: bool) -> list[Any]:
    """Two whole calls without ids, one per chunk (as Gemini 2.x and Vertex AI send them), or the answer."""
    if answered:
        return g.stream(g.chunk(g.text(ANSWER))) if streamed else [g.chunk(g.text(ANSWER), finish_reason="STOP")]
    calls = [g.call(name, json.loads("".join(pieces))) for name, pieces in _CALLS]
    return g.stream(*(g.chunk(call) for call in calls)) if streamed else [g.chunk(*calls, finish_reason="STOP")]


def _ollama_turn(answered: bool, streamed: bool) -> Script:
    """Two whole calls with ids, one per chunk (as newer Ollama servers send them), or the answer."""
    if answered:
        return Script(events=o.stream(o.chunk(content=ANSWER))) if streamed else Script(body=o.body(content=ANSWER))
    calls = [o.call(name, json.loads("".join(pieces)), id=f"call_etf{i + 1:0>5}", index=i)
             for i, (name, pieces) in enumerate(_CALLS)]  # fmt: skip
    return Script(events=o.stream(*(o.chunk(call) for call in calls))) if streamed else Script(body=o.body(*calls))


def _tool_calls(protocol: str) -> list[Any]:
    if protocol == CHAT_COMPLETIONS.name:
        chunks = []
        for index, (name, (first, rest)) in enumerate(_CALLS):
            chunks.append(chat.chunk(chat.fragment(index, f"call_{index + 1}", name, first, type="function")))
            chunks.append(chat.chunk(chat.fragment(index, arguments=rest)))
        return chat.finished(*chunks)
    if protocol == RESPONSES.name:
        calls = [r.call(i, f"call_{i + 1}", name, pieces, f"fc_{i + 1}") for i, (name, pieces) in enumerate(_CALLS)]
        items = [r.function_call(f"call_{i + 1}", name, "".join(pieces), f"fc_{i + 1}", "completed")
                 for i, (name, pieces) in enumerate(_CALLS)]  # fmt: skip
        return r.stream(*calls, end=r.completed(items))
    return a.stream(*(a.tool_call(i, f"toolu_{i + 1}", name, *pieces) for i, (name, pieces) in enumerate(_CALLS)))


def _answer(protocol: str) -> list[Any]:
    if protocol == CHAT_COMPLETIONS.name:
        return chat.finished(chat.chunk(content=ANSWER), finish_reason="stop")
    if protocol == RESPONSES.name:
        message = {**r.message_item("msg_1", ANSWER), "status": "completed"}
        return r.stream(r.added(0, item=message), r.item_done(0, item=message), end=r.completed([message]))
    return a.stream(a.text_block(0, ANSWER), stop_reason="end_turn")


def _body(protocol: str, answered: bool) -> dict[str, Any]:
    """The same turn as one complete body, for a request without ``stream: true``."""
    calls = [(f"{'toolu' if protocol == ANTHROPIC_MESSAGES.name else 'call'}_{i + 1}", name, "".join(pieces))
             for i, (name, pieces) in enumerate(_CALLS)]  # fmt: skip
    if protocol == CHAT_COMPLETIONS.name:
        message: dict[str, Any] = {"role": "assistant", "content": ANSWER if answered else None}
        if not answered:
            message["tool_calls"] = [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                for call_id, name, arguments in calls
            ]
        choice = {"index": 0, "message": message, "finish_reason": "stop" if answered else "tool_calls"}
        return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "etf-demo", "choices": [choice]}
    if protocol == RESPONSES.name:
        output = (
            [{**r.message_item("msg_1", ANSWER), "status": "completed"}]
            if answered
            else [
                r.function_call(call_id, name, arguments, f"fc_{i + 1}", "completed")
                for i, (call_id, name, arguments) in enumerate(calls)
            ]  # fmt: skip
        )
        return r.response("resp_1", "completed", output)
    content = (
        [{"type": "text", "text": ANSWER}]
        if answered
        else [
            {"type": "tool_use", "id": call_id, "name": name, "input": json.loads(arguments)}
            for call_id, name, arguments in calls
        ]  # fmt: skip
    )
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "etf-demo",
        "content": content,
        "stop_reason": "end_turn" if answered else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _has_tool_result(protocol: str, body: Any) -> bool:
    """Whether the request sends tool results back (the follow-up of a tool-calling turn)."""
    if not isinstance(body, Mapping):
        return False
    if protocol == GEMINI.name:
        contents = body.get("contents")
        last = contents[-1] if isinstance(contents, list) and contents else None
        parts = last.get("parts") if isinstance(last, Mapping) else None
        return isinstance(parts, list) and any(isinstance(p, Mapping) and "functionResponse" in p for p in parts)
    if protocol == BEDROCK_CONVERSE.name:
        messages = body.get("messages")
        last = messages[-1] if isinstance(messages, list) and messages else None
        content = last.get("content") if isinstance(last, Mapping) else None
        return isinstance(content, list) and any(
            isinstance(block, Mapping) and "toolResult" in block for block in content
        )
    if protocol == RESPONSES.name:
        items = body.get("input")
        return isinstance(items, list) and any(_typed(item, "function_call_output") for item in items)
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, Mapping):
        return False
    if protocol in (CHAT_COMPLETIONS.name, OLLAMA.name):
        return last.get("role") == "tool"
    content = last.get("content")
    return isinstance(content, list) and any(_typed(block, "tool_result") for block in content)


def _typed(value: Any, kind: str) -> bool:
    return isinstance(value, Mapping) and value.get("type") == kind


def tool_turn_responder(request: RecordedRequest) -> Script | None:
    """Two tool calls, or the text answer once the request carries their results: streamed when the
    request asks for a stream, else as one complete body."""
    protocol, streamed = _protocol_of(request.path)
    if protocol is None:
        return None
    answered = _has_tool_result(protocol, request.body)
    if protocol == GEMINI.name:
        return Script(events=_gemini_turn(answered, bool(streamed)))
    if protocol == BEDROCK_CONVERSE.name:
        return _bedrock_turn(answered, bool(streamed))
    if protocol == OLLAMA.name:  # Ollama streams unless the request says "stream": false
        return _ollama_turn(answered, not (isinstance(request.body, Mapping) and request.body.get("stream") is False))
    if not (isinstance(request.body, Mapping) and request.body.get("stream") is True):
        return Script(body=_body(protocol, answered))
    events = _answer(protocol) if answered else _tool_calls(protocol)
    return Script(events=events, named=protocol in _NAMED)


def quirk_responder(name: str) -> Responder:
    """The quirk stream ``name`` of the request's protocol to a request that carries no tool result;
    the follow-up that sends results back gets :func:`tool_turn_responder`'s text answer, so an agent
    loop ends. A protocol whose table has no such stream answers ``404``."""
    if not any(name in table for table in QUIRK_TABLES.values()):
        raise KeyError(name)

    def respond(request: RecordedRequest) -> Script | None:
        protocol = _protocol_of(request.path)[0]
        if protocol is None:
            return None
        events: Sequence[Any] | None = QUIRK_TABLES.get(protocol, {}).get(name)
        if events is None:
            error = {"error": {"message": f"no {protocol} quirk stream named {name!r}", "type": "etf_local_sse"}}
            return Script(events=[error], status=404)
        if _has_tool_result(protocol, request.body):
            return tool_turn_responder(request)
        return Script(events=events, named=protocol in _NAMED)

    return respond


def quirk_protocols(name: str) -> list[str]:
    """The protocols whose quirk tables have a stream named ``name``."""
    return [protocol for protocol, table in QUIRK_TABLES.items() if name in table]
