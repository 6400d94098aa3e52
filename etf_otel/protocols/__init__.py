"""Wire protocols, each one adapter onto the slot model, found here by name.

``etf.protocol`` on spans and metrics, ``Instrumentation.stream(protocol=...)`` and
``etf-otel replay --protocol`` all use the names of :data:`PROTOCOLS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from etf_otel.protocols._anthropic_messages import ANTHROPIC_MESSAGES
from etf_otel.protocols._base import StreamAssembler, WireProtocol, field
from etf_otel.protocols._chat_completions import CHAT_COMPLETIONS
from etf_otel.protocols._responses import RESPONSES

__all__ = [
    "ANTHROPIC_MESSAGES",
    "CHAT_COMPLETIONS",
    "PROTOCOLS",
    "RESPONSES",
    "StreamAssembler",
    "WireProtocol",
    "detect",
    "field",
    "get",
]

PROTOCOLS: Final[Mapping[str, WireProtocol]] = MappingProxyType(
    {
        CHAT_COMPLETIONS.name: CHAT_COMPLETIONS,
        RESPONSES.name: RESPONSES,
        ANTHROPIC_MESSAGES.name: ANTHROPIC_MESSAGES,
    }
)
"""Every supported wire protocol, by name."""


def get(protocol: WireProtocol | str) -> WireProtocol:
    """The protocol named ``protocol`` (a description passes through); ``ValueError`` names the choices."""
    if isinstance(protocol, WireProtocol):
        return protocol
    found = PROTOCOLS.get(protocol)
    if found is None:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of: {', '.join(PROTOCOLS)}")
    return found


def detect(first_event: object) -> WireProtocol | None:
    """The protocol whose events look like ``first_event``, or ``None`` when none does."""
    for protocol in PROTOCOLS.values():
        if protocol.recognizes(first_event):
            return protocol
    return None
