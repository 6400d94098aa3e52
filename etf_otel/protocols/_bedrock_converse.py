"""The Amazon Bedrock Converse adapter: ``converse_stream`` events lowered onto :class:`LifecycleSlots`.

Events come in the dict form botocore yields (one key, the event type: ``{"contentBlockDelta":
{"contentBlockIndex": 1, "delta": {"toolUse": {"input": "..."}}}}``), or decoded from the raw
``application/vnd.amazon.eventstream`` frames by :mod:`etf_otel.protocols._bedrock_frames`. A
complete ``converse`` body (an object with ``output``) is judged by the same adapter as one event.
SPEC section 13 (BEDROCK.md) has the rules; in short:

* **Slots.** A ``contentBlockStart`` whose ``start.toolUse`` is an object and whose ``type`` is not
  ``server_tool_use`` opens the slot at its ``contentBlockIndex`` with ``toolUseId`` and ``name``,
  and the implicit placeholder ``{}``: a parameterless call streams ``""`` or nothing. A repeated
  start at a call's index is one more identity fragment and re-opens it.
* **Other blocks** (text and reasoning, which start with their first delta; server tools, tool
  results, images, unknown starts) are remembered by index and never judged. One index holds one
  kind of block: a call and anything else at one index is ``unknown_slot``.
* **One block at a time.** A ``delta.toolUse`` joins only the current block, the one most recently
  started, and only while it is an open call; any other one is ``unknown_slot`` (a server tool's
  input is ignored).
* **The end** is decided in :meth:`BedrockConverseAssembler.finish`: a failure frame anywhere fails
  it; otherwise ``messageStop`` ends it, incomplete when its worst ``stopReason`` is not
  ``end_turn``, ``tool_use`` or ``stop_sequence``; without ``messageStop`` it is truncated. A second
  ``messageStart`` splices the stream (``messageStart`` carries no id to compare).

Nothing JSON-shaped makes the adapter raise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from etf_otel.core._identity import ABSENT, IdentityRules
from etf_otel.core._lifecycle import SCOPE, LifecycleSlots
from etf_otel.core._results import AssemblyResult
from etf_otel.core._slots import DEFAULT_MAX_ARGUMENT_CHARS
from etf_otel.core._vocabulary import ResponseEnd

__all__ = [
    "COMPLETE_STOP_REASONS",
    "EVENT_TYPES",
    "STOP_REASONS",
    "BedrockConverseAssembler",
    "assemble",
    "failure",
    "is_body",
]

EVENT_TYPES: Final = frozenset(
    {"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}
)
"""The stream's own event types (each event is an object with exactly one of them as its key)."""

COMPLETE_STOP_REASONS: Final = frozenset({"end_turn", "tool_use", "stop_sequence"})
"""The stop reasons of a proper, complete end; every other value (unknown ones too) is incomplete."""

STOP_REASONS: Final = COMPLETE_STOP_REASONS | frozenset(
    {
        "max_tokens",
        "model_context_window_exceeded",
        "guardrail_intervened",
        "content_filtered",
        "malformed_model_output",
        "malformed_tool_use",
    }
)
"""The ``StopReason`` values of the service model."""

PLACEHOLDER: Final = "{}"
"""Every streamed call's implicit arguments until a piece arrives: Bedrock's own form of "no parameters"."""

SERVER_TOOL: Final = "server_tool_use"

_CALL: Final = 1
_SERVER: Final = 2
_OTHER: Final = 3
"""Block kinds by index: a client call, a server tool (its input deltas ignored), anything else."""

_NOT_A_PIECE: Final = object()
"""An argument piece or a body ``input`` that cannot be arguments: not a string, so they are invalid."""


def failure(kind: str) -> bool:
    """Whether an event type is a failure: an exception frame (``...Exception``) or an error frame."""
    return kind == "error" or kind.endswith("Exception")


def is_body(event: object) -> bool:
    """Whether ``event`` is a complete ``converse`` body (an object with ``output``), not a stream event."""
    return isinstance(event, Mapping) and "output" in event


