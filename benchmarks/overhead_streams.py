"""The responses the overhead benchmark consumes: five wire protocols, real clients, in memory.

A case is ``protocol:calls:fragments``. With ``fragments`` > 0 the response is streamed: it has
``calls`` tool calls whose arguments arrive in ``fragments`` pieces, as the providers stream
them, encoded as the SSE body the provider would send:

* ``chat``: OpenAI Chat Completions chunks (``data:`` lines, then ``[DONE]``);
* ``responses``: OpenAI Responses events (``response.created``, ``response.in_progress``, per
  call ``output_item.added``, the ``function_call_arguments.delta`` pieces, ``.done`` and
  ``output_item.done``, then ``response.completed`` carrying the whole output and usage);
* ``anthropic``: Anthropic Messages events (``message_start``, per call a ``tool_use`` block:
  start, the ``""`` delta the API sends first, the ``input_json_delta`` pieces, stop; then
  ``message_delta`` and ``message_stop``);
* ``gemini``: Vertex AI ``streamGenerateContent?alt=sse`` chunks with streamed function-call
  arguments (``toolConfig.functionCallingConfig.streamFunctionCallArguments``, which the request
  sets). Only there do a call's arguments arrive in pieces: the Developer API sends every call
  whole, ``args`` and all, in one part (N calls x M fragments does not exist on it). Per call: a
  head part (``name``, ``willContinue: true``), then ``fragments`` chunks of one ``partialArgs``
  leaf each (``jsonPath`` and a typed value; every scalar of the arguments is one leaf, a string
  streamed in several pieces says ``willContinue: true`` on all but its last, and the pieces a
  shape asks for beyond one per scalar go to the ``pad`` string), then the empty
  ``functionCall: {}`` that closes the call, as recorded Vertex streams do
  (examples/recordings/gemini-vertex-partial-args.jsonl); last, a chunk with ``finishReason:
  STOP`` and the usage. No ids: Vertex sends none.
* ``bedrock``: Amazon Bedrock ``converse_stream`` events, encoded as the
  ``application/vnd.amazon.eventstream`` messages Bedrock answers with (each payload padded, as
  Bedrock pads them): ``messageStart``, per call a ``toolUse`` block (``contentBlockStart`` with its
  ``tooluse_...`` id and name, the ``fragments`` input pieces, ``contentBlockStop``), then
  ``messageStop`` (``tool_use``) and ``metadata`` (usage). No text block, as in the Anthropic case.

With ``fragments`` == 0 the response is not streamed: one JSON body with every call whole (a
``chat.completion``, a Responses ``response``, an Anthropic ``message``, a Gemini Developer API
``GenerateContentResponse`` whose calls carry ids, as Gemini 3 models send them, a ``converse``
output), read with the non-streaming call.

The real ``openai``, ``anthropic`` and ``google-genai`` clients read those bytes through
``httpx2.MockTransport`` (google-genai takes the ``httpx2.Client`` through
``HttpOptions(httpx_client=...)``): no network, no socket. Every request carries the same tools
and a two-message conversation (a system instruction and a user message), as a tool-calling
request does. A ``bedrock-runtime`` client of ``boto3`` reads its bytes through botocore's own
event system: a ``before-send`` handler registered on that client answers each request with an
``AWSResponse`` over the bytes (a urllib3 response over memory, read as botocore reads the wire), so
the request is still built, serialized and signed and the answer parsed as ever, with no socket.
Shared by benchmarks/overhead.py and its worker processes (benchmarks/overhead_worker.py), which may
run in the peers' venvs: this module imports the clients only (no etf_otel, no tests). Bedrock is
the exception, measured in the project's venv only (:data:`PROJECT_PROTOCOLS`): ``boto3`` and the
event-stream encoder of ``etf_otel.testing.bedrock`` are imported when a Bedrock case is built.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import openai
from google import genai
from google.genai import types as genai_types

PROTOCOLS = ("chat", "responses", "anthropic")
"""The protocols of the ``openai`` and ``anthropic`` clients (benchmarks/overhead_stages.py times these)."""
ALL_PROTOCOLS = (*PROTOCOLS, "gemini")
"""The protocols benchmarks/overhead.py measures end to end, beside the peers' instrumentations."""
PROJECT_PROTOCOLS = (*ALL_PROTOCOLS, "bedrock")
"""The protocols of the project venv's configurations (bare, floor, tracker, etf-otel): Bedrock Converse
is counted by overhead_instructions.py only (no peer instrumentation of it is installed to compare)."""
PROTOCOL_LABELS = {
    "chat": "openai Chat Completions",
    "responses": "openai Responses",
    "anthropic": "anthropic Messages",
    "gemini": "google-genai Gemini",
    "bedrock": "boto3 Bedrock Converse",
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

    @property
    def streamed(self) -> bool:
        """A streamed response; 0 fragments is a whole body read with the non-streaming call."""
        return self.fragments > 0

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
    events.append({"type": "response.completed", "response": _response("completed", done_items, _usage(calls))})
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


# --- Gemini (Vertex AI, streamed function-call arguments) -------------------------------------

GEMINI_BASE = {"modelVersion": MODEL, "responseId": "bench-response"}


def _leaves(value: Any, path: str = "$") -> list[tuple[str, Any]]:
    """The scalars of a JSON value, in order, with their JSON paths (``$.a.b[0]``)."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [leaf for index, item in enumerate(value) for leaf in _leaves(item, f"{path}[{index}]")]
    return [(path, value)]


def _partial_arg(path: str, value: Any, more: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"jsonPath": path}
    if isinstance(value, bool):
        entry["boolValue"] = value
    elif isinstance(value, int | float):
        entry["numberValue"] = value
    elif value is None:
        entry["nullValue"] = "NULL_VALUE"
    else:
        entry["stringValue"] = value
    if more:
        entry["willContinue"] = True
    return entry


def gemini_partial_args(position: int, fragments: int) -> tuple[str, list[dict[str, Any]]]:
    """``(name, entries)`` of call ``position``: its arguments as ``fragments`` ``partialArgs`` leaves.

    One entry per scalar; the pieces beyond those are the ``pad`` string's (the last leaf).
    """
    name, arguments, _ = call_arguments(position, fragments)
    leaves = _leaves(json.loads(arguments))
    if fragments < len(leaves):
        raise ValueError(f"{name}: {len(leaves)} leaves need at least as many fragments, not {fragments}")
    *firsts, (pad_path, pad) = leaves
    entries = [_partial_arg(path, value, False) for path, value in firsts]
    pieces = _pieces(pad, fragments - len(firsts))
    entries.extend(_partial_arg(pad_path, piece, n < len(pieces) - 1) for n, piece in enumerate(pieces))
    return name, entries


def _gemini_chunk(part: dict[str, Any], **candidate: Any) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [part]}, **candidate}], **GEMINI_BASE}


def gemini_chunks(calls: int, fragments: int) -> list[dict[str, Any]]:
    """One Vertex AI stream with ``calls`` function calls, each streamed as ``fragments`` ``partialArgs``."""
    out = []
    for position in range(calls):
        name, entries = gemini_partial_args(position, fragments)
        out.append(_gemini_chunk({"functionCall": {"name": name, "willContinue": True}}))
        out.extend(_gemini_chunk({"functionCall": {"partialArgs": [entry], "willContinue": True}}) for entry in entries)
        out.append(_gemini_chunk({"functionCall": {}}))
    usage = {"promptTokenCount": 120, "candidatesTokenCount": 60 * calls, "totalTokenCount": 120 + 60 * calls}
    out.append({**_gemini_chunk({"text": ""}, finishReason="STOP"), "usageMetadata": usage})
    return out


# --- Amazon Bedrock Converse ------------------------------------------------------------------


def bedrock_events(calls: int, fragments: int) -> list[dict[str, Any]]:
    """One ``converse_stream`` response with ``calls`` ``toolUse`` blocks, in the dict form botocore yields."""
    from etf_otel.testing import bedrock

    blocks = []
    for position in range(calls):
        name, _, pieces = call_arguments(position, fragments)
        blocks.append(bedrock.tool_call(position, f"tooluse_{position}", name, *pieces))
    return bedrock.stream(*blocks, stop_reason="tool_use", text=None)


# --- whole bodies (not streamed) --------------------------------------------------------------


def _tools(calls: int) -> list[tuple[int, tuple[str, str]]]:
    """``(position, (name, arguments))`` of each call of a body."""
    return [(n, TOOLS[n % len(TOOLS)]) for n in range(calls)]


def chat_body(calls: int) -> dict[str, Any]:
    """A ``chat.completion`` with ``calls`` tool calls, arguments whole."""
    tool_calls = [
        {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for n, (name, arguments) in _tools(calls)
    ]
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    usage = {"prompt_tokens": 120, "completion_tokens": 60 * calls, "total_tokens": 120 + 60 * calls}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls", "logprobs": None}
    return {**BASE, "id": "chatcmpl-@n@", "object": "chat.completion", "choices": [choice], "usage": usage}


def _usage(calls: int) -> dict[str, Any]:
    """A Responses ``usage`` for ``calls`` function calls."""
    return {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 60 * calls,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 120 + 60 * calls,
    }


def responses_body(calls: int) -> dict[str, Any]:
    """A completed Responses ``response`` with ``calls`` function calls."""
    items = [_function_call(n, *TOOLS[n % len(TOOLS)], "completed") for n in range(calls)]
    return {**_response("completed", items, _usage(calls)), "id": "resp_@n@"}


def anthropic_body(calls: int) -> dict[str, Any]:
    """An Anthropic ``message`` with ``calls`` ``tool_use`` blocks."""
    blocks = [
        {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": json.loads(arguments)}
        for n, (name, arguments) in _tools(calls)
    ]
    return {
        "id": "msg_@n@",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": blocks,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 120, "output_tokens": 60 * calls},
    }


def gemini_body(calls: int) -> dict[str, Any]:
    """A Developer API ``GenerateContentResponse`` with ``calls`` whole function calls, with ids."""
    parts = [
        {"functionCall": {"id": f"call_{n}", "name": name, "args": json.loads(arguments)}}
        for n, (name, arguments) in _tools(calls)
    ]
    usage = {"promptTokenCount": 120, "candidatesTokenCount": 60 * calls, "totalTokenCount": 120 + 60 * calls}
    candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
    return {"candidates": [candidate], "usageMetadata": usage, **GEMINI_BASE, "responseId": "bench-@n@"}


def bedrock_body(calls: int) -> dict[str, Any]:
    """A ``converse`` output with ``calls`` ``toolUse`` blocks (what Bedrock sends; botocore adds its metadata)."""
    from etf_otel.testing import bedrock

    blocks = [bedrock.tool_use(f"tooluse_{n}", name, json.loads(arguments)) for n, (name, arguments) in _tools(calls)]
    return bedrock.body(*blocks, stop_reason="tool_use", text=None)


BODIES = {
    "chat": chat_body,
    "responses": responses_body,
    "anthropic": anthropic_body,
    "gemini": gemini_body,
    "bedrock": bedrock_body,
}


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
    """The body of ``case`` (SSE, or JSON when not streamed) and its number of events (1 for a body)."""
    if not case.streamed:
        return json.dumps(BODIES[case.protocol](case.calls), separators=(",", ":")).encode(), 1
    if case.protocol == "chat":
        chunks = response_chunks(case.calls, case.fragments)
        return sse_body(chunks), len(chunks) + 1
    if case.protocol == "responses":
        events = responses_events(case.calls, case.fragments)
        return sse_body(events, named=True, done=False), len(events)
    if case.protocol == "anthropic":
        events = anthropic_events(case.calls, case.fragments)
        return sse_body(events, named=True, done=False), len(events)
    if case.protocol == "gemini":
        chunks = gemini_chunks(case.calls, case.fragments)
        return sse_body(chunks, done=False), len(chunks)
    if case.protocol == "bedrock":
        from etf_otel.testing import bedrock

        events = bedrock_events(case.calls, case.fragments)
        return bedrock.frames(events), len(events)
    raise ValueError(f"unknown protocol {case.protocol!r}")


RESPONSE_NUMBER = b"@n@"
"""In a body's response id, replaced by a number of its own per request (see ``_transport``)."""


def _transport(body: bytes, streamed: bool = True) -> httpx2.MockTransport:
    """Answers every request with ``body``; a body's response id is new on each (``RESPONSE_NUMBER``).

    A peer keyed by response id (OpenLLMetry's Responses wrapper merges a body into the record of
    an earlier response with the same id, and then emits no span) sees each body as the API
    sends it: a response of its own.
    """
    if streamed:

        def stream_handler(request: httpx2.Request) -> httpx2.Response:
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

        return httpx2.MockTransport(stream_handler)
    numbers = itertools.count()

    def body_handler(request: httpx2.Request) -> httpx2.Response:
        content = body.replace(RESPONSE_NUMBER, str(next(numbers)).encode())
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=content)

    return httpx2.MockTransport(body_handler)


