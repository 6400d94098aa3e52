"""The Anthropic Messages adapter: stream events lowered onto :class:`LifecycleSlots`.

A tool call is a ``tool_use`` content block: ``content_block_start`` opens the slot at the
block's ``index`` with its identity (``content_block.id``, ``name``) and a snapshot of its
``input``, ``input_json_delta`` deltas carry the argument text, ``content_block_stop``
closes it. The message ends with ``message_stop`` (or, failing that, a ``stop_reason`` on
``message_delta``) or fails with an ``error`` event. docs/protocols.md has the rules;
the choices this adapter makes where they leave room:

* **One message per stream.** A second ``message_start`` with the same non-empty id is
  ignored. Any other second ``message_start`` (another id, or no id to compare), at any
  point of the stream, splices it: the response is truncated, and every later event is
  ignored, because it belongs to a response whose block indexes would land on this one's
  slots (the SDK's own accumulator appends such blocks to the first message).
* **One block at a time.** An argument delta is taken only by the most recently started
  block; a delta for an earlier tool block (interleaving, which Anthropic never emits) is
  ``unknown_slot``, as is one for an index no block started at.
* **Non-tool blocks** (text, thinking, ``server_tool_use``, ``mcp_tool_use``, results, ...)
  are remembered by index so that their deltas, ``input_json_delta`` included, are ignored.
  Reusing an index for a tool block and a non-tool block is ``unknown_slot``: consumers
  that place blocks by position would route the deltas to different blocks.
* **Inputs.** ``{}`` is the placeholder wherever it appears (block start or prepopulated
  content); a non-empty object is a claim, compared as canonical JSON; ``null`` or a
  missing ``input`` states nothing; any other value (a string, a list) is not an object:
  ``invalid_arguments``.
* **The end** is decided in :meth:`AnthropicAssembler.finish`, the only place that knows
  the stream is over: an ``error`` anywhere fails it; otherwise ``message_stop`` or a
  ``stop_reason`` ends it with the class of the last reason; otherwise it is truncated.

Events may be plain dicts (parsed ``data:`` payloads) or the ``anthropic`` SDK's typed
events; the SDK is never imported. Nothing JSON-shaped makes the adapter raise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Final

from etf_otel.core._identity import ABSENT, IdentityRules
from etf_otel.core._lifecycle import SCOPE, LifecycleSlots
from etf_otel.core._results import AssemblyResult
from etf_otel.core._slots import DEFAULT_MAX_ARGUMENT_CHARS
from etf_otel.core._vocabulary import ResponseEnd
from etf_otel.protocols._base import field

__all__ = ["EVENT_TYPES", "INCOMPLETE_STOP_REASONS", "AnthropicAssembler", "assemble"]

EVENT_TYPES: Final = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
    }
)
"""The stream's own event types; ``error`` is left out, as other protocols use it too."""

INCOMPLETE_STOP_REASONS: Final = frozenset({"max_tokens", "model_context_window_exceeded", "refusal", "pause_turn"})
"""Stop reasons saying the output was cut or withheld; every other reason (unknown ones too) is complete."""

PLACEHOLDER: Final = "{}"
"""The ``input`` of a block start that means "nothing yet": it never joins the deltas."""

_SDK_EVENT: Final = ("type", "index", "delta")
_SDK_DELTA: Final = ("type", "partial_json")
"""The fields :meth:`AnthropicAssembler.feed` reads from an SDK delta event and its delta, by attribute."""

_DEFAULTLESS: Final[dict[type, bool]] = {}
"""SDK class -> whether every field the inlined path reads from it is declared without a default.

Then a value in the object's ``__dict__`` came from the payload, or stands for a field the
payload lacked as ``None`` (the ``anthropic`` SDK fills missing fields so) or is missing
(pydantic's ``model_construct``), and the inlined path reads a missing field as it reads
``null``, as the generic path does: asking ``__pydantic_fields_set__`` on every delta (about 800
instructions each) tells nothing more. Learned once per class; a class with a default for
one of them (a value the payload did not carry) always takes the generic path."""

_NOT_AN_OBJECT: Final = object()
"""The snapshot of an ``input`` that is not a JSON object: not a string, so the arguments are invalid."""