class BedrockConverseAssembler:
    """Assembles one Converse response; one instance per response.

    Feed every event with :meth:`feed`, then call :meth:`finish`. ``ignored_events`` counts the
    events that changed nothing: not an object with one key, a type this adapter does not lower
    (``metadata`` included), and every event after a splice.
    """

    __slots__ = (
        "_current",
        "_failed",
        "_incomplete",
        "_kinds",
        "_live",
        "_slots",
        "_spliced",
        "_started",
        "_stopped",
        "ignored_events",
    )

    def __init__(
        self,
        *,
        rules: IdentityRules | None = None,
        clock: Callable[[], int] | None = None,
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    ) -> None:
        self._slots = LifecycleSlots(rules, clock=clock, max_argument_chars=max_argument_chars)
        self._kinds: dict[int, int] = {}
        self._current: int | None = None
        """The index of the block most recently started, explicitly or by its first delta."""
        self._live: int | None = None
        """:attr:`_current` when it is a call: the only block argument pieces may join."""
        self._started = False
        self._spliced = False
        self._stopped = False
        self._incomplete = False
        self._failed = False
        self.ignored_events = 0

    @property
    def slots(self) -> LifecycleSlots:
        return self._slots

    @property
    def finished(self) -> bool:
        return self._slots.finished

    def feed(self, event: object) -> None:
        """Apply one event. An argument piece of the current call is the inlined path."""
        if type(event) is dict and len(event) == 1:
            payload: Any = event.get("contentBlockDelta")
            if type(payload) is dict:
                delta = payload.get("delta")
                if type(delta) is dict:
                    piece = delta.get("toolUse")
                    if type(piece) is dict:
                        index = payload.get("contentBlockIndex")
                        if type(index) is int and index == self._live:
                            self._slots.delta(index, piece.get("input", ABSENT))
                            return
        self._event(event)

    def _event(self, event: object) -> None:
        """Every event the inlined path of :meth:`feed` does not take, dispatched by its one key."""
        if self._spliced or not isinstance(event, Mapping):
            self.ignored_events += 1
            return
        if "output" in event:
            self._body(event)
            return
        if len(event) != 1:
            self.ignored_events += 1
            return
        ((kind, payload),) = event.items()
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            handler(self, payload if isinstance(payload, Mapping) else {})
        elif isinstance(kind, str) and failure(kind):
            self._failed = True
        else:
            self.ignored_events += 1

    def _message_start(self, payload: Mapping[str, object]) -> None:
        """Start the response; any second start splices it (``messageStart`` names nothing to compare)."""
        if self._started:
            self._slots.splice()
            self._spliced = True
            self._live = None
        self._started = True

    def _block_start(self, payload: Mapping[str, object]) -> None:
        key = _key(payload.get("contentBlockIndex"))
        start = payload.get("start")
        tool = start.get("toolUse") if isinstance(start, Mapping) else None
        if isinstance(tool, Mapping) and tool.get("type") != SERVER_TOOL:
            self._call_start(key, tool)
            return
        self._other_start(key, _SERVER if isinstance(tool, Mapping) else _OTHER)

    def _call_start(self, key: int | None, tool: Mapping[str, object]) -> None:
        """A call starts at ``key``: it opens (or re-opens) the slot, or names none (``unknown_slot``)."""
        call_id = tool.get("toolUseId", ABSENT)
        if key is None or self._kinds.get(key, _CALL) != _CALL:
            self._slots.unattributable(SCOPE, call_id)
            self._current = self._live = None
            return
        self._kinds[key] = _CALL
        self._slots.open(key, call_id, tool.get("name", ABSENT))
        self._slots.snapshot(key, PLACEHOLDER, placeholder=True)
        self._current = self._live = key

    def _other_start(self, key: int | None, kind: int) -> None:
        """A block that is not a call starts at ``key``; at a call's index it is ``unknown_slot``."""
        if key is None:
            return
        if self._kinds.get(key) == _CALL:
            self._slots.unattributable(SCOPE)
            self._current = self._live = None
            return
        self._kinds[key] = kind
        self._current = key
        self._live = None

    def _block_delta(self, payload: Mapping[str, object]) -> None:
        """A delta the inlined path did not take: not a dict, or not for the current call."""
        key = _key(payload.get("contentBlockIndex"))
        delta = payload.get("delta")
        if not isinstance(delta, Mapping) or not delta or "SDK_UNKNOWN_MEMBER" in delta:
            return  # nothing botocore would hand over as a block's content
        if "toolUse" not in delta:
            if key is not None and key not in self._kinds:
                self._other_start(key, _OTHER)  # text and reasoning blocks start with their first delta
            elif key is not None and self._kinds[key] == _CALL:
                self._slots.unattributable(SCOPE)  # text bolted onto a call's block
            return
        kind = None if key is None else self._kinds.get(key)
        if kind == _SERVER:
            return  # a provider-run tool streams its input too
        if key is not None and kind == _CALL and key == self._current:
            self._slots.delta(key, _piece(delta.get("toolUse")))  # a closed call: unknown_slot there
            return
        self._slots.unattributable(SCOPE)

    def _block_stop(self, payload: Mapping[str, object]) -> None:
        key = _key(payload.get("contentBlockIndex"))
        if key is not None and self._kinds.get(key) == _CALL:
            self._slots.close_slot(key)

    def _message_stop(self, payload: Mapping[str, object]) -> None:
        self._stop(payload.get("stopReason", ABSENT))

    def _stop(self, reason: object) -> None:
        """A proper end; the worst reason wins (a missing or empty one is incomplete)."""
        self._stopped = True
        complete = isinstance(reason, str) and reason in COMPLETE_STOP_REASONS
        if isinstance(reason, str) and reason and (not complete or not self._incomplete):
            self._slots.finish_reason(SCOPE, reason)
        self._incomplete = self._incomplete or not complete

    def _body(self, body: Mapping[str, object]) -> None:
        """A complete ``converse`` body: each client ``toolUse`` block opened whole, its ``input`` the one claim.

        A second response in one stream splices it, as a second ``messageStart`` would.
        """
        self._message_start({})
        if self._spliced:
            return
        output = body.get("output")
        message = output.get("message") if isinstance(output, Mapping) else None
        content = message.get("content") if isinstance(message, Mapping) else None
        for position, block in enumerate(content if isinstance(content, list) else ()):
            tool = block.get("toolUse") if isinstance(block, Mapping) else None
            if isinstance(tool, Mapping) and tool.get("type") != SERVER_TOOL:
                self._kinds[position] = _CALL
                self._slots.open(position, tool.get("toolUseId", ABSENT), tool.get("name", ABSENT))
                self._slots.snapshot(position, _claim(tool.get("input", ABSENT)))
                self._slots.close_slot(position)
        if "stopReason" in body:
            self._stop(body["stopReason"])

    def feed_done(self) -> None:
        """Converse streams have no end sentinel."""

    def finish(self) -> AssemblyResult:
        """Decide how the response ended, now that the stream is over, and finalize (idempotent)."""
        slots = self._slots
        if not slots.finished:
            if self._failed:
                slots.end(ResponseEnd.FAILED)
            elif self._stopped:
                slots.end(ResponseEnd.INCOMPLETE if self._incomplete else ResponseEnd.COMPLETE)
        return slots.finish()


