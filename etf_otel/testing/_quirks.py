# long: data only, the named quirk streams of three wire protocols side by side
"""The named streams of the quirks tables, one mapping per wire protocol.

Each stream is what a real provider, gateway or bridge has been seen to send (or a clean
control); ``scripts/quirks_table.py`` runs every one through the identity rules and
through the SDK assemblers people use, and ``docs/quirks.md`` is the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import Any, Final

from etf_otel import protocols
from etf_otel.protocols import ANTHROPIC_MESSAGES, BEDROCK_CONVERSE, CHAT_COMPLETIONS, GEMINI, RESPONSES, WireProtocol
from etf_otel.testing import anthropic as a
from etf_otel.testing import chat
from etf_otel.testing import responses as r
from etf_otel.testing._bedrock_quirks import BEDROCK_QUIRK_STREAMS
from etf_otel.testing._gemini_quirks import GEMINI_QUIRK_STREAMS
from etf_otel.testing._ollama_quirks import OLLAMA_QUIRK_STREAMS
from etf_otel.testing._wire import MISSING

__all__ = [
    "ANTHROPIC_QUIRK_STREAMS",
    "BEDROCK_QUIRK_STREAMS",
    "GEMINI_QUIRK_STREAMS",
    "OLLAMA_QUIRK_STREAMS",
    "QUIRK_STREAMS",
    "QUIRK_TABLES",
    "RESPONSES_QUIRK_STREAMS",
    "register_quirk_table",
    "unregister_quirk_table",
]

_chunk = partial(chat.chunk, id="chatcmpl-quirk", model="quirk", created=1)
_fragment = chat.fragment


def _finished(*chunks: dict[str, Any]) -> list[object]:
    return [*chunks, _chunk(finish_reason="tool_calls"), chat.DONE]


QUIRK_STREAMS: dict[str, list[object]] = {
    "clean multi-call stream": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":'), _fragment(1, "call_2", "get_b", '{"b":')),
        _chunk(_fragment(0, arguments="1}"), _fragment(1, arguments="2}")),
    ),
    "null continuations": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, None, arguments="1}"))
    ),
    "repeated ids": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, "call_1", arguments="1}"))
    ),
    "repeated names": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, name="get_a", arguments="1}"))
    ),
    "conflicting ids": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, "call_2", arguments="1}"))
    ),
    "all calls on index 0": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":1}')), _chunk(_fragment(0, "call_2", "get_b", '{"b":2}'))
    ),
    "first index 1": _finished(_chunk(_fragment(1, "call_1", "get_a", '{"a":')), _chunk(_fragment(1, arguments="1}"))),
    "type: null": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":', type="function")),
        _chunk(_fragment(0, arguments="1}", type=None)),
    ),
    "cut mid-arguments": [
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')),
        _chunk(_fragment(0, arguments='"x')),
    ],
    'empty-string continuations (id: "")': _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, "", arguments="1}"))
    ),
    "no id at all": _finished(_chunk(_fragment(0, name="get_a", arguments='{"a":1}'))),
    "initial null id": _finished(
        _chunk(_fragment(0, None, "get_a", '{"a":')), _chunk(_fragment(0, "call_1", arguments="1}"))
    ),
    "missing index": _finished(_chunk(_fragment(MISSING, "call_1", "get_a", '{"a":1}'))),
    "arguments not a string": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, arguments=1))
    ),
    'finish_reason "length"': [
        _chunk(_fragment(0, "call_1", "get_a", '{"a":1}')),
        _chunk(finish_reason="length"),
        chat.DONE,
    ],
}
"""Named recorded responses, one per quirk (the rows of the quirks table)."""


# --- OpenAI Responses quirk streams ------------------------------------------------------------


_RESPONSE_ID = "resp_quirk"


def _r_item(
    call_id: Any = "call_1", name: str = "get_a", arguments: str = "", item_id: str = "fc_1", status: str = "completed"
) -> dict[str, Any]:
    return r.function_call(call_id, name, arguments, id=item_id, status=status)


def _r_added(index: int, call_id: Any, name: str, item_id: str) -> dict[str, Any]:
    return r.added(index, call_id=call_id, name=name, arguments="", id=item_id, status="in_progress")


def _r_delta(index: int, text: str, item_id: str = "fc_1") -> dict[str, Any]:
    return r.delta(index, text, item_id)


def _r_arguments_done(index: int, arguments: str, item_id: str = "fc_1") -> dict[str, Any]:
    return r.arguments_done(index, arguments, item_id)


def _r_item_done(index: int, call_id: Any, name: str, arguments: str, item_id: str = "fc_1") -> dict[str, Any]:
    return r.item_done(index, call_id=call_id, name=name, arguments=arguments, id=item_id)


def _r_call(
    index: int, call_id: str, name: str, pieces: Sequence[str], item_id: str, *, added_call_id: Any = MISSING
) -> list[dict[str, Any]]:
    """One call as the official API streams it: added (``""`` arguments), deltas, both done events."""
    whole = "".join(pieces)
    return [
        _r_added(index, call_id if added_call_id is MISSING else added_call_id, name, item_id),
        *(_r_delta(index, piece, item_id) for piece in pieces),
        _r_arguments_done(index, whole, item_id),
        _r_item_done(index, call_id, name, whole, item_id),
    ]


def _responses(*events: dict[str, Any] | list[dict[str, Any]], end: dict[str, Any] | None) -> list[object]:
    """``response.created``, the events, then ``end`` (none: the stream is cut); sequence numbers in order."""
    return list(r.stream(*events, end=end, id=_RESPONSE_ID))


def _r_completed(*items: dict[str, Any]) -> dict[str, Any]:
    return r.completed(list(items), id=_RESPONSE_ID)


_CALL_A: Final = _r_item("call_1", "get_a", '{"a":1}', "fc_1")
_CALL_B: Final = _r_item("call_2", "get_b", '{"b":2}', "fc_2")

RESPONSES_QUIRK_STREAMS: dict[str, list[object]] = {
    "clean multi-call stream": _responses(
        _r_call(0, "call_1", "get_a", ['{"a":', "1}"], "fc_1"),
        _r_call(1, "call_2", "get_b", ['{"b":', "2}"], "fc_2"),
        end=_r_completed(_CALL_A, _CALL_B),
    ),
    "interleaved calls": _responses(
        _r_added(0, call_id="call_1", name="get_a", item_id="fc_1"),
        _r_added(1, call_id="call_2", name="get_b", item_id="fc_2"),
        _r_delta(0, '{"a":'),
        _r_delta(1, '{"b":', "fc_2"),
        _r_delta(0, "1}"),
        _r_delta(1, "2}", "fc_2"),
        _r_item_done(0, call_id="call_1", name="get_a", arguments='{"a":1}'),
        _r_item_done(1, call_id="call_2", name="get_b", arguments='{"b":2}', item_id="fc_2"),
        end=_r_completed(_CALL_A, _CALL_B),
    ),
    "done events only (no deltas)": _responses(
        _r_call(0, "call_1", "get_a", [], "fc_1")[:1],
        _r_arguments_done(0, '{"a":1}'),
        _r_item_done(0, call_id="call_1", name="get_a", arguments='{"a":1}'),
        end=_r_completed(_CALL_A),
    ),
    "call_id changed in response.completed": _responses(
        _r_call(0, "call_1", "get_a", ['{"a":1}'], "fc_1"),
        end=_r_completed(_r_item("call_9", "get_a", '{"a":1}', "fc_1")),
    ),
    "call_id changed in output_item.done": _responses(
        _r_call(0, "call_9", "get_a", ['{"a":1}'], "fc_1", added_call_id="call_1"),
        end=_r_completed(_r_item("call_9", "get_a", '{"a":1}', "fc_1")),
    ),
    'empty call_id ("") on output_item.added': _responses(
        _r_call(0, "call_1", "get_a", ['{"a":1}'], "fc_1", added_call_id=""),
        end=_r_completed(_CALL_A),
    ),
    "item id rotated (call_id kept)": _responses(
        _r_added(0, call_id="call_1", name="get_a", item_id="fc_1"),
        _r_delta(0, '{"a":1}', "fc_2"),
        _r_item_done(0, call_id="call_1", name="get_a", arguments='{"a":1}', item_id="fc_3"),
        end=_r_completed(_r_item("call_1", "get_a", '{"a":1}', "fc_3")),
    ),
    "contradicting done events": _responses(
        _r_added(0, call_id="call_1", name="get_a", item_id="fc_1"),
        _r_delta(0, '{"a":1}'),
        _r_arguments_done(0, '{"a":2}'),
        _r_item_done(0, call_id="call_1", name="get_a", arguments='{"a":3}'),
        end=_r_completed(_r_item("call_1", "get_a", '{"a":4}', "fc_1")),
    ),
    "delta before output_item.added": _responses(
        _r_delta(0, '{"a":'),
        _r_added(0, call_id="call_1", name="get_a", item_id="fc_1"),
        _r_delta(0, "1}"),
        _r_arguments_done(0, '{"a":1}'),
        _r_item_done(0, call_id="call_1", name="get_a", arguments='{"a":1}'),
        end=_r_completed(_CALL_A),
    ),
    "delta for an unknown output_index": _responses(
        _r_added(0, call_id="call_1", name="get_a", item_id="fc_1"),
        _r_delta(0, '{"a":'),
        _r_delta(1, "1}"),
        end=_r_completed(_CALL_A),
    ),
    "stray delta after arguments.done": _responses(
        _r_added(0, call_id="call_1", name="get_a", item_id="fc_1"),
        _r_delta(0, '{"a":1}'),
        _r_arguments_done(0, '{"a":1}'),
        _r_delta(0, "}"),
        _r_item_done(0, call_id="call_1", name="get_a", arguments='{"a":1}'),
        end=_r_completed(_CALL_A),
    ),
    "output_index reused by a second call": _responses(
        _r_added(0, call_id="call_1", name="get_a", item_id="fc_1"),
        _r_delta(0, '{"a":1}'),
        _r_added(0, call_id="call_2", name="get_b", item_id="fc_2"),
        _r_delta(0, '{"b":2}', "fc_2"),
        end=_r_completed(_CALL_A, _CALL_B),
    ),
    "response.completed with empty output": _responses(
        _r_call(0, "call_1", "get_a", ['{"a":1}'], "fc_1"), end=_r_completed()
    ),
    "no output_item.done": _responses(
        _r_added(0, call_id="call_1", name="get_a", item_id="fc_1"),
        _r_delta(0, '{"a":1}'),
        _r_arguments_done(0, '{"a":1}'),
        end=_r_completed(_CALL_A),
    ),
    "cut mid-arguments": _responses(
        _r_added(0, call_id="call_1", name="get_a", item_id="fc_1"), _r_delta(0, '{"a":"x'), end=None
    ),
    "response.incomplete (max_output_tokens)": _responses(
        _r_added(0, call_id="call_1", name="get_a", item_id="fc_1"),
        _r_delta(0, '{"a":1}'),
        end=r.incomplete(
            "max_output_tokens", [_r_item("call_1", "get_a", '{"a":1}', status="incomplete")], _RESPONSE_ID
        ),
    ),
    "second response.created (spliced)": _responses(
        _r_call(0, "call_1", "get_a", ['{"a":1}'], "fc_1"),
        r.created("resp_other"),
        end=_r_completed(_CALL_A),
    ),
}
"""Named recorded Responses API responses, one per quirk (the rows of the Responses quirks table)."""


# --- Anthropic Messages quirk streams ----------------------------------------------------------


_a_tool = partial(a.tool_use, "toolu_1", "get_a")
_a_block_start = a.block_start
_a_delta = a.json_delta
_a_stop = a.block_stop
_A_MESSAGE_STOP: Final = a.message_stop()


def _a_start(
    content: Sequence[dict[str, Any]] = (), stop_reason: str | None = None, id: str = "msg_quirk"
) -> dict[str, Any]:
    return a.message_start(id, content, stop_reason, model="quirk")


def _a_call(index: int, id: str, name: str, pieces: Sequence[str], input: Any = a.PLACEHOLDER) -> list[dict[str, Any]]:
    return a.tool_call(index, id, name, *pieces, input=input)


def _messages(
    *events: dict[str, Any] | list[dict[str, Any]], stop_reason: str | None = "tool_use", message_stop: bool = True
) -> list[object]:
    """``message_start``, the events, then ``message_delta`` with ``stop_reason`` and ``message_stop``."""
    reason = MISSING if stop_reason is None else stop_reason
    return list(a.stream(*events, stop_reason=reason, stop=message_stop, message_id="msg_quirk", model="quirk"))


ANTHROPIC_QUIRK_STREAMS: dict[str, list[object]] = {
    "clean multi-call stream": _messages(
        _a_block_start(0, {"type": "text", "text": ""}),
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
        _a_stop(0),
        _a_call(1, "toolu_1", "get_a", ['{"a":', "1}"]),
        _a_call(2, "toolu_2", "get_b", ['{"b":', "2}"]),
    ),
    "parameter cut by max_tokens (input {})": _messages(_a_call(0, "toolu_1", "get_a", []), stop_reason="max_tokens"),
    "stop_reason without message_stop": _messages(_a_call(0, "toolu_1", "get_a", ['{"a":1}']), message_stop=False),
    "cut mid-arguments": _messages(
        _a_block_start(0, _a_tool()), _a_delta(0, '{"a":"x'), stop_reason=None, message_stop=False
    ),
    "block index reused by a second call": _messages(
        _a_call(0, "toolu_1", "get_a", ['{"a":1}']), _a_call(0, "toolu_2", "get_b", ['{"b":2}'])
    ),
    "delta after content_block_stop": _messages(
        _a_block_start(0, _a_tool()), _a_delta(0, '{"a":1'), _a_stop(0), _a_delta(0, ',"b":2}')
    ),
    "delta for an unknown index": _messages(
        _a_block_start(0, _a_tool()), _a_delta(0, '{"a":'), _a_delta(1, "1}"), _a_stop(0)
    ),
    "first tool block at index 1": _messages(_a_call(1, "toolu_1", "get_a", ['{"a":1}'])),
    "trailing text after the object": _messages(_a_call(0, "toolu_1", "get_a", ['{"a":1}', "}"])),
    "complete input at block start, no deltas": _messages(_a_block_start(0, _a_tool(input={"a": 1})), _a_stop(0)),
    "input at block start contradicts the deltas": _messages(_a_call(0, "toolu_1", "get_a", ['{"a":2}'], {"a": 1})),
    "tool_use prepopulated in message_start": [
        _a_start([_a_tool(input={"a": 1})], stop_reason="tool_use"),
        _A_MESSAGE_STOP,
    ],
    "second message_start (spliced)": _messages(
        _a_call(0, "toolu_1", "get_a", ['{"a":1}']),
        _a_start(id="msg_other"),
        _a_call(0, "toolu_2", "get_b", ['{"b":2}']),
    ),
}
"""Named recorded Anthropic Messages streams, one per quirk (the rows of the Anthropic quirks table)."""

_TABLES: dict[str, Mapping[str, list[object]]] = {
    CHAT_COMPLETIONS.name: QUIRK_STREAMS,
    RESPONSES.name: RESPONSES_QUIRK_STREAMS,
    ANTHROPIC_MESSAGES.name: ANTHROPIC_QUIRK_STREAMS,
    GEMINI.name: GEMINI_QUIRK_STREAMS,
    BEDROCK_CONVERSE.name: BEDROCK_QUIRK_STREAMS,
    "ollama": OLLAMA_QUIRK_STREAMS,
}
_BUILT_IN: Final = frozenset(_TABLES)

QUIRK_TABLES: Final[Mapping[str, Mapping[str, list[object]]]] = MappingProxyType(_TABLES)
"""The quirk streams of each protocol by its name, each table's rows in order (a live, read-only
view: :func:`register_quirk_table` adds the table of a protocol registered from outside)."""


def register_quirk_table(protocol: WireProtocol | str, streams: Mapping[str, list[object]]) -> None:
    """Give a registered protocol its quirks table: ``scripts/quirks_table.py`` then writes it.

    ``ValueError`` when the protocol is not registered or already has a table.
    """
    name = protocols.get(protocol).name
    if name in _TABLES:
        raise ValueError(f"protocol {name!r} already has a quirks table")
    _TABLES[name] = MappingProxyType(dict(streams))


def unregister_quirk_table(protocol: WireProtocol | str) -> None:
    """Remove a table :func:`register_quirk_table` added; ``ValueError`` for a built-in or a missing one."""
    name = protocol.name if isinstance(protocol, WireProtocol) else protocol
    if name in _BUILT_IN or name not in _TABLES:
        raise ValueError(f"protocol {name!r} has no quirks table that can be removed")
    del _TABLES[name]
