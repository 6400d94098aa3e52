"""Gemini linkage: the next request's ``functionResponse`` parts against a response's proposals.

Gemini answers a call with a ``functionResponse`` that names the function and may carry the
call's id. Ids are optional (none on Gemini 2.x and Vertex AI), and the API itself pairs
responses with calls by name and order. So (docs/protocols.md, "Gemini results"):

* **id mode** (a proposal has an id): a response with an id answers the proposal with that id
  *and* that name; another id, or a name that disagrees, is ``orphaned_result``. A response
  without an id answers the earliest unanswered proposal of its name.
* **positional mode** (no proposal has an id): the k-th response named N answers the k-th
  proposal named N; ids on responses are ignored.

A name no proposal has is ``orphaned_result``, one answer too many for a call or a name
``duplicate_result``, a proposal without an answer ``unanswered_call``. Only the first content
after the model turn is in scope; a response in a later one is ``orphaned_result``.
"""

from __future__ import annotations

from collections.abc import Sequence

from etf_otel.core._linkage import Finding
from etf_otel.core._results import AssemblyResult, ToolCall
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.protocols._base import field
from etf_otel.protocols._gemini import unset

__all__ = ["link_results"]

_ORPHANED, _DUPLICATE, _UNANSWERED = (
    ErrorCategory.ORPHANED_RESULT,
    ErrorCategory.DUPLICATE_RESULT,
    ErrorCategory.UNANSWERED_CALL,
)


def link_results(result: AssemblyResult, responses: Sequence[tuple[object, bool]]) -> list[Finding]:
    """Findings of ``responses`` (``functionResponse`` objects, each with whether it is in scope) against ``result``.

    Only a dispatchable response proposed anything. A finding's ``call_id`` is a proposal's
    preserved id (never a result's own); its ``name`` is the function name.
    """
    proposals = result.proposals
    id_mode = any(proposal.id is not None for proposal in proposals)
    answered: set[int] = set()
    findings: list[Finding] = []
    for response, in_scope in responses:
        name = field(response, "name")
        name = name if isinstance(name, str) else None
        if not in_scope:
            findings.append(Finding(_ORPHANED, name=name))
            continue
        call_id = unset(field(response, "id"))
        if id_mode and isinstance(call_id, str):
            position = next((at for at, proposal in enumerate(proposals) if proposal.id == call_id), None)
            finding = _by_id(proposals, position, name, answered)
        else:
            finding = _by_name(proposals, name, answered)
        if finding is not None:
            findings.append(finding)
    findings.extend(
        Finding(_UNANSWERED, proposal.id, name=proposal.name)
        for at, proposal in enumerate(proposals)
        if at not in answered
    )
    return findings


def _by_id(proposals: Sequence[ToolCall], position: int | None, name: str | None, answered: set[int]) -> Finding | None:
    if position is None or proposals[position].name != name:
        return Finding(_ORPHANED, name=name)  # an unknown id, or the call's id under another name
    if position in answered:
        return Finding(_DUPLICATE, proposals[position].id, name=name)
    answered.add(position)
    return None


def _by_name(proposals: Sequence[ToolCall], name: str | None, answered: set[int]) -> Finding | None:
    """The earliest unanswered proposal named ``name`` is answered."""
    named = [at for at, proposal in enumerate(proposals) if name is not None and proposal.name == name]
    if not named:
        return Finding(_ORPHANED, name=name)
    free = [at for at in named if at not in answered]
    if not free:
        return Finding(_DUPLICATE, proposals[named[-1]].id, name=name)
    answered.add(free[0])
    return None
