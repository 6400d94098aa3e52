"""The streamed responses the overhead benchmark consumes: three wire protocols, real clients, in memory.

Each response has ``calls`` tool calls whose arguments arrive in ``fragments`` pieces, as the
providers stream them, encoded as the SSE body the provider would send:

* ``chat``: OpenAI Chat Completions chunks (``data:`` lines, then ``[DONE]``);
* ``responses``: OpenAI Responses events (``response.created``, ``response.in_progress``, per
  call ``output_item.added``, the ``function_call_arguments.delta`` pieces, ``.done`` and
  ``output_item.done``, then ``response.completed`` carrying the whole output and usage);
* ``anthropic``: Anthropic Messages events (``message_start``, per call a ``tool_use`` block:
  start, the ``""`` delta the API sends first, the ``input_json_delta`` pieces, stop; then
  ``message_delta`` and ``message_stop``).

The real ``openai`` and ``anthropic`` clients read those bytes through ``httpx2.MockTransport``.
Every request carries the same tools and a two-message conversation, as a tool-calling request
does. Shared by benchmarks/overhead.py and its worker processes (benchmarks/overhead_worker.py),
which may run in the peers' venv: this module imports the clients only (no etf_otel, no tests).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import openai

PROTOCOLS = ("chat", "responses", "anthropic")
PROTOCOL_LABELS = {
    "chat": "openai Chat Completions",
    "responses": "openai Responses",
    "anthropic": "anthropic Messages",
}

TOOLS = (
    ("search_documents", '{"query": "latency regression after deploy", "filters": {"lang": "en", "year": [2023]}}'),
    ("read_page", '{"url": "https://example.com/reports/q3/streaming-gateway", "page": 3, "images": false}'),
    ("save_report", '{"title": "Gateway latency", "sections": ["summary", "timeline"], "format": "markdown"}'),
    ("send_email", '{"to": ["ops@example.com"], "subject": "Latency report", "body": "See the attached report."}'),
)
SCHEMA = {"type": "object", "properties": {}, "additionalProperties": True}
SYSTEM = "You are a careful assistant. Use the tools."
QUESTION = "Find last quarter's gateway latency report and mail it to ops."
MODEL = "bench-model"


@dataclass(frozen=True)
class Case:
    """One measured response shape on one wire protocol."""

    protocol: str
    calls: int
    fragments: int

    @property
    def key(self) -> str:
        return f"{self.protocol}_{self.calls}x{self.fragments}"

    @classmethod
    def parse(cls, key: str) -> Case:
        protocol, shape = key.rsplit("_", 1)
        calls, fragments = shape.split("x")
        return cls(protocol, int(calls), int(fragments))


def fragment_count(calls: int, fragments: int) -> int:
    return calls * (1 + fragments)


def _pieces(text: str, count: int) -> list[str]:
    """``text`` cut into ``count`` pieces of about equal length (the last one takes the rest)."""
    step = max(1, len(text) // count)
    return [text[i * step : (i + 1) * step] if i < count - 1 else text[i * step :] for i in range(count)]


def call_arguments(position: int, fragments: int) -> tuple[str, str, list[str]]:
    """``(name, arguments, pieces)`` of call ``position``: valid JSON once joined, padded to ``fragments`` pieces."""
    name, arguments = TOOLS[position % len(TOOLS)]
    padded = arguments[:-1] + ', "pad": "' + "x" * (fragments * 3) + '"}'
    return name, padded, _pieces(padded, max(1, fragments))


# --- OpenAI Chat Completions ------------------------------------------------------------------

BASE = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": MODEL}


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {**BASE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def response_chunks(calls: int, fragments: int, call_id: str = "call") -> list[dict[str, Any]]:
    """One streamed Chat Completions response, as parsed JSON chunks (``[DONE]`` excluded).

    Each call opens with a chunk carrying its id, type and name; with ``fragments`` > 0 its
    arguments follow in that many chunks (ids omitted, as OpenAI does), with ``fragments``
    == 0 the opening chunk carries the complete arguments (one fragment per call).
    """
    out = [_chunk({"role": "assistant", "content": None})]
    for position in range(calls):
        name, arguments = TOOLS[position % len(TOOLS)]
        opening = {
            "index": position,
            "id": f"{call_id}_{position}",
            "type": "function",
            "function": {"name": name, "arguments": "" if fragments else arguments},
        }
        out.append(_chunk({"tool_calls": [opening]}))
        if fragments:
            for piece in call_arguments(position, fragments)[2]:
                out.append(_chunk({"tool_calls": [{"index": position, "function": {"arguments": piece}}]}))
    out.append(_chunk({}, "tool_calls"))
    return out


# --- OpenAI Responses -------------------------------------------------------------------------


def _response(status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "resp_bench",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": MODEL,
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def _function_call(position: int, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{position}",
        "call_id": f"call_{position}",
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def responses_events(calls: int, fragments: int) -> list[dict[str, Any]]:
    """One streamed Responses API response, as the API sends it (``sequence_number`` in order)."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response("in_progress", [])},
        {"type": "response.in_progress", "response": _response("in_progress", [])},
    ]
    done_items = []
    for position in range(calls):
        name, arguments, pieces = call_arguments(position, fragments)
        item_id = f"fc_{position}"
        where = {"output_index": position, "item_id": item_id}
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": position,
                "item": _function_call(position, name, "", "in_progress"),
            }
        )
        events.extend({"type": "response.function_call_arguments.delta", **where, "delta": p} for p in pieces)
        events.append({"type": "response.function_call_arguments.done", **where, "arguments": arguments})
        done = _function_call(position, name, arguments, "completed")
        done_items.append(done)
        events.append({"type": "response.output_item.done", "output_index": position, "item": done})
    usage = {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 60 * calls,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 120 + 60 * calls,
    }
    events.append({"type": "response.completed", "response": _response("completed", done_items, usage)})
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