def openai_client(body: bytes, streamed: bool = True) -> openai.OpenAI:
    """The real client over an in-memory transport that answers every request with ``body``."""
    http_client = openai.DefaultHttpxClient(transport=_transport(body, streamed))
    return openai.OpenAI(api_key="x", base_url="http://bench.local/v1", http_client=http_client, max_retries=0)


def anthropic_client(body: bytes, streamed: bool = True) -> anthropic.Anthropic:
    """The real client over an in-memory transport that answers every request with ``body``."""
    http_client = anthropic.DefaultHttpxClient(transport=_transport(body, streamed))
    return anthropic.Anthropic(api_key="x", base_url="http://bench.local", http_client=http_client, max_retries=0)


def genai_client(body: bytes, streamed: bool = True) -> genai.Client:
    """The real client over an in-memory transport: Vertex AI (express mode) streamed, the Developer API not."""
    options = genai_types.HttpOptions(
        httpx_client=httpx2.Client(transport=_transport(body, streamed)), base_url="http://bench.local/"
    )
    return genai.Client(vertexai=streamed, api_key="x", http_options=options)


def bedrock_client(body: bytes, streamed: bool = True) -> Any:
    """A real ``boto3`` ``bedrock-runtime`` client whose every request is answered with ``body`` in memory.

    The answer comes from botocore's ``before-send`` event, the hook botocore gives for answering a
    request without sending it: the handler returns an ``AWSResponse`` whose raw body is a urllib3
    response over the bytes, which botocore reads as it reads one off a socket (``converse_stream``
    decodes its event-stream messages from ``raw.stream()``). No retries, placeholder credentials.
    """
    import io

    import boto3
    import urllib3
    from botocore.awsrequest import AWSResponse
    from botocore.config import Config

    content_type = "application/vnd.amazon.eventstream" if streamed else "application/json"
    headers = {"content-type": content_type, "x-amzn-requestid": "bench-request"}

    def answer(request: Any, **_: Any) -> AWSResponse:
        raw = urllib3.HTTPResponse(io.BytesIO(body), headers=headers, status=200, preload_content=False)
        return AWSResponse(request.url, 200, headers, raw)

    client = boto3.session.Session().client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(retries={"total_max_attempts": 1}),
    )
    client.meta.events.register("before-send.bedrock-runtime.*", answer)
    return client


MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
CHAT_TOOLS = [{"type": "function", "function": {"name": name, "parameters": SCHEMA}} for name, _ in TOOLS]
RESPONSES_TOOLS = [{"type": "function", "name": name, "parameters": SCHEMA, "strict": False} for name, _ in TOOLS]
ANTHROPIC_TOOLS = [{"name": name, "input_schema": SCHEMA} for name, _ in TOOLS]
GEMINI_CONTENTS = [{"role": "user", "parts": [{"text": QUESTION}]}]
BEDROCK_REQUEST = {
    "modelId": MODEL,
    "system": [{"text": SYSTEM}],
    "messages": [{"role": "user", "content": [{"text": QUESTION}]}],
    "toolConfig": {"tools": [{"toolSpec": {"name": name, "inputSchema": {"json": SCHEMA}}} for name, _ in TOOLS]},
}


def gemini_config(streamed: bool) -> genai_types.GenerateContentConfig:
    """The request's system instruction and tools (declarations, not callables: no automatic
    function calling); streamed, the Vertex setting that streams the calls' arguments."""
    declarations = [genai_types.FunctionDeclaration(name=name, parameters_json_schema=SCHEMA) for name, _ in TOOLS]
    calling = genai_types.FunctionCallingConfig(stream_function_call_arguments=True if streamed else None)
    return genai_types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=[genai_types.Tool(function_declarations=declarations)],
        tool_config=genai_types.ToolConfig(function_calling_config=calling),
    )


