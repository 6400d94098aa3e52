"""The OpenAI Responses API adapter: stream events lowered onto :class:`LifecycleSlots`.

A call opens with ``response.output_item.added``, streams ``function_call_arguments.delta``
events that carry no identity, and closes with ``arguments.done`` and ``output_item.done``.

* **Key and identity.** The key is ``output_index``; the identity is ``item.call_id``, the id
  the next request's ``function_call_output`` answers. The item ``id`` (events' ``item_id``)
  is only a routing alias: it rotates, is shared or ``null`` on some servers, and taking it
  for the identity is a reported bug this adapter must not repeat.
* **Routing.** A valid ``output_index`` wins, whatever an unknown, rotated, ``null`` or shared
  ``item_id`` says, unless that id is the unique alias of a *different* slot (then the event
  is ``unknown_slot``). Without one, the event goes where its ``item_id`` is the unique alias.
* **Other output items** (messages, reasoning, built-in tools) share the numbering but are
  not slots: their keys are remembered, so events sent to them are ignored, not rejected.
* **Ends.** ``completed`` / ``incomplete`` / ``failed`` and the flat ``error`` event; there is
  no ``[DONE]``. The terminal ``response.output`` is a cross-check; ``[]`` or ``null`` is no claim.
* **Finish reasons.** Only a reason the wire states: ``incomplete_details.reason``
  (``max_output_tokens``, ...). ``response.completed`` states none (its ``status`` is an end
  class, which ``etf.stream.state`` carries), and none is invented.

Events are parsed JSON or the ``openai`` SDK's typed events, read with :func:`field` (the SDK is
never imported). Nothing JSON-shaped raises: an event that is not an object, or of a type not
lowered here, is counted in :attr:`ResponsesAssembler.ignored_events` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from etf_otel.core._identity import ABSENT, BODY_WITHOUT_ARGUMENTS, CompatibilityRule, IdentityRules
from etf_otel.core._lifecycle import SCOPE, LifecycleSlots
from etf_otel.core._results import AssemblyResult
from etf_otel.core._slots import DEFAULT_MAX_ARGUMENT_CHARS
from etf_otel.core._validation import resolved_arguments, same_arguments
from etf_otel.core._vocabulary import ResponseEnd, Transition
from etf_otel.protocols._base import field
from etf_otel.protocols._bodies import WHOLE

__all__ = ["NOT_OBJECTS", "ResponsesAssembler"]

_DELTA: Final = "response.function_call_arguments.delta"
_ARGUMENTS_DONE: Final = "response.function_call_arguments.done"
_FUNCTION_CALL: Final = "function_call"

_NO_SLOT: Final = -1
"""What the router returns for an unattributable event, and an alias lookup for an unknown id."""
_SHARED: Final = -2
"""The alias of an item id that several output items carried: it names none of them."""
_MISSING: Final = object()
_SDK_DELTA: Final = frozenset({"type", "output_index", "item_id", "delta"})

NOT_OBJECTS: Final = (str, bytes, bytearray, int, float, list, tuple)
"""JSON values (and the raw SSE payload types) that cannot be an event object."""

_Early = tuple[str, object, object, object]  # a buffered event: (type, item_id, text, name)


class ResponsesAssembler:
    """Assembles one streamed Responses API response; one instance per response.

    Feed every event with :meth:`feed`, then call :meth:`finish` however the stream ended.
    """

    __slots__ = (
        "_aliases",
        "_buffer",
        "_buffer_room",
        "_closed",
        "_done",
        "_ignored",
        "_items",
        "_open",
        "_rid",
        "_slots",
    )

    def __init__(
        self,
        allow: Iterable[CompatibilityRule | str] = (),
        *,
        rules: IdentityRules | None = None,
        clock: Callable[[], int] | None = None,
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    ) -> None:
        if rules is None:
            rules = IdentityRules.for_rules(allow)
        self._slots = LifecycleSlots(rules, clock=clock, max_argument_chars=max_argument_chars)
        self._items: dict[int, bool] = {}
        """What each ``output_index`` holds: a function_call slot (True) or another item (False)."""
        self._aliases: dict[str, int] = {}
        """Item id -> the key of the item that carried it, or :data:`_SHARED`."""
        self._open: dict[int, object] = {}
        """Key -> the slot's item id, while its argument stream is open: the delta fast path."""
        self._buffer: dict[int, list[_Early]] | None = (
            {} if rules.allows(CompatibilityRule.BUFFER_EARLY_DELTAS) else None
        )
        self._buffer_room = max_argument_chars
        """Characters the early events may still hold: buffering is bounded like the arguments."""
        self._done: dict[int, str] | None = {} if rules.allows(CompatibilityRule.DROP_POST_DONE_DELTA) else None
        """Key -> the ``arguments.done`` text, for ``drop_post_done_delta``."""
        self._rid: object = _MISSING
        """The id of the first ``response.created`` (:data:`_MISSING` until one came)."""
        self._closed = False
        """Spliced or finished: later events belong to no response of this assembler."""
        self._ignored = 0

    @property
    def slots(self) -> LifecycleSlots:
        return self._slots

    @property
    def finished(self) -> bool:
        return self._slots.finished

    @property
    def ignored_events(self) -> int:
        """Events that changed nothing: not an object, a type this adapter does not lower
        (``response.in_progress``, text and built-in tool events, unknown types), a repeated
        ``response.created`` of the same response, and every event after a splice or :meth:`finish`."""
        return self._ignored

    def feed(self, event: object) -> None:
        """Apply one event. A delta for an open slot (dict or SDK event) is merged inline: this runs per event."""
        if type(event) is dict:
            kind = event.get("type")
            if kind == _DELTA:
                index: Any = event.get("output_index")
                own = self._open.get(index, _MISSING) if type(index) is int else _MISSING
                if own is not _MISSING and ((item_id := event.get("item_id")) is None or item_id == own):
                    self._slots.delta(index, event.get("delta", ABSENT))  # in _open: its argument stream is open
                    return
        elif event is None or isinstance(event, NOT_OBJECTS):
            self._ignored += 1
            return
        else:
            sdk: Any = event  # the SDK's delta event, read by attribute when all its fields are set
            try:  # anything odd (an AttributeError, a TypeError) takes the generic path
                index = sdk.output_index if sdk.type == _DELTA and _SDK_DELTA <= sdk.__pydantic_fields_set__ else None
                own = self._open.get(index, _MISSING) if type(index) is int else _MISSING
                fast = own is not _MISSING and ((item_id := sdk.item_id) is None or item_id == own)
                text = sdk.delta if fast else _MISSING
            except (AttributeError, TypeError):
                text = _MISSING
            if text is not _MISSING:
                self._slots.delta(index, text)
                return
            kind = field(event, "type")
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None or self._closed:
            self._ignored += 1
            return
        handler(self, event)

    def feed_done(self) -> None:
        """Responses has no end sentinel: only its terminal events end a response."""

    def finish(self) -> AssemblyResult:
        """Finalize the response (idempotent); call it however the stream ended."""
        if not self._closed:
            self._close()
        return self._slots.finish()

    def _close(self) -> None:
        """Stop taking events (spliced or finished): early events no slot opened are
        ``unknown_slot`` now, and the routing state is released with the response."""
        for early in (self._buffer or {}).values():
            for _ in early:
                self._slots.unattributable(SCOPE)
        self._closed = True
        self._items, self._aliases, self._open = {}, {}, {}
        self._buffer = None if self._buffer is None else {}
        self._done = None if self._done is None else {}

    # routing

    def _alias(self, item_id: object, key: int) -> None:
        """Record ``item_id`` as the alias of ``key``; carried by two keys it names neither."""
        if type(item_id) is str and item_id:
            known = self._aliases.get(item_id, key)
            self._aliases[item_id] = key if known == key else _SHARED

    def _route(self, index: object, item_id: object) -> int:
        """The key an event addresses, or :data:`_NO_SLOT` (the routing rules of the module docstring)."""
        alias = self._aliases.get(item_id, _NO_SLOT) if type(item_id) is str else _NO_SLOT
        if type(index) is int and index >= 0:
            if alias >= 0 and alias != index and self._items.get(alias) is True:
                return _NO_SLOT  # the unique alias of a different slot contradicts the index
            return index
        return alias if alias >= 0 else _NO_SLOT

    # events

    def _on_created(self, event: object) -> None:
        """The first start names the response; another one with a different id splices the stream. Only the
        same non-empty id is a repeat: two starts whose ids cannot be compared are two responses as far as
        this assembler can tell, and it observes one."""
        rid = field(field(event, "response"), "id")
        if self._rid is _MISSING:
            self._rid = rid
        elif isinstance(rid, str) and rid and rid == self._rid:
            self._ignored += 1  # the same response announced again
        else:
            self._slots.splice()
            self._close()

    def _on_added(self, event: object) -> None:
        index, item = field(event, "output_index"), field(event, "item")
        function = field(item, "type") == _FUNCTION_CALL
        if type(index) is not int or index < 0:
            if function:  # an opening event with no usable key
                self._slots.unattributable(SCOPE, field(item, "call_id"))
            return
        item_id = field(item, "id")
        self._alias(item_id, index)
        if not function:
            self._items.setdefault(index, False)
            return
        slots = self._slots
        slots.open(index, field(item, "call_id"), field(item, "name"))
        self._items[index] = True
        self._open[index] = None if item_id is ABSENT else item_id
        arguments = field(item, "arguments")
        if arguments is not ABSENT and arguments is not None:
            slots.snapshot(index, arguments, placeholder=arguments == "")
        if self._done:
            self._done.pop(index, None)
        if self._buffer:
            self._flush(index)

    def _on_delta(self, event: object) -> None:
        """The slow path of a delta: routing by item id, rules, and events for no open slot."""
        item_id, text = field(event, "item_id"), field(event, "delta")
        key = self._route(field(event, "output_index"), item_id)
        holds = self._items.get(key)
        if holds:
            self._delta(key, text)
        elif holds is None and not (key >= 0 and self._buffered(key, _DELTA, item_id, text, ABSENT)):
            self._slots.unattributable(SCOPE)
        # else: the key holds another item type, whose events are none of this adapter's business

    def _delta(self, key: int, text: object) -> None:
        if self._done and key not in self._open and self._stray_after_done(key, text):
            self._slots.admitted(key, Transition.DROP_LATE)
        else:
            self._slots.delta(key, text)  # merged, or unknown_slot when the argument stream is closed

    def _stray_after_done(self, key: int, text: object) -> bool:
        """``drop_post_done_delta``'s precondition: arguments that equal the ``arguments.done``
        snapshot, and a delta that would change them (a non-empty string)."""
        done = self._done.get(key) if self._done else None
        slot = self._slots.slot(key)
        if done is None or slot is None or type(text) is not str or not text:
            return False
        return same_arguments(resolved_arguments(slot)[0], done)

    def _on_arguments_done(self, event: object) -> None:
        item_id, arguments, name = field(event, "item_id"), field(event, "arguments"), field(event, "name")
        key = self._route(field(event, "output_index"), item_id)
        holds = self._items.get(key)
        if holds:
            self._arguments_done(key, arguments, name)
        elif holds is None and not (key >= 0 and self._buffered(key, _ARGUMENTS_DONE, item_id, arguments, name)):
            self._slots.unattributable(SCOPE)

    def _arguments_done(self, key: int, arguments: object, name: object) -> None:
        """A claim of the whole arguments, the name if it carries one, and the argument stream's close."""
        slots = self._slots
        if not slots.is_open(key):
            slots.unattributable(SCOPE)
            return
        if arguments is not ABSENT and arguments is not None:
            slots.snapshot(key, arguments)
        if name is not ABSENT and name is not None:
            slots.ident(key, ABSENT, name)
        slots.close_arguments(key)
        self._open.pop(key, None)
        if self._done is not None and type(arguments) is str:
            self._done[key] = arguments

    def _on_item_done(self, event: object) -> None:
        """The slot's last identity event: call_id and name again, a snapshot, its status, the close."""
        item = field(event, "item")
        if field(item, "type") != _FUNCTION_CALL:
            return
        call_id = field(item, "call_id")
        key = self._route(field(event, "output_index"), field(item, "id"))
        slots = self._slots
        if self._items.get(key) is not True or not slots.is_open(key):
            slots.unattributable(SCOPE, call_id)
            return
        slots.ident(key, call_id, field(item, "name"))
        arguments = field(item, "arguments")
        if arguments is not ABSENT and arguments is not None:
            slots.snapshot(key, arguments)
        elif arguments is ABSENT and type(event) is dict and event.get(WHOLE) is True:  # a body's call: no key
            slots.snapshot(key, BODY_WITHOUT_ARGUMENTS)
        if field(item, "status") == "incomplete":
            slots.mark_incomplete(key)
        slots.close_slot(key)
        self._open.pop(key, None)

    def _on_completed(self, event: object) -> None:
        self._end(event, ResponseEnd.COMPLETE)

    def _on_incomplete(self, event: object) -> None:
        reason = field(field(field(event, "response"), "incomplete_details"), "reason")
        if isinstance(reason, str) and reason:
            self._slots.finish_reason(SCOPE, reason)
        self._end(event, ResponseEnd.INCOMPLETE)

    def _on_failed(self, event: object) -> None:
        self._slots.end(ResponseEnd.FAILED)

    def _end(self, event: object, how: ResponseEnd) -> None:
        """A proper end, and the ``function_call`` items of ``response.output`` as the final snapshot."""
        self._slots.end(how)
        output = field(field(event, "response"), "output")
        if isinstance(output, list):
            calls = [
                (field(item, "call_id"), field(item, "name"), field(item, "arguments"))
                for item in output
                if field(item, "type") == _FUNCTION_CALL
            ]
            if output:  # an empty list is no claim (the ChatGPT Codex backend sends []); items without calls claim none
                self._slots.final_snapshot(calls)

    # buffer_early_deltas

    def _buffered(self, key: int, kind: str, item_id: object, text: object, name: object) -> bool:
        """Keep an early event for ``key`` when the rule is on and the buffer has room."""
        buffer = self._buffer
        if buffer is None:
            return False
        self._buffer_room -= 1 + (len(text) if type(text) is str else 0) + (len(name) if type(name) is str else 0)
        if self._buffer_room < 0:
            return False
        buffer.setdefault(key, []).append((kind, item_id, text, name))
        return True

    def _flush(self, key: int) -> None:
        """Apply the early events of the slot ``key`` just opened, in arrival order. One whose ``item_id``
        is the unique alias of another slot contradicts this one: it stays unattributable."""
        for kind, item_id, text, name in self._buffer.pop(key, ()) if self._buffer else ():
            if self._route(key, item_id) != key:
                self._slots.unattributable(SCOPE)
                continue
            self._slots.admitted(key, Transition.BUFFER_EARLY, applied_next=kind == _DELTA)
            if kind == _DELTA:
                self._delta(key, text)
            else:
                self._arguments_done(key, text, name)


_HANDLERS: Final[dict[str, Callable[[ResponsesAssembler, object], None]]] = {
    "response.created": ResponsesAssembler._on_created,
    "response.output_item.added": ResponsesAssembler._on_added,
    _DELTA: ResponsesAssembler._on_delta,
    _ARGUMENTS_DONE: ResponsesAssembler._on_arguments_done,
    "response.output_item.done": ResponsesAssembler._on_item_done,
    "response.completed": ResponsesAssembler._on_completed,
    "response.incomplete": ResponsesAssembler._on_incomplete,
    "response.failed": ResponsesAssembler._on_failed,
    "error": ResponsesAssembler._on_failed,
}
"""The event types this adapter lowers; every other type is ignored (and counted)."""
