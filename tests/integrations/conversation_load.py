"""Many conversations that start with the same request, through the real clients of all three protocols.

A scripted server answers every first request with two calls whose ids are new for each
response, and every follow-up with text. Each conversation reads the ids of its own response
from the events it consumed and answers exactly those (or the ``answer`` subset of them).
``python -m tests.integrations.conversation_load`` prints, per protocol and client, the
violations recorded and the ids found answered for 16 concurrent conversations.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from etf_otel import attributes as A
from etf_otel.testing import LocalChatServer, RecordedRequest, Script, capture
from etf_otel.testing import anthropic as M
from etf_otel.testing import chat as C
from etf_otel.testing import responses as R

FIRST = "read pages 1 and 2"
PROTOCOLS = ("chat", "responses", "responses-previous", "anthropic")


class Responder:
    """New call ids for every first request (``call_<n>_a``, ``call_<n>_b``), text for every follow-up."""

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Script:
        with self._lock:
            number = next(self._numbers)
        text = json.dumps(request.body)
        follow_up = any(key in text for key in ('"tool_call_id"', '"function_call_output"', '"tool_result"'))
        ids = (f"call_{number}_a", f"call_{number}_b")
        if request.path.endswith("/chat/completions"):
            if follow_up:
                return Script(events=C.finished(C.chunk(content="done"), finish_reason="stop"))
            return Script(
                events=C.finished(
                    *(
                        C.chunk(C.fragment(i, call_id, "read_page", '{"page":1}', type="function"))
                        for i, call_id in enumerate(ids)
                    )
                )
            )
        if request.path.endswith("/responses"):
            rid = f"resp_{number}"
            if follow_up:
                return Script(events=R.stream(id=rid), named=True)
            calls = [
                R.call(i, call_id, "read_page", ('{"page":', "1}"), item_id=f"fc_{number}_{i}")
                for i, call_id in enumerate(ids)
            ]
            return Script(events=R.stream(*calls, id=rid), named=True)
        if follow_up:
            return Script(events=M.stream(M.text_block(0, "done"), stop_reason="end_turn"), named=True)
        return Script(
            events=M.stream(*(M.tool_call(i, call_id, "read_page", '{"page":1}') for i, call_id in enumerate(ids))),
            named=True,
        )


@dataclass
class Seen:
    """What one response gave the application: the call ids (in order) and the response id."""

    ids: list[str] = field(default_factory=list)
    response_id: str | None = None

    def read(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind == "response.created":
            self.response_id = event.response.id
        elif kind == "response.output_item.done" and event.item.type == "function_call":
            self.ids.append(event.item.call_id)
        elif kind == "content_block_start" and event.content_block.type == "tool_use":
            self.ids.append(event.content_block.id)
        for choice in getattr(event, "choices", None) or ():
            self.ids.extend(call.id for call in choice.delta.tool_calls or () if call.id)


def first_request(protocol: str) -> dict[str, Any]:
    user = [{"role": "user", "content": FIRST}]
    if protocol.startswith("responses"):
        return {"input": user}
    if protocol == "anthropic":
        return {"messages": user, "max_tokens": 100}
    return {"messages": user}


def follow_up(protocol: str, seen: Seen, answer: list[str]) -> dict[str, Any]:
    """The next request of a conversation: its own calls replayed (or named by id), ``answer`` answered."""
    user = [{"role": "user", "content": FIRST}]
    if protocol == "chat":
        calls = [
            {"id": i, "type": "function", "function": {"name": "read_page", "arguments": '{"page":1}'}}
            for i in seen.ids
        ]
        tools = [{"role": "tool", "tool_call_id": i, "content": "text"} for i in answer]
        return {"messages": [*user, {"role": "assistant", "content": None, "tool_calls": calls}, *tools]}
    outputs = [{"type": "function_call_output", "call_id": i, "output": "text"} for i in answer]
    if protocol == "responses-previous":
        return {"input": outputs, "previous_response_id": seen.response_id}
    if protocol == "responses":
        items = [
            {"type": "function_call", "call_id": i, "name": "read_page", "arguments": '{"page":1}'} for i in seen.ids
        ]
        return {"input": [*user, *items, *outputs]}
    uses = [{"type": "tool_use", "id": i, "name": "read_page", "input": {"page": 1}} for i in seen.ids]
    results = [{"type": "tool_result", "tool_use_id": i, "content": "text"} for i in answer]
    return {
        "messages": [*user, {"role": "assistant", "content": uses}, {"role": "user", "content": results}],
        "max_tokens": 100,
    }


def _create(client: Any, protocol: str) -> Callable[..., Any]:
    if protocol.startswith("responses"):
        return client.responses.create  # type: ignore[no-any-return]
    if protocol == "anthropic":
        return client.messages.create  # type: ignore[no-any-return]
    return client.chat.completions.create  # type: ignore[no-any-return]


def turn(client: Any, protocol: str, request: dict[str, Any]) -> Seen:
    seen = Seen()
    for event in _create(client, protocol)(model="m", stream=True, **request):
        seen.read(event)
    return seen


async def turn_async(client: Any, protocol: str, request: dict[str, Any]) -> Seen:
    seen = Seen()
    async for event in await _create(client, protocol)(model="m", stream=True, **request):
        seen.read(event)
    return seen


def client_of(server: LocalChatServer, protocol: str, mode: str) -> Any:
    if protocol == "anthropic":
        import anthropic

        maker = anthropic.AsyncAnthropic if mode == "async" else anthropic.Anthropic
        return maker(base_url=server.root_url, api_key="t", max_retries=3, timeout=10.0)
    import openai

    maker = openai.AsyncOpenAI if mode == "async" else openai.OpenAI  # type: ignore[assignment]
    return maker(base_url=server.base_url, api_key="t", max_retries=3, timeout=10.0)


def run_concurrent(
    server: LocalChatServer, protocol: str, mode: str, count: int, answer_first_only: bool = False
) -> list[Seen]:
    """``count`` conversations at once, all first requests before any follow-up; what each response gave."""
    client = client_of(server, protocol, mode)

    def answer(seen: Seen) -> list[str]:
        return seen.ids[:1] if answer_first_only else list(seen.ids)

    if mode == "async":

        async def main() -> list[Seen]:
            barrier = asyncio.Barrier(count)

            async def one() -> Seen:
                seen = await turn_async(client, protocol, first_request(protocol))
                await barrier.wait()
                await turn_async(client, protocol, follow_up(protocol, seen, answer(seen)))
                return seen

            return list(await asyncio.gather(*(one() for _ in range(count))))

        return asyncio.run(main())
    barrier = threading.Barrier(count)
    results: list[Seen] = [Seen() for _ in range(count)]

    def one(slot: int) -> None:
        seen = results[slot] = turn(client, protocol, first_request(protocol))
        barrier.wait()
        turn(client, protocol, follow_up(protocol, seen, answer(seen)))

    threads = [threading.Thread(target=one, args=(slot,)) for slot in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.close()
    return results


def figures(captured: Any) -> tuple[int, int]:
    """(violations recorded, ids found answered) over everything captured."""
    violations = captured.metric_sum("etf.integrity.violations")
    answered = sum(
        len(span.attributes.get(A.ETF_LINKAGE_ANSWERED_IDS, ())) for span in captured.spans("assemble_response")
    )
    return violations, answered


def main() -> None:
    from etf_otel.integrations.anthropic import AnthropicInstrumentor
    from etf_otel.integrations.openai import OpenAIInstrumentor

    for protocol in PROTOCOLS:
        for mode in ("sync", "async"):
            with capture() as captured, LocalChatServer(responder=Responder()) as server:
                instrumentor: Any = AnthropicInstrumentor() if protocol == "anthropic" else OpenAIInstrumentor()
                instrumentor.instrument(
                    tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider
                )
                try:
                    run_concurrent(server, protocol, mode, 16)
                finally:
                    instrumentor.uninstrument()
                violations, answered = figures(captured)
                print(f"{protocol:20} {mode:5} violations={violations:3} answered={answered:3}/32")


if __name__ == "__main__":
    main()
