"""Which provider a request goes to, and the call-id limits that provider enforces (docs/protocols.md, "The
request before it is sent").

A provider refuses a request whose call ids it does not accept: OpenAI Chat Completions ids longer than 40
characters, Responses ``call_id`` longer than 64, Anthropic ids outside ``^[a-zA-Z0-9_-]+$``, Mistral ids that
are not exactly 9 characters of ``[a-zA-Z0-9]``. These limits are the provider's, not the wire protocol's: a
self-hosted server speaking Chat Completions accepts any id, and a fallback provider speaking the same
protocol may accept fewer. So the limits are keyed by a **target** (the provider, as :func:`target_of` reads
it from the client's base URL) and a protocol name; an unknown target, or a target with no entry for that
protocol, gets no id check at all.

Pure: :func:`target_of` reads a URL's host by hand (no ``urllib``), nothing is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = ["ID_LIMITS", "TARGETS", "IdLimit", "id_limit", "target_of"]

OPENAI: Final = "openai"
AZURE_OPENAI: Final = "azure_openai"
ANTHROPIC: Final = "anthropic"
MISTRAL: Final = "mistral"
GEMINI: Final = "gemini"

_HOSTS: Final = (
    ("api.openai.com", OPENAI),
    (".openai.azure.com", AZURE_OPENAI),
    ("api.anthropic.com", ANTHROPIC),
    ("api.mistral.ai", MISTRAL),
    ("generativelanguage.googleapis.com", GEMINI),
)
"""``(host, target)``: a host starting with ``.`` matches any name under it (an Azure resource's own host)."""

TARGETS: Final = tuple(sorted({target for _, target in _HOSTS}))
"""Every target name :func:`target_of` can return (``replay --target``'s choices)."""

_ALNUM: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


@dataclass(frozen=True, slots=True)
class IdLimit:
    """What a target accepts as a call id: at most ``max_length`` characters, exactly ``length`` characters,
    only characters of ``characters`` (``None``: any), and never an empty id when ``characters`` is set."""

    rule: str
    """The rule in the provider's own words, for docs and messages (never an id)."""
    max_length: int | None = None
    length: int | None = None
    characters: frozenset[str] | None = None

    def accepts(self, call_id: str) -> bool:
        size = len(call_id)
        if self.max_length is not None and size > self.max_length:
            return False
        if self.length is not None and size != self.length:
            return False
        if self.characters is None:
            return True
        return size > 0 and all(character in self.characters for character in call_id)


ID_LIMITS: Final[Mapping[tuple[str, str], IdLimit]] = MappingProxyType(
    {
        (OPENAI, "chat_completions"): IdLimit("string too long ... maximum length 40", max_length=40),
        (AZURE_OPENAI, "chat_completions"): IdLimit("string too long ... maximum length 40", max_length=40),
        (OPENAI, "responses"): IdLimit("string too long ... maximum length 64", max_length=64),
        (ANTHROPIC, "anthropic_messages"): IdLimit(
            "String should match pattern '^[a-zA-Z0-9_-]+$'", characters=_ALNUM | frozenset("_-")
        ),
        (MISTRAL, "chat_completions"): IdLimit(
            "must be a-z, A-Z, 0-9, with a length of 9", length=9, characters=_ALNUM
        ),
    }
)
"""The id limits each target's error messages state, by ``(target, protocol name)``: only what a provider's
own 400 says (docs/protocols.md cites each); a pair not listed is not checked."""


def id_limit(target: str | None, protocol: str) -> IdLimit | None:
    """The limit ``target`` enforces on ``protocol``'s call ids; ``None`` (no check) for an unknown target."""
    return None if target is None else ID_LIMITS.get((target, protocol))


def target_of(base_url: str) -> str | None:
    """The target a client's base URL names (``https://api.openai.com/v1`` is ``openai``); ``None`` for any
    other host: a gateway, a proxy, a self-hosted or local server is unknown, and gets no id check."""
    host = base_url.strip()
    scheme = host.find("://")
    if scheme >= 0:
        host = host[scheme + 3 :]
    for end in "/?#":
        cut = host.find(end)
        if cut >= 0:
            host = host[:cut]
    host = host.rpartition("@")[2]
    if host.startswith("["):  # an IPv6 literal: never a provider's name
        return None
    host = host.partition(":")[0].rstrip(".").lower()
    for name, target in _HOSTS:
        if host == name or (name.startswith(".") and host.endswith(name) and len(host) > len(name)):
            return target
    return None
