"""A request checked as its target provider pairs calls and results, from the request as the protocol sends
it (docs/protocols.md, "The request before it is sent").

The one entry point the live integrations, the request guard and ``replay --followup`` call: the protocol's
description reads the request into turns (:attr:`WireProtocol.history`), says how its provider pairs them
(:attr:`WireProtocol.pairing`) and whether the provider holds earlier turns (:attr:`WireProtocol.holds_calls`);
the target's id limit comes from :mod:`etf_otel.core._targets`; the rules are :func:`etf_otel.core._pairing.check`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from etf_otel.core._history import Turn
from etf_otel.core._pairing import PairingCheck, PairingMemory, check, id_limit
from etf_otel.protocols._base import WireProtocol

__all__ = ["check_request"]


def _unnamed(call_id: str) -> bool:
    return False


def check_request(
    protocol: WireProtocol,
    request: object,
    *,
    target: str | None = None,
    memory: PairingMemory | None = None,
    held_calls: Collection[str] | None = None,
    preserved: Callable[[str], bool] = _unnamed,
    turns: Sequence[Turn] | None = None,
) -> PairingCheck | None:
    """The pairing problems the provider behind ``target`` refuses in ``request``; ``None`` when ``protocol``
    states no pairing rules or ``request`` is not of its shape (nothing was checked).

    ``request``: what :attr:`WireProtocol.history` reads (the request object, the list of its turns, or the
    SDK's objects). ``target``: :func:`~etf_otel.core._targets.target_of` the client's base URL (``None``:
    no id-limit check). ``memory``: the conversation's :class:`PairingMemory`, for the reasons; it is not
    changed here (the caller remembers the request with :meth:`PairingMemory.requested` afterwards).
    ``held_calls``: the ids of the calls the provider holds when the request continues a stored response
    (Responses ``previous_response_id``: that response's calls), each of which needs a result here.
    ``preserved(call_id)``: whether a problem may name that id. ``turns``: the request's history when the
    caller read it already (the live layer links the request by it), instead of reading it again."""
    rules = protocol.pairing
    if rules is None:
        return None
    if turns is None:
        turns = protocol.history(request)
    if turns is None:
        return None
    holds = protocol.holds_calls(request)
    return check(
        turns,
        rules,
        limit=id_limit(target, protocol.name),
        memory=memory,
        held=holds is not False,
        held_calls=held_calls if holds else None,
        preserved=preserved,
    )
