"""A scripted model that asks for several rounds of tool calls before it answers in text.

:func:`~etf_otel.testing._scripted.tool_turn_responder` answers in text as soon as a request carries a
tool result, so a framework's loop ends after one round. Real agents go round several times, and
what their later requests carry is what a follow-up's judgement must get right (AGENT-STACKS 11.6):
a stateless history repeats every earlier call and result, a ``previous_response_id`` chain sends
only the newest results. :func:`tool_rounds_responder` plays a model that proposes ``rounds[0]``,
then ``rounds[1]`` once the request answers the first round, and so on, then the text.

The round a request is at is read from the ids of the results it carries: every call id this
responder makes says its round (``call_0007r2c1``: the 7th response, round 2, call 1), so a
request whose newest result answers round ``k`` gets round ``k + 1``, whether it repeats the whole
history or continues a stored response. Ids are unique per response, as real providers make them.
Chat Completions, Responses, Anthropic Messages and Bedrock Converse, streamed when the request asks
for a stream (Converse: its ``/converse-stream`` path), else as one complete body. Gemini (its path says
whether it streams) has positional identity and may send no ids at all, so its round is read from the
history instead: the ``model`` turns with ``functionCall`` parts the request carries (``gemini_ids``:
the calls carry ids, as Gemini 3 sends them; else none, as Gemini 2.x and Vertex AI send them).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, TypeAlias

from etf_otel.protocols import ANTHROPIC_MESSAGES, BEDROCK_CONVERSE, CHAT_COMPLETIONS, GEMINI, RESPONSES
from etf_otel.testing import anthropic as a
from etf_otel.testing import bedrock as b
from etf_otel.testing import chat
from etf_otel.testing import gemini as g
from etf_otel.testing import responses as r
from etf_otel.testing._scripted import ANSWER, _protocol_of, _typed
from etf_otel.testing._server import RecordedRequest, Responder, Script

__all__ = ["Round", "round_of", "tool_rounds_responder"]

Round: TypeAlias = Sequence[tuple[str, Mapping[str, Any]]]
"""The calls of one round, proposed together: ``(name, arguments)`` each."""

_ROUND: Final = re.compile(r"r(\d+)c\d+$")
_RESPONSES: Final = itertools.count(1)
"""Numbers every response of the process: ids never repeat, across responders and servers."""


def round_of(call_id: object) -> int | None:
    """The round a call id of this responder was proposed in (``None`` for any other id)."""
    found = _ROUND.search(call_id) if isinstance(call_id, str) else None
    return int(found.group(1)) if found else None


def _result_ids(protocol: str, body: Mapping[str, Any]) -> Iterator[object]:
    """The call id of every tool result the request carries, wherever it stands."""
    if protocol == RESPONSES.name:
        items = body.get("input")
        for item in items if isinstance(items, list) else ():
            if _typed(item, "function_call_output"):
                yield item.get("call_id")
        return
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, Mapping):
            continue
        if message.get("role") == "tool":
            yield message.get("tool_call_id")
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if _typed(block, "tool_result"):
                yield block.get("tool_use_id")
            elif isinstance(block, Mapping) and isinstance(block.get("toolResult"), Mapping):
                yield block["toolResult"].get("toolUseId")


_SERVED: Final = (CHAT_COMPLETIONS.name, RESPONSES.name, ANTHROPIC_MESSAGES.name, BEDROCK_CONVERSE.name, GEMINI.name)
_PREFIXES: Final = {ANTHROPIC_MESSAGES.name: "toolu", BEDROCK_CONVERSE.name: "tooluse"}


def _calls(protocol: str, n: int, round_number: int, calls: Round) -> list[tuple[str, str, str]]:
    prefix = _PREFIXES.get(protocol, "call")
    return [
        (f"{prefix}_{n:04d}r{round_number}c{i + 1}", name, json.dumps(arguments, separators=(",", ":")))
        for i, (name, arguments) in enumerate(calls)
    ]


def _halves(text: str) -> tuple[str, str]:
    return text[: len(text) // 2], text[len(text) // 2 :]


def _streamed(protocol: str, n: int, calls: list[tuple[str, str, str]], text: str) -> list[Any]:
    if protocol == CHAT_COMPLETIONS.name:
        if not calls:
            return chat.finished(chat.chunk(content=text, id=f"chatcmpl-{n}"), finish_reason="stop", id=f"chatcmpl-{n}")
        chunks = []
        for i, (call_id, name, arguments) in enumerate(calls):
            first, rest = _halves(arguments)
            chunks.append(chat.chunk(chat.fragment(i, call_id, name, first, type="function"), id=f"chatcmpl-{n}"))
            chunks.append(chat.chunk(chat.fragment(i, arguments=rest), id=f"chatcmpl-{n}"))
        return chat.finished(*chunks, id=f"chatcmpl-{n}")
    if protocol == RESPONSES.name:
        if not calls:
            message = {**r.message_item(f"msg_{n}", text), "status": "completed"}
            part = {"type": "output_text", "text": "", "annotations": []}
            opened = {"type": "response.content_part.added", "item_id": f"msg_{n}", "output_index": 0,
                      "content_index": 0, "part": part}  # fmt: skip
            events = [r.added(0, item=r.message_item(f"msg_{n}")), opened, r.text_delta(0, text, f"msg_{n}")]
            return r.stream(
                *events, r.item_done(0, item=message), end=r.completed([message], f"resp_{n}"), id=f"resp_{n}"
            )
        pieces, items = [], []
        for i, (call_id, name, arguments) in enumerate(calls):
            pieces.append(r.call(i, call_id, name, _halves(arguments), f"fc_{n}_{i + 1}"))
            items.append(r.function_call(call_id, name, arguments, f"fc_{n}_{i + 1}", "completed"))
        return r.stream(*pieces, end=r.completed(items, f"resp_{n}"), id=f"resp_{n}")
    if protocol == BEDROCK_CONVERSE.name:
        if not calls:
            return b.stream(stop_reason="end_turn", text=text)
        return b.stream(*(b.tool_call(i, *call[:2], "", *_halves(call[2])) for i, call in enumerate(calls)), text=None)
    if not calls:
        return a.stream(a.text_block(0, text), stop_reason="end_turn", message_id=f"msg_{n}")
    blocks = [a.tool_call(i, call_id, name, *_halves(arguments)) for i, (call_id, name, arguments) in enumerate(calls)]
    return a.stream(*blocks, message_id=f"msg_{n}")


def _body(protocol: str, n: int, calls: list[tuple[str, str, str]], text: str) -> dict[str, Any]:
    if protocol == CHAT_COMPLETIONS.name:
        message: dict[str, Any] = {"role": "assistant", "content": None if calls else text}
        if calls:
            message["tool_calls"] = [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                for call_id, name, arguments in calls
            ]
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
    if protocol == RESPONSES.name:
        output = [
            r.function_call(call_id, name, arguments, f"fc_{n}_{i + 1}", "completed")
            for i, (call_id, name, arguments) in enumerate(calls)
        ] or [{**r.message_item(f"msg_{n}", text), "status": "completed"}]
        return r.response(f"resp_{n}", "completed", output)
    if protocol == BEDROCK_CONVERSE.name:
        if not calls:
            return b.body(stop_reason="end_turn", text=text)
        calls_made = (b.tool_use(call_id, name, json.loads(arguments)) for call_id, name, arguments in calls)
        return b.body(*calls_made, text=None)
    content = [
        {"type": "tool_use", "id": call_id, "name": name, "input": json.loads(arguments)}
        for call_id, name, arguments in calls
    ] or [{"type": "text", "text": text}]
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _gemini(n: int, calls: list[tuple[str, str, str]], text: str, ids: bool, streamed: bool) -> list[Any]:
    """The Gemini turn: each call a whole ``functionCall`` part (its own chunk when streamed), or the text."""
    response_id = f"resp-gemini-{n}"
    if not calls:
        if streamed:
            chunks = [g.chunk(g.text(half), response_id=response_id) for half in _halves(text)]
            return [*chunks, g.chunk(finish_reason="STOP", response_id=response_id)]
        return [g.chunk(g.text(text), finish_reason="STOP", response_id=response_id)]
    parts = [
        g.call(name, json.loads(arguments), id=call_id if ids else g.MISSING) for call_id, name, arguments in calls
    ]
    if streamed:
        chunks = [g.chunk(part, response_id=response_id) for part in parts]
        return [*chunks, g.chunk(finish_reason="STOP", response_id=response_id)]
    return [g.chunk(*parts, finish_reason="STOP", response_id=response_id)]


def _call_turns(protocol: str, body: Mapping[str, Any]) -> int:
    """How many assistant turns with calls the request's history carries (a run of ``function_call`` items
    is one turn; Gemini: a ``model`` content with ``functionCall`` parts)."""
    if protocol == GEMINI.name:
        contents = body.get("contents")
        return sum(
            1
            for content in (contents if isinstance(contents, list) else ())
            if isinstance(content, Mapping)
            and content.get("role") == "model"
            and any(isinstance(part, Mapping) and "functionCall" in part for part in content.get("parts") or ())
        )
    if protocol == RESPONSES.name:
        items = body.get("input")
        kinds = [item.get("type") if isinstance(item, Mapping) else None for item in items or ()]
        return sum(1 for i, kind in enumerate(kinds) if kind == "function_call" and (i == 0 or kinds[i - 1] != kind))
    turns = 0
    for message in body.get("messages") or ():
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            content = message.get("content")
            blocks = content if isinstance(content, list) else ()
            turns += bool(
                message.get("tool_calls")
                or any(
                    _typed(block, "tool_use") or (isinstance(block, Mapping) and "toolUse" in block) for block in blocks
                )
            )
    return turns


def tool_rounds_responder(
    rounds: Sequence[Round], answer: str = ANSWER, *, reused_ids: bool = False, gemini_ids: bool = False
) -> Responder:
    """A model that proposes ``rounds[k]`` to a request whose newest answered round is ``k`` (none: 0),
    and ``answer`` once every round is answered: streamed when the request asks for a stream, else
    as one complete body. Each call of the first argument split over two pieces of a stream.

    ``reused_ids``: every response numbers its calls ``call_0``, ``call_1``, ... again (Bedrock's
    OpenAI-compatible endpoint does), so the round is read from the history instead: the assistant
    turns with calls it carries, after the round of the response it continues (``previous_response_id``).
    Gemini is always read that way; ``gemini_ids``: its calls carry ids.
    """
    continued: dict[str, int] = {}
    lock = threading.Lock()

    def respond(request: RecordedRequest) -> Script | None:
        protocol, streamed = _protocol_of(request.path)
        body = request.body
        if protocol not in _SERVED or not isinstance(body, Mapping):
            return None
        n = next(_RESPONSES)
        if protocol == GEMINI.name:
            answered = _call_turns(protocol, body)
            calls = _calls(protocol, n, answered + 1, rounds[answered]) if answered < len(rounds) else []
            return Script(events=_gemini(n, calls, answer, gemini_ids, bool(streamed)))
        if reused_ids:
            with lock:
                answered = continued.get(str(body.get("previous_response_id")), 0) + _call_turns(protocol, body)
                continued[f"resp_{n}"] = answered + 1
        else:
            answered = max((k for k in map(round_of, _result_ids(protocol, body)) if k is not None), default=0)
        calls = _calls(protocol, n, answered + 1, rounds[answered]) if answered < len(rounds) else []
        if reused_ids:
            calls = [(f"call_{i}", name, arguments) for i, (_, name, arguments) in enumerate(calls)]
        if not (streamed if protocol == BEDROCK_CONVERSE.name else body.get("stream") is True):
            return Script(body=_body(protocol, n, calls, answer))
        return Script(events=_streamed(protocol, n, calls, answer), named=protocol != CHAT_COMPLETIONS.name)

    return respond