def consumer(case: Case) -> Callable[[], int]:
    """A function that makes one request of ``case`` through the real client and reads it all.

    Streamed: it iterates the stream and returns the number of events. Not streamed: it makes the
    non-streaming call and returns the number of tool calls the client parsed.
    """
    body, _ = case_body(case)
    streamed = case.streamed
    stream: dict[str, Any] = {"stream": True} if streamed else {}  # a body's request says nothing of streams
    if case.protocol == "chat":
        chat = openai_client(body, streamed).chat.completions

        def consume_chat() -> int:
            response = chat.create(model=MODEL, messages=MESSAGES, tools=CHAT_TOOLS, **stream)  # type: ignore[arg-type]
            if streamed:
                return sum(1 for _ in response)
            return len(response.choices[0].message.tool_calls or ())

        return consume_chat
    if case.protocol == "responses":
        responses = openai_client(body, streamed).responses
        conversation = [{"role": "user", "content": QUESTION}]

        def consume_responses() -> int:
            response = responses.create(
                model=MODEL,
                instructions=SYSTEM,
                input=conversation,  # type: ignore[arg-type]
                tools=RESPONSES_TOOLS,  # type: ignore[arg-type]
                **stream,
            )
            if streamed:
                return sum(1 for _ in response)
            return len(response.output)

        return consume_responses
    if case.protocol == "gemini":
        models = genai_client(body, streamed).models
        config = gemini_config(streamed)

        def consume_gemini() -> int:
            if streamed:
                chunks = models.generate_content_stream(model=MODEL, contents=GEMINI_CONTENTS, config=config)  # type: ignore[arg-type]
                return sum(1 for _ in chunks)
            response = models.generate_content(model=MODEL, contents=GEMINI_CONTENTS, config=config)  # type: ignore[arg-type]
            return len(response.function_calls or ())

        return consume_gemini
    if case.protocol == "bedrock":
        return _consume_bedrock(bedrock_client(body, streamed), streamed)
    messages = anthropic_client(body, streamed).messages
    user = [{"role": "user", "content": QUESTION}]

    def consume_anthropic() -> int:
        response = messages.create(
            model=MODEL,
            max_tokens=1024,
            system=SYSTEM,
            messages=user,  # type: ignore[arg-type]
            tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
            **stream,
        )
        if streamed:
            return sum(1 for _ in response)
        return len(response.content)

    return consume_anthropic


def _consume_bedrock(client: Any, streamed: bool) -> Callable[[], int]:
    """``converse_stream`` read to its end (the number of events), or ``converse`` (its content blocks)."""

    def consume_bedrock() -> int:
        if streamed:
            return sum(1 for _ in client.converse_stream(**BEDROCK_REQUEST)["stream"])
        return len(client.converse(**BEDROCK_REQUEST)["output"]["message"]["content"])

    return consume_bedrock


def parsed_chunks(calls: int, fragments: int) -> list[Any]:
    """The SDK's own ``ChatCompletionChunk`` objects for a response, parsed once by the client."""
    client = openai_client(sse_body(response_chunks(calls, fragments)))
    return list(client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))  # type: ignore[arg-type]
