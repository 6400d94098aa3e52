"""The Ollama adapter: ``/api/chat`` chunks lowered onto :class:`LifecycleSlots`.

Ollama's native chat endpoint streams newline-delimited JSON objects, each a whole chat
response (``model``, ``created_at``, ``message``, ``done``); with ``"stream": false`` the body is
one such object with ``done: true``. A tool call never streams in pieces: it arrives whole in
``message.tool_calls`` (``function.name``, ``function.arguments`` as a JSON object), in one
chunk or in the body. docs/protocols.md has the rules; in short:

* **Slots.** The key is the call's ordinal in the response: the n-th call that arrived.
  ``function.index`` is not the key: a call is whole when it arrives, so nothing joins it
  later, and models that put every call on index 0 would otherwise merge them.
* **Identity.** Newer Ollama servers give each call an ``id``; older ones, and many models
  behind them, give none. As for Gemini (docs/protocols.md), a response none of whose calls
  has an id is positional: each call's key is its identity and the transition ``positional``
  is counted once per call. A response where some call has an id is in id mode: its id-less
  calls are ``missing_id``. ``null`` and ``""`` ids are unset (the server omits empty ids).
* **Arguments** are an object, kept as compact JSON text; ``{}``, ``null`` or none at all is
  the placeholder ``{}``; any other value (a JSON string) makes the call's arguments invalid.
* **The end.** The chunk with ``done: true`` ends the response: complete when its
  ``done_reason`` is ``stop`` or absent (servers before ``done_reason`` existed), incomplete for
  any other reason (``length``). An ``{"error": ...}`` object fails it; no ``done`` truncates it;
  a chunk carrying calls after ``done`` is a second response spliced into this one.

Chunks are plain dicts (parsed JSON) or SDK objects read with :func:`field`; the ``ollama``
package is never imported. Nothing JSON-shaped makes the adapter raise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from etf_otel.core._identity import ABSENT, DEFAULT_RULES, CompatibilityRule, IdentityRules
from etf_otel.core._lifecycle import SCOPE, LifecycleSlots
from etf_otel.core._results import AssemblyResult
from etf_otel.core._slots import DEFAULT_MAX_ARGUMENT_CHARS
from etf_otel.core._vocabulary import ResponseEnd
from etf_otel.protocols._fields import field
from etf_otel.protocols._gemini_arguments import NOT_AN_OBJECT, canonical_json, unset

__all__ = ["COMPLETE_REASON", "PLACEHOLDER", "OllamaAssembler", "assemble", "done_reason", "tool_calls"]

COMPLETE_REASON: Final = "stop"
"""The ``done_reason`` of a whole response (tool calls end with it too); any other one is incomplete."""
PLACEHOLDER: Final = "{}"
"""The arguments of a call that states none (``{}``, ``null`` or no ``arguments`` key)."""


def done_reason(event: object) -> str | None:
    """The chunk's ``done_reason`` when it is a non-empty string, else ``None``."""
    reason = field(event, "done_reason")
    return reason if isinstance(reason, str) and reason else None


def tool_calls(event: object) -> list[object]:
    """The ``message.tool_calls`` of a chunk (``[]`` when it has none or they are not a list)."""
    message = field(event, "message")
    calls = field(message, "tool_calls") if message is not ABSENT and message is not None else ABSENT
    return list(calls) if isinstance(calls, (list, tuple)) else []


class OllamaAssembler:
    """Assembles one Ollama chat response (a stream or a body); one instance per response.

    Feed every chunk with :meth:`feed`, then call :meth:`finish`. ``ignored_events`` counts
    the chunks that changed nothing: not an object, and every chunk after the response ended.
    """

    __slots__ = ("_done", "_failed", "_next", "_reason", "_require_id", "_slots", "_spliced", "ignored_events")

    def __init__(
        self,
        *,
        rules: IdentityRules | None = None,
        clock: Callable[[], int] | None = None,
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    ) -> None:
        given = rules.rules if rules is not None else DEFAULT_RULES
        # an omitted id, null and "" are one thing on this wire; the rules given, exactly
        rules = IdentityRules.for_rules(given, unset_ids=True, deny=DEFAULT_RULES.difference(given))
        self._slots = LifecycleSlots(rules, clock=clock, max_argument_chars=max_argument_chars)
        self._require_id = self._slots.rules.allows(CompatibilityRule.REQUIRE_CALL_ID)
        self._next = 0
        self._done = False
        self._reason: str | None = None
        self._failed = False
        self._spliced = False
        self.ignored_events = 0

    @property
    def slots(self) -> LifecycleSlots:
        return self._slots

    @property
    def finished(self) -> bool:
        return self._slots.finished

    @property
    def opened(self) -> int:
        """How many calls arrived so far: the next call's ordinal (its slot key)."""
        return self._next

    def feed(self, event: object) -> None:
        """Apply one chunk (or an in-band ``{"error": ...}`` object)."""
        if (
            self._slots.finished
            or self._spliced
            or isinstance(event, (str, bytes, int, float, list, tuple))
            or event is None
        ):
            self.ignored_events += 1
            return
        error = field(event, "error")
        if error is not ABSENT and error is not None:
            self._failed = True
            return
        calls = tool_calls(event)
        if self._done:
            if calls:  # calls after the end: a second response in this stream
                self._slots.splice()
                self._spliced = True
            else:
                self.ignored_events += 1
            return
        for call in calls:
            self._call(call)
        if field(event, "done") is True:
            self._done = True
            self._reason = done_reason(event)
            self._slots.finish_reason(SCOPE, self._reason or COMPLETE_REASON)

    def _call(self, call: object) -> None:
        """One whole call: opened, given its arguments and closed at once."""
        slots = self._slots
        if isinstance(call, (str, bytes, int, float, list, tuple)) or call is None:
            slots.unattributable(SCOPE)
            return
        function = field(call, "function")
        if function is ABSENT or function is None:
            name: object = ABSENT
            arguments: object = ABSENT
        else:
            name, arguments = field(function, "name"), field(function, "arguments")
        key = self._next
        self._next += 1
        slots.open(key, field(call, "id"), name)
        if isinstance(arguments, dict) and arguments:
            slots.snapshot(key, canonical_json(arguments))
        elif arguments is ABSENT or arguments is None or arguments == {}:
            slots.snapshot(key, PLACEHOLDER, placeholder=True)
        else:
            slots.snapshot(key, NOT_AN_OBJECT)
        slots.close_slot(key)

    def feed_done(self) -> None:
        """Ollama streams have no end sentinel: ``done: true`` is the last chunk."""

    def finish(self) -> AssemblyResult:
        """Decide the identity mode and the end, now that the response is over, and finalize (idempotent)."""
        slots = self._slots
        if slots.finished:
            return slots.finish()
        keys = range(self._next)
        if not self._require_id and all(unset(getattr(slots.slot(key), "id", None)) is ABSENT for key in keys):
            for key in keys:
                slots.positional(key)
        if self._failed:
            slots.end(ResponseEnd.FAILED)
        elif self._done:
            complete = self._reason is None or self._reason == COMPLETE_REASON
            slots.end(ResponseEnd.COMPLETE if complete else ResponseEnd.INCOMPLETE)
        return slots.finish()


def assemble(events: Iterable[object], rules: IdentityRules | None = None) -> AssemblyResult:
    """Assemble a complete recorded response (its chunks, or the one body) in one call."""
    assembler = OllamaAssembler(rules=rules)
    for event in events:
        assembler.feed(event)
    return assembler.finish()