class AnthropicAssembler:
    """Assembles one streamed Anthropic message; one instance per response.

    Feed every event with :meth:`feed`, then call :meth:`finish`. ``ignored_events``
    counts the events that changed nothing: not an object, a type this adapter does not
    know (``ping`` included), a repeated ``message_start`` of the same message, and every
    event after a splice.
    """

    __slots__ = (
        "_failed",
        "_kinds",
        "_live",
        "_message_id",
        "_reason",
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
        self._kinds: dict[int, bool] = {}
        """Block index -> whether a ``tool_use`` block started there (``False``: a non-tool block)."""
        self._live: int | None = None
        """The index of the most recently started block when it is a tool block: the only one deltas may join."""
        self._started = False
        self._message_id: object = ABSENT
        self._spliced = False
        self._reason: str | None = None
        self._stopped = False
        self._failed = False
        self.ignored_events = 0

    @property
    def slots(self) -> LifecycleSlots:
        return self._slots

    @property
    def finished(self) -> bool:
        return self._slots.finished

    def feed(self, event: object) -> None:
        """Apply one event. The argument delta of the open tool block (dict or SDK event) is the inlined path."""
        if type(event) is dict:
            if event.get("type") == "content_block_delta":
                delta = event.get("delta")
                if type(delta) is dict and delta.get("type") == "input_json_delta":
                    index: Any = event.get("index")
                    if type(index) is int and index == self._live:
                        self._slots.delta(index, delta.get("partial_json", ABSENT))
                        return
        else:
            try:  # the SDK's delta event, read from its fields (see _DEFAULTLESS); anything odd is generic
                values = event.__dict__
                if values.get("type") == "content_block_delta":
                    kind = type(event)
                    known = _DEFAULTLESS.get(kind)
                    if known is None:
                        known = _learn(kind, _SDK_EVENT)
                    index = values["index"]
                    if known and type(index) is int and index == self._live:
                        part = values["delta"]
                        fields = part.__dict__
                        if fields.get("type") == "input_json_delta":
                            kind = type(part)
                            known = _DEFAULTLESS.get(kind)
                            if known is None:
                                known = _learn(kind, _SDK_DELTA)
                            if known:
                                self._slots.delta(index, fields["partial_json"])
                                return
            except (AttributeError, KeyError, TypeError):
                pass
        self._event(event)

    def _event(self, event: object) -> None:
        """Every event the inlined path of :meth:`feed` does not take, dispatched by its ``type``."""
        kind = field(event, "type")
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None or self._spliced:
            self.ignored_events += 1
        else:
            handler(self, event)

    def _message_start(self, event: object) -> None:
        """Start the response, or splice it when another message starts in the same stream."""
        message = field(event, "message")
        message_id = field(message, "id")
        if self._started:
            if type(message_id) is str and message_id and message_id == self._message_id:
                self.ignored_events += 1  # the same message announced again
            else:
                self._slots.splice()
                self._spliced = True
                self._live = None
            return
        self._started = True
        self._message_id = message_id
        self._stop_reason(field(message, "stop_reason"))
        content = field(message, "content")
        if isinstance(content, list) and content:
            self._live = None  # these blocks start after any block streamed before message_start
            for position, block in enumerate(content):  # prepopulated content: whole blocks, closed at once
                if self._block(position, block):
                    self._slots.close_slot(position)

    def _block_start(self, event: object) -> None:
        key = _key(field(event, "index"))
        self._live = key if self._block(key, field(event, "content_block")) else None

    def _block(self, key: int | None, block: object) -> bool:
        """A block begins at ``key``; returns whether it opened (or re-opened) a tool slot there.

        A ``tool_use`` at a fresh index or at its own earlier index opens the slot (a repeated
        start is an identity fragment for it). A tool block at an unusable index or at the
        index of a non-tool block, or a non-tool block at a tool block's index, names no
        slot: ``unknown_slot``.
        """
        kind = None if key is None else self._kinds.get(key)
        if field(block, "type") != "tool_use":
            if kind:
                self._slots.unattributable(SCOPE)
            elif key is not None:
                self._kinds[key] = False
            return False
        if key is None or kind is False:
            self._slots.unattributable(SCOPE, field(block, "id"))
            return False
        self._kinds[key] = True
        self._slots.open(key, field(block, "id"), field(block, "name"))
        self._input(key, field(block, "input"))
        return True

    def _input(self, key: int, value: object) -> None:
        """The block's ``input``: ``{}`` a placeholder, another object a claim, no object invalid."""
        if value is ABSENT or value is None:
            return
        if not isinstance(value, dict):
            self._slots.snapshot(key, _NOT_AN_OBJECT)
        elif not value:
            self._slots.snapshot(key, PLACEHOLDER, placeholder=True)
        else:
            self._slots.snapshot(key, canonical_json(value))

    def _block_delta(self, event: object) -> None:
        """An argument delta the inlined path did not take: an SDK object, or one for no live tool block."""
        delta = field(event, "delta")
        if field(delta, "type") != "input_json_delta":
            return  # text, thinking, citations, signatures: not arguments
        key = _key(field(event, "index"))
        if key is not None:
            kind = self._kinds.get(key)
            if kind is False:
                return  # a non-tool block's input (server_tool_use streams its input too)
            if kind and key == self._live:
                self._slots.delta(key, field(delta, "partial_json"))
                return
        self._slots.unattributable(SCOPE)  # no block there, or not the block being streamed

    def _block_stop(self, event: object) -> None:
        key = _key(field(event, "index"))
        if key is not None and self._kinds.get(key):
            self._slots.close_slot(key)

    def _message_delta(self, event: object) -> None:
        self._stop_reason(field(field(event, "delta"), "stop_reason"))

    def _stop_reason(self, reason: object) -> None:
        """A non-empty string reason is the pending end reason (the last one wins)."""
        if isinstance(reason, str) and reason:
            self._reason = reason
            self._slots.finish_reason(SCOPE, reason)

    def _message_stop(self, event: object) -> None:
        self._stopped = True

    def _error(self, event: object) -> None:
        self._failed = True

    def feed_done(self) -> None:
        """Anthropic streams have no end sentinel."""

    def finish(self) -> AssemblyResult:
        """Decide how the message ended, now that the stream is over, and finalize (idempotent)."""
        slots = self._slots
        if not slots.finished:
            if self._failed:
                slots.end(ResponseEnd.FAILED)
            elif self._stopped or self._reason is not None:
                incomplete = self._reason in INCOMPLETE_STOP_REASONS
                slots.end(ResponseEnd.INCOMPLETE if incomplete else ResponseEnd.COMPLETE)
        return slots.finish()


_HANDLERS: Final[dict[str, Callable[[AnthropicAssembler, object], None]]] = {
    "message_start": AnthropicAssembler._message_start,
    "content_block_start": AnthropicAssembler._block_start,
    "content_block_delta": AnthropicAssembler._block_delta,
    "content_block_stop": AnthropicAssembler._block_stop,
    "message_delta": AnthropicAssembler._message_delta,
    "message_stop": AnthropicAssembler._message_stop,
    "error": AnthropicAssembler._error,
}
"""The events that mean something here; ``ping`` and unknown types are ignored."""


def _learn(kind: type, names: tuple[str, ...]) -> bool:
    """Whether ``kind`` declares every one of ``names`` without a default (pydantic's ``model_fields``)."""
    declared = getattr(kind, "model_fields", None)
    try:
        known = isinstance(declared, dict) and all(name in declared and declared[name].is_required() for name in names)
    except Exception:  # not pydantic's FieldInfo: nothing is known, the generic path reads it
        known = False
    _DEFAULTLESS[kind] = known
    return known


def _key(index: object) -> int | None:
    """The block index as a slot key; ``None`` when it is missing, not an integer or negative."""
    return index if type(index) is int and index >= 0 else None


def canonical_json(value: dict[object, object]) -> object:
    """``value`` as compact JSON text, or a non-string (invalid arguments) when it is not JSON.

    A parsed payload always serializes; an SDK object built by hand may hold values JSON
    lacks (NaN, sets, cycles, nesting deeper than the recursion limit).
    """
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return _NOT_AN_OBJECT


def assemble(events: Iterable[object], rules: IdentityRules | None = None) -> AssemblyResult:
    """Assemble a complete recorded stream in one call."""
    assembler = AnthropicAssembler(rules=rules)
    for event in events:
        assembler.feed(event)
    return assembler.finish()
