"""How deeply nested a tool call's JSON the SDKs still parse, with and without etf-otel.

A streamed event is parsed by the SDK (``json.loads`` in its SSE decoder) while the application's
loop, and whatever stands between the loop and the SDK's iterator, is on the stack: on CPython
every frame there (and every entry into the interpreter from C, as a generator resumed by a
``for`` loop is) takes one unit of the recursion limit, and the JSON decoder takes one per
nesting level. So a hostile server's deeply nested value fails with ``RecursionError`` a few
levels earlier under a proxy than without it.

For each wire protocol the script finds, by bisection, the deepest nesting the real client parses
without ``RecursionError``, the application reading the stream with a ``for`` loop (``iter``) and
with ``next()``:

* ``plain``: the SDK's own stream;
* ``proxy``: the same stream wrapped by ``Instrumentation.stream`` (what the instrumentors return
  for ``create(stream=True)``);
* ``instrumented``: the client instrumented by ``instrument_openai`` / ``instrument_anthropic``.

The nested value is where a tool call's arguments go: Chat Completions ``function.arguments``
(a JSON value where a string belongs) and Anthropic ``content_block_start`` ``input``.
Run: ``PYTHONPATH=. python benchmarks/recursion_headroom.py`` (one line per case, in levels).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from benchmarks.overhead_streams import MODEL, anthropic_client, openai_client
from etf_otel.instrumentation import Instrumentation
from etf_otel.protocols import ANTHROPIC_MESSAGES

USER = [{"role": "user", "content": "q"}]


def nested(depth: int) -> str:
    """A JSON array nested ``depth`` deep, as text."""
    return "[" * depth + "]" * depth


def chat_body(depth: int) -> bytes:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "t", "arguments": "@@"}}
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
    }
    data = json.dumps(chunk, separators=(",", ":")).replace('"@@"', nested(depth))
    return f"data: {data}\n\ndata: [DONE]\n\n".encode()


def anthropic_body(depth: int) -> bytes:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {"x": "@@"}},
    }
    events = [start, block, {"type": "content_block_stop", "index": 0}, {"type": "message_stop"}]
    lines = []
    for event in events:
        data = json.dumps(event, separators=(",", ":")).replace('"@@"', nested(depth))
        lines.append(f"event: {event['type']}\ndata: {data}\n\n")
    return "".join(lines).encode()


def make_stream(protocol: str, depth: int) -> Any:
    if protocol == "chat":
        return openai_client(chat_body(depth)).chat.completions.create(model=MODEL, messages=USER, stream=True)  # type: ignore[call-overload]
    client = anthropic_client(anthropic_body(depth))
    return client.messages.create(model=MODEL, max_tokens=8, messages=USER, stream=True)  # type: ignore[call-overload]


def read_with_for(stream: Any) -> None:
    for _ in stream:
        pass


def read_with_next(stream: Any) -> None:
    while True:
        try:
            next(stream)
        except StopIteration:
            return


def parses(open_stream: Callable[[int], Any], read: Callable[[Any], None], depth: int) -> bool:
    stream = open_stream(depth)
    try:
        read(stream)
    except RecursionError:
        return False
    return True


def deepest(open_stream: Callable[[int], Any], read: Callable[[Any], None]) -> int:
    low, high = 1, sys.getrecursionlimit() + 10  # parses(low), not parses(high)
    assert parses(open_stream, read, low) and not parses(open_stream, read, high)
    while high - low > 1:
        middle = (low + high) // 2
        if parses(open_stream, read, middle):
            low = middle
        else:
            high = middle
    return low


def modes(protocol: str) -> Iterator[tuple[str, Callable[[int], Any]]]:
    etf = Instrumentation(TracerProvider(), MeterProvider())
    kwargs: dict[str, Any] = {"protocol": ANTHROPIC_MESSAGES} if protocol == "anthropic" else {}
    yield "plain", lambda depth: make_stream(protocol, depth)
    yield "proxy", lambda depth: etf.stream(make_stream(protocol, depth), **kwargs)
    if protocol == "chat":
        from etf_otel.integrations.openai import instrument_openai as instrument
    else:
        from etf_otel.integrations.anthropic import instrument_anthropic as instrument
    instrumentor = instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider())
    try:
        yield "instrumented", lambda depth: make_stream(protocol, depth)
    finally:
        instrumentor.uninstrument()


def main() -> None:
    print(f"Python {sys.version.split()[0]}, recursion limit {sys.getrecursionlimit()}")
    for protocol in ("chat", "anthropic"):
        for read in (read_with_for, read_with_next):
            results = {mode: deepest(open_stream, read) for mode, open_stream in modes(protocol)}
            plain = results["plain"]
            shown = ", ".join(f"{mode} {depth} ({depth - plain:+d})" for mode, depth in results.items())
            print(f"{protocol:9} {read.__name__:14} {shown}")


if __name__ == "__main__":
    main()
