"""The Gemini adapter: ``GenerateContentResponse`` chunks lowered onto :class:`LifecycleSlots`.

Gemini's ``streamGenerateContent`` (Developer API and Vertex AI) sends whole response objects,
each holding ``candidates[k].content.parts``; a tool call is a ``functionCall`` part. The wire
has no per-call key, so this adapter mints one. docs/protocols.md has the rules; in short:

* **Slots.** The key is ``(candidate, call ordinal)``: the n-th call *opened* in that
  candidate, never the part's position inside a chunk (positions restart in every chunk, and
  keying by them merges parallel calls). ``candidate.index`` absent or ``null`` is 0; any
  other value that is no non-negative integer makes the candidate's calls ``missing_index``.
* **Heads and continuations.** A ``functionCall`` with a non-empty ``name``, an ``id`` or an
  ``args`` value is a head; one without ``willContinue: true`` is a whole call (opened and
  closed at once), one with it opens a streamed call that takes *every* later call part of
  its candidate until a part whose ``willContinue`` is not ``true``. A continuation (only
  ``partialArgs``, ``willContinue`` or nothing) with no streamed call open is ``unknown_slot``.
* **Identity.** ``id`` ``null`` and ``""`` are unset (protobuf JSON): the identity table reads
  them as an absent id (``await``, ``keep_omitted``) and the diagnostics keep their kind. A
  candidate any of whose calls established an id is in id mode: its id-less calls are
  ``missing_id``. A candidate without ids is positional: each call's key is its
  identity, its ``id`` stays ``None`` and the transition ``positional`` is counted once per
  call. ``require_call_id`` makes every id-less call ``missing_id``.
* **Arguments** are typed (:mod:`~etf_otel.protocols._gemini_arguments`): a whole ``args``
  object, or ``partialArgs`` leaves; an ``args`` on a part of a streamed call is a snapshot.
* **The end.** There is no sentinel: the response is decided at :meth:`GeminiAssembler.finish`.
  An ``{"error": ...}`` chunk fails it; a second ``responseId`` splices it; otherwise it is
  complete when every candidate got a ``finishReason`` and all were ``STOP``, incomplete when
  any reason (at any time, unknown ones too) was not ``STOP`` or the prompt was blocked, and
  truncated when a candidate never got one.

Chunks are plain dicts (parsed JSON, camelCase keys, or ``model_dump()`` output with snake_case
keys) or the ``google-genai`` SDK's typed objects, read with :func:`field`; the SDK is never
imported. Nothing JSON-shaped makes the adapter raise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum
from typing import Final

from etf_otel.core._identity import ABSENT, DEFAULT_RULES, CompatibilityRule, IdentityRules
from etf_otel.core._lifecycle import LifecycleSlots
from etf_otel.core._results import AssemblyResult
from etf_otel.core._slots import DEFAULT_MAX_ARGUMENT_CHARS
from etf_otel.core._vocabulary import ErrorCategory, ResponseEnd, Transition
from etf_otel.protocols import _gemini_arguments as sdk  # sdk.CALLS[kind]: the SDK classes read inline
from etf_otel.protocols._base import field
from etf_otel.protocols._gemini_arguments import NOT_AN_OBJECT, Leaves, call_parts, canonical_json, read, unset

__all__ = ["COMPLETE_REASON", "GeminiAssembler", "assemble", "call_parts", "finish_reason", "unset"]

COMPLETE_REASON: Final = "STOP"
"""The only finish reason of a whole response; every other one (unknown ones too) is incomplete."""
UNSPECIFIED: Final = frozenset({"", "FINISH_REASON_UNSPECIFIED", "BLOCK_REASON_UNSPECIFIED", "CONTINUATION"})
"""Enum defaults, no reason at all; and ``CONTINUATION``, which says the response goes on in a
further request (the SDK asks for it and clears the reason): followed by the end of the stream,
the response was cut."""
PLACEHOLDER: Final = "{}"
"""The arguments of a call that states none (an unset ``args`` Struct), and ``args: {}`` on a streamed call."""

_NOT_OBJECTS: Final = (str, bytes, bytearray, int, float, list, tuple)


class _Candidate:
    """What one candidate's calls need across chunks."""

    __slots__ = ("ended", "incomplete", "next", "streaming", "whole")

    def __init__(self) -> None:
        self.next = 0
        """The ordinal the next call opened in this candidate gets."""
        self.streaming: int | None = None
        """The ordinal of the open streamed call (at most one)."""
        self.whole: list[tuple[str, str, str, int]] = []
        """Whole calls as (id, name, canonical args, ordinal), for ``drop_repeated_call`` only."""
        self.ended = False
        self.incomplete = False


