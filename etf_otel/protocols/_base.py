"""The seam every wire protocol plugs into.

A wire protocol (Chat Completions, OpenAI Responses, Anthropic Messages, Gemini) is
one small adapter that reads its own events and lowers them onto the protocol-neutral
slot model of :mod:`etf_otel.core._slots`: a slot opened or updated with an identity, an
argument delta, a close, a finish reason, the response's proper end. Everything above
(the observer, the wrappers, ``replay``) drives an adapter through
:class:`StreamAssembler` and picks one by its :class:`WireProtocol` description, so a
new protocol is one module and one registry entry, not a change to the layers above.

Adapters read events as plain dicts (parsed JSON) or as a client SDK's typed objects
without importing the SDK: :func:`field` reads a field either way and tells a missing
key apart from ``null``, which the identity rules depend on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from etf_otel.core._history import Drift, Turn
from etf_otel.core._identity import IdentityRules
from etf_otel.core._linkage import Finding
from etf_otel.core._pairing_model import PairingRules
from etf_otel.core._results import AssemblyResult
from etf_otel.core._slots import ResponseSlots
from etf_otel.protocols._fields import field, last_position, typed_starts

__all__ = [
    "AssemblerFactory",
    "CallFields",
    "FollowUp",
    "StreamAssembler",
    "WireProtocol",
    "field",
    "last_position",
    "typed_starts",
]

FollowUp = tuple[int, list[str | None]]
"""``(position where the earlier request's messages end, the call ids the results answer)``.

An id that is not a string is ``None``: linkage counts it as ``orphaned_result``."""

CallFields = tuple[object, object, object]
"""``(id, name, arguments)`` as read from a call object, unchecked (:data:`ABSENT` when missing)."""


class StreamAssembler(Protocol):
    """One response of one wire protocol being assembled; one instance per response."""

    @property
    def slots(self) -> ResponseSlots:
        """The slot model the adapter lowers onto."""
        ...

    @property
    def finished(self) -> bool: ...

    def feed(self, event: object) -> None:
        """Apply one wire event, as it arrived; never raises on JSON-shaped input."""
        ...

    def feed_done(self) -> None:
        """The transport's end-of-stream sentinel arrived (Chat Completions' ``[DONE]``).

        Protocols without a sentinel ignore it.
        """
        ...

    def finish(self) -> AssemblyResult:
        """Finalize the response (idempotent); call it however the stream ended."""
        ...


class AssemblerFactory(Protocol):
    def __call__(
        self, *, rules: IdentityRules, clock: Callable[[], int] | None = None, max_argument_chars: int = ...
    ) -> StreamAssembler: ...


def _no_follow_up(messages: Sequence[object]) -> FollowUp | None:
    """No message list of this protocol continues a conversation the integrations can link."""
    return None


def _no_body(event: object) -> str | None:
    """No event of this protocol is mistaken for a complete body."""
    return None


def _no_body_events(body: object) -> list[object] | None:
    """This protocol has no complete-body shape to judge."""
    return None


def _one_response(events: Sequence[object]) -> list[int]:
    """A recording of this protocol is not checked for a second response."""
    return []


def _slot_label(choice: int, index: int | None) -> str:
    return "no open call" if index is None else f"slot {index}"


def _no_event_slot(event: object) -> int | None:
    """Events of this protocol name no lifecycle slot (Chat Completions: each fragment carries its index)."""
    return None


def _states_nothing(event: object) -> bool:
    """No event of this protocol restates a call beyond what the slot model counts."""
    return False


def _no_drift(result: AssemblyResult, followup: object) -> list[Drift]:
    """A protocol linked by :attr:`WireProtocol.result_ids`: its drift comes from the history's scope."""
    return []


def _no_history(request: object) -> list[Turn] | None:
    """A protocol that does not read its requests' histories: linkage by :attr:`WireProtocol.result_ids` alone."""
    return None


def _holds_nothing(request: object) -> bool | None:
    """The provider keeps no turns of its own: every request carries its whole history."""
    return False


def _no_call(call: object) -> CallFields | None:
    """No call object of this protocol's own shape: hosts read ``id``, ``name``, ``arguments``."""
    return None