_HANDLERS: Final[dict[str, Callable[[BedrockConverseAssembler, Mapping[str, object]], None]]] = {
    "messageStart": BedrockConverseAssembler._message_start,
    "contentBlockStart": BedrockConverseAssembler._block_start,
    "contentBlockDelta": BedrockConverseAssembler._block_delta,
    "contentBlockStop": BedrockConverseAssembler._block_stop,
    "messageStop": BedrockConverseAssembler._message_stop,
}
"""The events that mean something here; ``metadata`` and unknown types are ignored."""


def _key(index: object) -> int | None:
    """The block index as a slot key; ``None`` when it is missing, not an integer or negative."""
    return index if type(index) is int and index >= 0 else None


def _piece(tool: object) -> object:
    """The argument piece of a ``delta.toolUse``: its ``input``; nothing for ``null``; invalid for a non-object."""
    if isinstance(tool, Mapping):
        return tool.get("input", ABSENT)
    return ABSENT if tool is None else _NOT_A_PIECE


def _claim(value: object) -> object:
    """A body's ``input``: an object as compact JSON text; anything else (missing too) is no arguments."""
    if not isinstance(value, dict):
        return _NOT_A_PIECE
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return _NOT_A_PIECE


def assemble(events: Iterable[object], rules: IdentityRules | None = None) -> AssemblyResult:
    """Assemble a complete recorded stream (or a body) in one call."""
    assembler = BedrockConverseAssembler(rules=rules)
    for event in events:
        assembler.feed(event)
    return assembler.finish()