def _text(value: object) -> str | None:
    """A string enum value (an SDK enum member as its value); ``None`` for anything else or unset."""
    if isinstance(value, Enum):
        value = value.value
    return value if isinstance(value, str) and value not in UNSPECIFIED else None


def finish_reason(candidate: object) -> str | None:
    """The candidate's ``finishReason`` (``None``: unset, the enum default, or not a string)."""
    return _text(read(candidate, "finishReason", "finish_reason"))


class GeminiAssembler:
    """Assembles one streamed Gemini response; one instance per response.

    Feed every chunk with :meth:`feed`, then call :meth:`finish`. ``ignored_events`` counts
    the chunks that changed nothing: not an object, and every chunk after a splice.
    """

    __slots__ = (
        "_blocked",
        "_candidates",
        "_drop_repeats",
        "_failed",
        "_leaves",
        "_max_argument_chars",
        "_not_objects",
        "_require_id",
        "_response_id",
        "_slots",
        "_spliced",
        "ignored_events",
    )

    def __init__(
        self,
        *,
        rules: IdentityRules | None = None,
        clock: Callable[[], int] | None = None,
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    ) -> None:
        given = rules.rules if rules is not None else DEFAULT_RULES
        # protobuf JSON: null and "" ids are unset; the rules given, exactly (a denied default stays denied)
        rules = IdentityRules.for_rules(given, unset_ids=True, deny=DEFAULT_RULES.difference(given))
        self._slots = LifecycleSlots(rules, clock=clock, max_argument_chars=max_argument_chars)
        self._drop_repeats = self._slots.rules.allows(CompatibilityRule.DROP_REPEATED_CALL)
        self._require_id = self._slots.rules.allows(CompatibilityRule.REQUIRE_CALL_ID)
        self._max_argument_chars = max_argument_chars
        self._candidates: dict[int, _Candidate] = {}
        self._leaves: dict[tuple[int, int], Leaves] = {}
        self._not_objects: set[tuple[int, int]] = set()
        """Slots an ``args`` that is no object made invalid: no placeholder stands in for their arguments."""
        self._response_id: str | None = None
        self._spliced = False
        self._failed = False
        self._blocked = False
        self.ignored_events = 0

    @property
    def slots(self) -> LifecycleSlots:
        return self._slots

    @property
    def finished(self) -> bool:
        return self._slots.finished

    def feed(self, event: object) -> None:
        """Apply one ``GenerateContentResponse`` chunk (or an in-band ``{"error": ...}`` object).

        Dicts and the SDK's objects are read inline (this runs once per streamed chunk); any
        other object is read with :func:`field`.
        """
        if self._spliced or self._slots.finished:
            self.ignored_events += 1
            return
        if type(event) is dict:
            if event and next(iter(event)) == "error" and event["error"] is not None:  # see _is_error
                self._failed = True
                return
            response_id = event.get("responseId", ABSENT)
            if response_id is ABSENT:
                response_id = event.get("response_id")
            feedback = event.get("promptFeedback", ABSENT)
            if feedback is ABSENT:
                feedback = event.get("prompt_feedback")
            candidates = event.get("candidates")
        else:
            fields = None
            if sdk.RESPONSES[type(event)]:
                try:
                    values = event.__dict__
                    fields = values["response_id"], values["prompt_feedback"], values["candidates"]
                except (AttributeError, KeyError):  # a field missing from __dict__ (pydantic's model_construct)
                    pass
            if fields is None:
                if isinstance(event, _NOT_OBJECTS) or event is None:
                    self.ignored_events += 1
                    return
                if sdk.is_error(event):
                    self._failed = True
                    return
                fields = (
                    read(event, "responseId", "response_id"),
                    read(event, "promptFeedback", "prompt_feedback"),
                    field(event, "candidates"),
                )
            response_id, feedback, candidates = fields
        if type(response_id) is str and response_id:
            if self._response_id is None:
                self._response_id = response_id
            elif response_id != self._response_id:
                self._slots.splice()  # a second response in this stream: this one never ended
                self._spliced = True
                return
        if feedback is not None and _text(read(feedback, "blockReason", "block_reason")) is not None:
            self._blocked = True
        if isinstance(candidates, list):
            for candidate in candidates:
                self._candidate(candidate)

    def _candidate(self, candidate: object) -> None:
        if type(candidate) is dict:
            index = candidate.get("index")
            content = candidate.get("content")
            reason = candidate.get("finishReason", ABSENT)
            if reason is ABSENT:
                reason = candidate.get("finish_reason")
        else:
            fields = None
            if sdk.CANDIDATES[type(candidate)]:
                try:
                    values = candidate.__dict__
                    fields = values["index"], values["content"], values["finish_reason"]
                except (AttributeError, KeyError):
                    pass
            if fields is None:
                fields = (
                    field(candidate, "index"),
                    field(candidate, "content"),
                    read(candidate, "finishReason", "finish_reason"),
                )
            index, content, reason = fields
        if index is ABSENT or index is None:
            index = 0
        elif type(index) is not int or index < 0:
            for _ in call_parts(candidate):
                self._slots.unattributable(0, ABSENT, ErrorCategory.MISSING_INDEX)
            return
        state = self._candidates.get(index)
        if state is None:
            state = self._candidates[index] = _Candidate()
        if type(content) is dict:
            parts = content.get("parts")
        else:
            parts = sdk.sdk_field(content, "parts") if sdk.CONTENTS[type(content)] else ABSENT
            if parts is ABSENT:
                parts = field(content, "parts")
        if isinstance(parts, list):
            for part in parts:
                if type(part) is dict:
                    call = part.get("functionCall", ABSENT)
                    if call is ABSENT:
                        call = part.get("function_call")
                else:
                    call = sdk.sdk_field(part, "function_call") if sdk.PARTS[type(part)] else ABSENT
                    if call is ABSENT:
                        call = read(part, "functionCall", "function_call")
                if call is not None and call is not ABSENT:
                    self._call(index, state, call)
        reason = _text(reason)
        if reason is not None:
            state.ended = True
            if reason != COMPLETE_REASON or not state.incomplete:  # the worst reason is the one reported
                self._slots.finish_reason(index, reason)
            state.incomplete = state.incomplete or reason != COMPLETE_REASON

    def _call(self, choice: int, state: _Candidate, call: object) -> None:
        """One ``functionCall`` part of candidate ``choice``."""
        slots = self._slots
        if type(call) is dict:
            raw_id = call.get("id", ABSENT)
            name = call.get("name", ABSENT)
            args = call.get("args", ABSENT)
            partial = call.get("partialArgs", ABSENT)
            if partial is ABSENT:
                partial = call.get("partial_args")
            will_continue = call.get("willContinue", ABSENT)
            if will_continue is ABSENT:
                will_continue = call.get("will_continue")
        else:
            fields = None
            if sdk.CALLS[type(call)]:
                try:
                    values = call.__dict__
                    raw_id = values["id"]
                    if raw_id is None and "id" not in call.__pydantic_fields_set__:  # type: ignore[attr-defined]
                        raw_id = ABSENT  # a null id and a missing one differ (the diagnostics keep their kind)
                    fields = raw_id, values["name"], values["args"], values["partial_args"], values["will_continue"]
                except (AttributeError, KeyError):
                    pass
            if fields is None:
                if isinstance(call, _NOT_OBJECTS):
                    slots.unattributable(choice)
                    return
                fields = (
                    field(call, "id"),
                    field(call, "name"),
                    field(call, "args"),
                    read(call, "partialArgs", "partial_args"),
                    read(call, "willContinue", "will_continue"),
                )
            raw_id, name, args, partial, will_continue = fields
        will_continue = will_continue is True
        key = state.streaming
        if key is not None:  # every call part belongs to the open streamed call
            slots.fragment(choice, key, raw_id, name)
            self._arguments(choice, key, args, partial)
        else:
            opened = self._open_call(choice, state, raw_id, name, args, partial, will_continue)
            if opened is None:
                return
            key = opened
        if will_continue:
            state.streaming = key
        else:
            state.streaming = None
            slots.close_slot(key, scope=choice)

    def _open_call(
        self,
        choice: int,
        state: _Candidate,
        raw_id: object,
        name: object,
        args: object,
        partial: object,
        will_continue: bool,
    ) -> int | None:
        """A call part with no streamed call open: a head opens the candidate's next slot (its key is returned)."""
        slots = self._slots
        call_id = unset(raw_id)
        has_args = args is not ABSENT and args is not None
        if not (call_id is not ABSENT or has_args or (name is not ABSENT and name is not None and name != "")):
            slots.unattributable(choice, raw_id)  # a continuation with no streamed call open
            return None
        whole = None
        if self._drop_repeats and not will_continue and (partial is ABSENT or partial is None):
            whole = sdk.whole_call(call_id, name, args if has_args else {})
            earlier = sdk.repeated_call(state.whole, whole) if whole is not None else None
            if earlier is not None:
                slots.admitted(earlier, Transition.DROP_REPEAT, scope=choice)
                return None
        key = state.next
        state.next += 1
        slots.open(key, raw_id, name, scope=choice)
        self._arguments(choice, key, args, partial)
        if whole is not None:
            state.whole.append((*whole, key))
        return key

    def _arguments(self, choice: int, key: int, args: object, partial: object) -> None:
        """A part's ``args`` (a claim; ``{}`` a placeholder) and ``partialArgs`` (leaves) for slot ``key``."""
        if args is not ABSENT and args is not None:
            if not isinstance(args, dict):
                self._slots.snapshot(key, NOT_AN_OBJECT, scope=choice)
                self._not_objects.add((choice, key))
            elif args:
                self._slots.snapshot(key, canonical_json(args), scope=choice)
        if partial is not ABSENT and partial is not None:
            leaves = self._leaves.get((choice, key))
            if leaves is None:
                leaves = self._leaves[choice, key] = Leaves(self._max_argument_chars)
            leaves.apply(partial)

    def opened(self, choice: int = 0) -> int:
        """How many calls candidate ``choice`` opened so far: the next call's ordinal (its slot index)."""
        state = self._candidates.get(choice)
        return 0 if state is None else state.next

    def feed_done(self) -> None:
        """Gemini streams have no end sentinel: the response is decided at the end of the input."""

    def finish(self) -> AssemblyResult:
        """Decide identity modes and the end, now that the stream is over, and finalize (idempotent)."""
        slots = self._slots
        if slots.finished:
            return slots.finish()
        for choice, state in self._candidates.items():
            for key in range(state.next):
                leaves = self._leaves.get((choice, key))
                if leaves is not None and leaves.seen:
                    slots.assembled(key, leaves.arguments(), scope=choice)
                elif (choice, key) not in self._not_objects:  # an unset Struct, or args {} on a streamed call
                    slots.snapshot(key, PLACEHOLDER, placeholder=True, scope=choice)
        if not self._require_id:
            for choice, state in self._candidates.items():
                keys = range(state.next)
                if all(getattr(slots.slot(key, scope=choice), "id", None) is None for key in keys):
                    for key in keys:
                        slots.positional(key, scope=choice)
        if self._failed:
            slots.end(ResponseEnd.FAILED)
        elif self._blocked:
            slots.end(ResponseEnd.INCOMPLETE)
        elif self._candidates and all(state.ended for state in self._candidates.values()):
            incomplete = any(state.incomplete for state in self._candidates.values())
            slots.end(ResponseEnd.INCOMPLETE if incomplete else ResponseEnd.COMPLETE)
        return slots.finish()


def assemble(events: Iterable[object], rules: IdentityRules | None = None) -> AssemblyResult:
    """Assemble a complete recorded stream in one call."""
    assembler = GeminiAssembler(rules=rules)
    for event in events:
        assembler.feed(event)
    return assembler.finish()