@dataclass(frozen=True)
class WireProtocol:
    """What the layers above need to know about one wire protocol.

    Only ``name``, ``assembler``, ``recognizes`` and ``result_ids`` are required; every other
    field has a neutral default, so a protocol states only what it has.
    """

    name: str
    """The protocol's value of ``etf.protocol`` and of ``replay --protocol``."""
    assembler: AssemblerFactory
    """Builds the adapter for one response."""
    recognizes: Callable[[object], bool]
    """Whether a first event (parsed JSON) is one of this protocol's: ``replay``'s detection."""
    result_ids: Callable[[object], list[object] | None]
    """The call ids the next request answers, in order, from that request as the protocol sends
    it (or the part of it that holds the results); ``None`` when it is not of that shape.
    Linkage (``orphaned_result``, ``duplicate_result``, ``unanswered_call``) compares them
    with the proposals of the response."""
    title: str = ""
    """How people call it (a heading of docs/quirks.md); :attr:`heading` falls back to the name."""
    finish_reasons: frozenset[str] = frozenset()
    """The finish reasons the protocol documents: kept as they are in telemetry; any other
    reason is raw provider output and becomes ``_OTHER``."""
    followup_shape: str = "the request as the protocol sends it"
    """What ``replay --followup`` expects, for the message that refuses anything else."""
    follow_up: Callable[[Sequence[object]], FollowUp | None] = _no_follow_up
    """The :data:`FollowUp` of a request's messages (dicts or SDK objects) as an SDK sends them;
    ``None`` when they start a conversation or are not of this protocol's shape. The
    integrations link conversations with it."""
    complete_body: Callable[[object], str | None] = _no_body
    """What a first event is when it is a complete, non-streamed response body of this
    protocol (``"a complete ... body"``), else ``None``: ``replay`` refuses it."""
    body_events: Callable[[object], list[object] | None] = _no_body_events
    """The events a complete, non-streamed body of this protocol would have been streamed as,
    every call in one piece (``None``: not such a body). Bodies are judged through them by the
    same adapter and rules as streams (:func:`etf_otel.protocols._bodies.judge_body`)."""
    later_responses: Callable[[Sequence[object]], list[int]] = _one_response
    """Where each response after the first starts in a recording (``[]`` for one): ``replay``
    refuses several responses one after the other."""
    slot_label: Callable[[int, int | None], str] = _slot_label
    """How a slot ``(choice, index)`` is named to a reader (``index`` ``None``: fragments that
    joined no slot); the lanes and the calls table of ``replay --html``."""
    call_fields: Callable[[object], CallFields | None] = _no_call
    """A call object as an application hands it to its tool host, when it has this protocol's
    own shape (an OpenAI ``function`` object, a Responses item, a ``tool_use`` block); ``None``
    for any other shape."""
    request_path: str | None = None
    """The HTTP path its streamed requests are posted to (the scripted server answers there)."""
    event_slot: Callable[[object], int | None] = _no_event_slot
    """The lifecycle slot an event names (``output_index``, a block ``index``): where
    ``replay --html`` draws that event's snapshot and close marks."""
    states_arguments: Callable[[object], bool] = _states_nothing
    """Whether an event restates a call's whole arguments (a snapshot mark on ``replay --html``)
    even when the slot model counts no new claim from it."""
    history: Callable[[object], list[Turn] | None] = _no_history
    """A next request's history as :class:`~etf_otel.core._history.Turn` s (the request as the protocol
    sends it, the part of it that holds its turns, or the SDK's objects); ``None`` when it is not of
    that shape. What a follow-up's judgement covers is decided on them (:mod:`etf_otel.core._history`)."""
    answers_adjacent: bool = False
    """Whether only the turn right after an assistant turn may answer its calls (Anthropic: the next user
    message); otherwise every turn up to the next assistant turn may (Chat: the ``role: tool`` messages)."""
    pairing: PairingRules | None = None
    """How the protocol's provider pairs the calls and results of a request's :attr:`history` (where it looks
    for a call's results, by id or by name, where it refuses two calls with one id): the pairing check
    (:func:`etf_otel.protocols.check_request`) applies it. ``None`` (the default): requests are not checked."""
    holds_calls: Callable[[object], bool | None] = _holds_nothing
    """Whether the provider holds earlier turns of a request (Responses: ``previous_response_id`` or a
    ``conversation``), so a result may answer a call the request does not carry; ``None`` when the part of
    the request given cannot tell (a bare ``input`` list)."""
    link: Callable[[AssemblyResult, object], list[Finding] | None] | None = None
    link_drift: Callable[[AssemblyResult, object], list[Drift]] = _no_drift
    """With :attr:`link`: what the next request answers that is drift rather than ``result``'s to judge."""
    """The linkage findings of a next request (as :attr:`result_ids` takes it) against a response,
    for a protocol that links results by more than their ids (Gemini: by name and order too);
    ``None`` (the default): linkage by :attr:`result_ids`."""

    @property
    def judges_bodies(self) -> bool:
        """Whether it describes complete bodies (:attr:`body_events`); ``replay`` refuses one otherwise."""
        return self.body_events is not _no_body_events

    @property
    def heading(self) -> str:
        """:attr:`title`, or the name when it has none."""
        return self.title or self.name