# --- Anthropic Messages -----------------------------------------------------------------------


def anthropic_events(calls: int, fragments: int) -> list[dict[str, Any]]:
    """One streamed Messages API response with ``calls`` ``tool_use`` blocks, as the API sends it."""
    message = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 120, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for position in range(calls):
        name, _, pieces = call_arguments(position, fragments)
        block = {"type": "tool_use", "id": f"toolu_{position}", "name": name, "input": {}}
        events.append({"type": "content_block_start", "index": position, "content_block": block})
        for piece in ("", *pieces):
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append({"type": "content_block_delta", "index": position, "delta": delta})
        events.append({"type": "content_block_stop", "index": position})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 60 * calls},
        }
    )
    events.append({"type": "message_stop"})
    return events


# --- the SSE bodies and the clients -----------------------------------------------------------


def sse_body(events: Sequence[dict[str, Any]], named: bool = False, done: bool = True) -> bytes:
    """The SSE bytes of ``events``: ``event:`` lines when ``named``, a final ``[DONE]`` when ``done``."""
    out = []
    for event in events:
        if named:
            out.append(b"event: " + event["type"].encode() + b"\n")
        out.append(b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n")
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def case_body(case: Case) -> tuple[bytes, int]:
    """The SSE body of ``case`` and its number of SSE events."""
    if case.protocol == "chat":
        chunks = response_chunks(case.calls, case.fragments)
        return sse_body(chunks), len(chunks) + 1
    if case.protocol == "responses":
        events = responses_events(case.calls, case.fragments)
        return sse_body(events, named=True, done=False), len(events)
    if case.protocol == "anthropic":
        events = anthropic_events(case.calls, case.fragments)
        return sse_body(events, named=True, done=False), len(events)
    raise ValueError(f"unknown protocol {case.protocol!r}")


def _transport(body: bytes) -> httpx2.MockTransport:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx2.MockTransport(handler)


def openai_client(body: bytes) -> openai.OpenAI:
    """The real client over an in-memory transport that answers every request with ``body``."""
    http_client = openai.DefaultHttpxClient(transport=_transport(body))
    return openai.OpenAI(api_key="x", base_url="http://bench.local/v1", http_client=http_client, max_retries=0)


def anthropic_client(body: bytes) -> anthropic.Anthropic:
    """The real client over an in-memory transport that answers every request with ``body``."""
    http_client = anthropic.DefaultHttpxClient(transport=_transport(body))
    return anthropic.Anthropic(api_key="x", base_url="http://bench.local", http_client=http_client, max_retries=0)


MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
CHAT_TOOLS = [{"type": "function", "function": {"name": name, "parameters": SCHEMA}} for name, _ in TOOLS]
RESPONSES_TOOLS = [{"type": "function", "name": name, "parameters": SCHEMA, "strict": False} for name, _ in TOOLS]
ANTHROPIC_TOOLS = [{"name": name, "input_schema": SCHEMA} for name, _ in TOOLS]


def consumer(case: Case) -> Callable[[], int]:
    """A function that makes one streamed request of ``case`` through the real client and reads it all."""
    body, _ = case_body(case)
    if case.protocol == "chat":
        chat = openai_client(body).chat.completions

        def consume_chat() -> int:
            stream = chat.create(model=MODEL, messages=MESSAGES, tools=CHAT_TOOLS, stream=True)  # type: ignore[arg-type]
            return sum(1 for _ in stream)

        return consume_chat
    if case.protocol == "responses":
        responses = openai_client(body).responses
        conversation = [{"role": "user", "content": QUESTION}]

        def consume_responses() -> int:
            stream = responses.create(
                model=MODEL,
                instructions=SYSTEM,
                input=conversation,  # type: ignore[arg-type]
                tools=RESPONSES_TOOLS,  # type: ignore[arg-type]
                stream=True,
            )
            return sum(1 for _ in stream)

        return consume_responses
    messages = anthropic_client(body).messages
    user = [{"role": "user", "content": QUESTION}]

    def consume_anthropic() -> int:
        stream = messages.create(
            model=MODEL,
            max_tokens=1024,
            system=SYSTEM,
            messages=user,  # type: ignore[arg-type]
            tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
            stream=True,
        )
        return sum(1 for _ in stream)

    return consume_anthropic


def parsed_chunks(calls: int, fragments: int) -> list[Any]:
    """The SDK's own ``ChatCompletionChunk`` objects for a response, parsed once by the client."""
    client = openai_client(sse_body(response_chunks(calls, fragments)))
    return list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))  # type: ignore[arg-type]
