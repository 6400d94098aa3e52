"""Wire protocols, each one adapter onto the slot model, found here by name.

``etf.protocol`` on spans and metrics, ``Instrumentation.stream(protocol=...)`` and
``etf-otel replay --protocol`` all use the names of :data:`PROTOCOLS`. A protocol outside
this package joins them with :func:`register` (and leaves with :func:`unregister`): the
replay command, the host's call reading, the scripted server and the quirks tooling then
read it from its :class:`WireProtocol` description like the built-in ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Final

from etf_otel.core._vocabulary import bounded_finish_reason as _bounded
from etf_otel.protocols._anthropic_description import ANTHROPIC_MESSAGES
from etf_otel.protocols._base import CallFields, FollowUp, StreamAssembler, WireProtocol, field
from etf_otel.protocols._bedrock_description import BEDROCK_CONVERSE
from etf_otel.protocols._chat_completions import CHAT_COMPLETIONS
from etf_otel.protocols._gemini_description import GEMINI
from etf_otel.protocols._ollama_description import OLLAMA
from etf_otel.protocols._pairing import check_request
from etf_otel.protocols._responses_description import RESPONSES

__all__ = [
    "ANTHROPIC_MESSAGES",
    "BEDROCK_CONVERSE",
    "CHAT_COMPLETIONS",
    "GEMINI",
    "OLLAMA",
    "PROTOCOLS",
    "REQUEST_PATHS",
    "RESPONSES",
    "CallFields",
    "FollowUp",
    "StreamAssembler",
    "WireProtocol",
    "bounded_finish_reason",
    "check_request",
    "detect",
    "field",
    "get",
    "known_finish_reasons",
    "register",
    "registered",
    "unregister",
]

_BUILT_IN: Final = (CHAT_COMPLETIONS, RESPONSES, ANTHROPIC_MESSAGES, GEMINI, BEDROCK_CONVERSE, OLLAMA)
_registry: dict[str, WireProtocol] = {protocol.name: protocol for protocol in _BUILT_IN}
_order: tuple[WireProtocol, ...] = _BUILT_IN
_finish_reasons: frozenset[str] = frozenset().union(*(protocol.finish_reasons for protocol in _BUILT_IN))

PROTOCOLS: Final[Mapping[str, WireProtocol]] = MappingProxyType(_registry)
"""Every registered wire protocol, by name, in registration order (a live, read-only view)."""


class _RequestPaths(AbstractSet[str]):
    """The :attr:`WireProtocol.request_path` of every registered protocol, read when asked."""

    def __contains__(self, path: object) -> bool:
        return any(protocol.request_path == path for protocol in _order)

    def __iter__(self) -> Iterator[str]:
        return iter([protocol.request_path for protocol in _order if protocol.request_path is not None])

    def __len__(self) -> int:
        return len(list(iter(self)))


REQUEST_PATHS: Final[AbstractSet[str]] = _RequestPaths()
"""The paths streamed requests of the registered protocols are posted to (a live view)."""


def get(protocol: WireProtocol | str) -> WireProtocol:
    """The protocol named ``protocol`` (a description passes through); ``ValueError`` names the choices."""
    if isinstance(protocol, WireProtocol):
        return protocol
    found = _registry.get(protocol)
    if found is None:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of: {', '.join(_registry)}")
    return found


def registered() -> tuple[WireProtocol, ...]:
    """The registered protocols in registration order, as one snapshot: safe to iterate while
    another thread registers one (iterating :data:`PROTOCOLS` then is not)."""
    return _order


def detect(first_event: object) -> WireProtocol | None:
    """The protocol whose events look like ``first_event``, or ``None`` when none does."""
    for protocol in _order:
        if protocol.recognizes(first_event):
            return protocol
    return None


def known_finish_reasons() -> frozenset[str]:
    """The finish reasons some registered protocol documents (one set: a gateway may send one
    protocol's reason in another's stream, and it is still no raw provider output)."""
    return _finish_reasons


def bounded_finish_reason(reason: str) -> str:
    """``reason`` when a registered protocol documents it, else ``_OTHER``."""
    return _bounded(reason, _finish_reasons)


def register(protocol: WireProtocol) -> WireProtocol:
    """Add ``protocol`` to the registry, after the ones there; returns it.

    ``ValueError`` when its name is taken by another description (registering the same one
    again changes nothing). Detection asks the protocols in registration order.
    """
    if not isinstance(protocol, WireProtocol):
        raise TypeError(f"register() takes a WireProtocol, not {type(protocol).__name__}")
    taken = _registry.get(protocol.name)
    if taken is protocol:
        return protocol
    if taken is not None:
        raise ValueError(f"protocol name {protocol.name!r} is taken")
    _registry[protocol.name] = protocol
    _refresh()
    return protocol


def unregister(protocol: WireProtocol | str) -> None:
    """Remove a protocol :func:`register` added; ``ValueError`` for a built-in or an unknown one."""
    name = protocol.name if isinstance(protocol, WireProtocol) else protocol
    if any(name == built_in.name for built_in in _BUILT_IN):
        raise ValueError(f"protocol {name!r} is built in; it cannot be unregistered")
    if name not in _registry or (isinstance(protocol, WireProtocol) and _registry[name] is not protocol):
        raise ValueError(f"protocol {name!r} is not registered")
    del _registry[name]
    _refresh()


def _refresh() -> None:
    global _order, _finish_reasons
    _order = tuple(_registry.values())
    _finish_reasons = frozenset().union(*(protocol.finish_reasons for protocol in _order))
