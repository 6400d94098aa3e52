"""The seam every wire protocol plugs into.

A wire protocol (Chat Completions, OpenAI Responses, Anthropic Messages) is
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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from etf_otel.core._identity import ABSENT, IdentityRules
from etf_otel.core._results import AssemblyResult
from etf_otel.core._slots import ResponseSlots

__all__ = ["AssemblerFactory", "StreamAssembler", "WireProtocol", "field"]


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


@dataclass(frozen=True)
class WireProtocol:
    """What the layers above need to know about one wire protocol."""

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


def field(obj: object, name: str) -> object:
    """``obj[name]`` for dicts, the attribute for SDK objects, :data:`ABSENT` when missing.

    pydantic models answer every declared attribute (``None`` when the payload lacked
    it), so presence is read from ``__pydantic_fields_set__`` and the model's extras.
    """
    if type(obj) is dict:
        return obj.get(name, ABSENT)
    fields_set = getattr(obj, "__pydantic_fields_set__", None)
    if fields_set is not None:
        if name in fields_set:
            return getattr(obj, name, ABSENT)
        extra = getattr(obj, "__pydantic_extra__", None)
        if extra and name in extra:
            return extra[name]
        return ABSENT
    if isinstance(obj, dict):
        return obj.get(name, ABSENT)
    return getattr(obj, name, ABSENT)
