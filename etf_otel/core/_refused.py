"""Incoming ids the identity rules refused, kept as keyed digests: recognisable later, never stored.

A refused incoming id (the conflicting second id of a slot, an id on a fragment that reached no
slot) is no proposal, yet an SDK or an application may answer it: the linkage then reports the
result as orphaned with the reason ``rejected_incoming_id``. To recognise it without keeping it,
a response keeps, per refused id, its length and the first :data:`DIGEST_BYTES` bytes of an
HMAC-SHA256 under a key drawn once per process: the digest cannot be reversed or compared across
processes, and it never leaves the process (no span, event, metric or log carries it).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["DIGEST_BYTES", "MAX_REFUSED_KEPT", "NO_REFUSED", "RefusedIds", "id_digest"]

_KEY: Final = secrets.token_bytes(32)
"""This process's key: digests mean nothing to another process, nor after a restart."""

DIGEST_BYTES: Final = 16
"""The HMAC-SHA256 truncated to 128 bits: collisions among a response's few refused ids are negligible."""

MAX_REFUSED_KEPT: Final = 64
"""Refused ids kept per response; later ones are not recognised (their results are ``unknown``)."""

Digest = tuple[int, bytes]
"""``(length of the id, keyed digest)``: the length lets a run of ids be taken apart without the ids."""


def id_digest(call_id: str) -> Digest:
    """The keyed digest of ``call_id`` (lone surrogates included, as JSON can carry them)."""
    mac = hmac.new(_KEY, call_id.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return len(call_id), mac.digest()[:DIGEST_BYTES]


@dataclass(frozen=True, slots=True)
class RefusedIds:
    """The digests of the incoming ids one response refused (``in`` tells whether an id is one of them)."""

    digests: frozenset[Digest] = frozenset()

    @classmethod
    def of(cls, call_ids: Iterable[str]) -> RefusedIds:
        return cls(frozenset(id_digest(call_id) for call_id in call_ids))

    def __bool__(self) -> bool:
        return bool(self.digests)

    def __len__(self) -> int:
        return len(self.digests)

    def __contains__(self, call_id: object) -> bool:
        return isinstance(call_id, str) and bool(self.digests) and id_digest(call_id) in self.digests

    @property
    def lengths(self) -> frozenset[int]:
        """The lengths of the refused ids (what :func:`~etf_otel.core._linkage.concatenated` tries)."""
        return frozenset(length for length, _ in self.digests)

    def union(self, other: RefusedIds) -> RefusedIds:
        return RefusedIds(self.digests | other.digests) if other.digests else self


NO_REFUSED: Final = RefusedIds()
