"""Gemini requests linked to the response they answer, and judged by name and order or by id.

A Gemini request carries the whole history in ``contents``: the earlier contents, the model's
turn (one content per streamed chunk when the SDK's automatic function calling built it, one
content when the application copied the response's), then the user content whose
``functionResponse`` parts answer the turn's calls. The response it answers is found as for the
chat protocols (:mod:`etf_otel.integrations._conversation`): by the call ids of the model turn,
else by the fingerprint of the contents before it, when exactly one recent request had them.

Results are then judged by the protocol's own linkage (:attr:`WireProtocol.link`): by id and
name when the response's calls had ids, by name and order when they had none, only the first
content after the model turn in scope. That needs the response's calls, not only their ids, so a
:class:`GeminiConversation` keeps the latest result of its conversation (its calls' names, ids,
slots and verdicts, :func:`without_content`) and settles with the request's contents instead of ids.

Contents are read, never changed: a string (the SDK's one user text), one content, or a list or
tuple of contents; any other shape (a list of strings, an iterator) is not linked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from etf_otel.core._identity import ABSENT
from etf_otel.core._results import AssemblyResult
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.integrations._conversation import (
    ConversationIndex,
    Linked,
    LinkedConversation,
    digests,
    fingerprint,
    last_position,
    plain,
    string_ids,
)
from etf_otel.protocols import GEMINI, field
from etf_otel.protocols._gemini import unset
from etf_otel.protocols._gemini_arguments import read
from etf_otel.protocols._gemini_description import scoped
from etf_otel.protocols._gemini_linkage import link_results

__all__ = ["GeminiConversation", "GeminiConversations", "contents_of", "without_content"]

_MODEL = "model"


class GeminiConversation(LinkedConversation):
    """A conversation settled by the next request's ``functionResponse`` parts (name and order, or id)."""

    __slots__ = ("followup", "latest")

    def __init__(self, index: ConversationIndex | None) -> None:
        super().__init__(index)
        self.latest: AssemblyResult | None = None
        """The latest response of the conversation, once reported."""
        self.followup: list[Any] | None = None
        """The contents of the request that answers :attr:`latest`, until it settles it."""

    def settle(self, tool_message_ids: Iterable[object] | None = None) -> tuple[list[Any], tuple[str, ...]]:
        followup, self.followup = self.followup, None
        latest = self.latest
        if followup is None or latest is None:
            return super().settle(tool_message_ids)
        super().settle(())  # clears the pending ids; the protocol's linkage judges instead
        found, drift = scoped(followup, latest, self.shapes)
        self.drift = tuple(drift)
        findings = link_results(latest, found)
        unanswered = {finding.call_id for finding in findings if finding.category is ErrorCategory.UNANSWERED_CALL}
        answered = tuple(
            call.id for call in latest.proposals if call.id is not None and call.id not in unanswered
        )  # fmt: skip
        return findings, answered


def without_content(result: AssemblyResult) -> AssemblyResult:
    """``result`` as a conversation keeps it: its calls' slots, ids, names and verdicts, no arguments
    and no diagnostics (nothing the model wrote is kept between requests)."""
    calls = tuple(call._replace(arguments="", rejected_fragments=()) for call in result.calls)
    return dataclasses.replace(result, calls=calls, _diagnostics=(), _overflow=(), _decision_counts=())


class _Index(ConversationIndex):
    def new(self) -> GeminiConversation:
        return GeminiConversation(self)


def _with_role(content: Any) -> Any:
    """``content`` with the role the SDK sends for it. ``ModelContent`` and ``UserContent`` (ADK builds its
    streamed model turns as ``ModelContent``) have their role as a class default: the SDK sends it, but it is
    not among the fields the object was given, where :func:`~etf_otel.protocols.field` looks."""
    if type(content) is dict or field(content, "role") is not ABSENT:
        return content
    role = getattr(content, "role", None)
    return {**plain(content), "role": role} if isinstance(role, str) else content


def contents_of(contents: object) -> list[Any] | None:
    """``contents`` as the list of contents the SDK sends (``None``: a shape that is not linked)."""
    if isinstance(contents, str):
        return [{"parts": [{"text": contents}], "role": "user"}]
    if isinstance(contents, (list, tuple)):
        return [_with_role(item) for item in contents] if all(not isinstance(item, str) for item in contents) else None
    if field(contents, "parts") is not ABSENT:  # one content (a dict or the SDK's object)
        return [_with_role(contents)]
    return None


def _call_ids(turn: Sequence[Any]) -> list[str]:
    """The ``functionCall`` ids of a model turn (several contents when streamed)."""
    ids: list[object] = []
    for content in turn:
        parts = field(content, "parts")
        for part in parts if isinstance(parts, (list, tuple)) else ():
            call = read(part, "functionCall", "function_call")
            ids.append(unset(field(call, "id")))
    return string_ids(ids)


class GeminiConversations:
    """Gemini requests linked to the response they answer (see the module's description)."""

    def __init__(self, capacity: int, rejected: Callable[[str], bool] | None = None) -> None:
        self.index = _Index(capacity, rejected)

    def link(self, contents: object) -> Linked:
        """The conversation a request continues (a new one when none), its contents kept to settle it."""
        items = contents_of(contents)
        if items is None:
            return Linked(None)
        item_digests = digests(items)
        linked = Linked(None)
        if last_position(items, _MODEL) is not None:
            contents = [plain(item) for item in items]  # the protocol reads JSON-shaped contents
            turns = GEMINI.history(contents)
            found = self.index.link_history(turns, item_digests) if turns else Linked(None)
            if isinstance(found.conversation, GeminiConversation):
                found.conversation.followup = contents
                linked = Linked(found.conversation, [], found.ambiguous, turns or ())
            else:
                linked = Linked(None, None, found.ambiguous, turns or ())
        if linked.conversation is None:
            linked = Linked(self.index.new(), None, linked.ambiguous, linked.turns)
        self.index.requested(linked.conversation, fingerprint(item_digests))  # type: ignore[arg-type]
        return linked
