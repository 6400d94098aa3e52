"""The Responses API part of the ``openai`` instrumentor (docs/protocols.md).

:class:`~etf_otel.integrations.openai._instrumentor.OpenAIInstrumentor` hands it the Responses
requests of every call shape (:mod:`etf_otel.integrations._sdk_hooks`):

* ``POST /responses``: ``responses.create`` streamed or not, ``responses.stream(...)``,
  ``responses.parse(...)``, the raw and streaming-response forms. A stream gets the same
  transparent proxy as Chat Completions, observed with the ``RESPONSES`` protocol; a
  complete body is judged at once. A background response (``queued``) is no answer yet and
  is not recorded.
* ``GET /responses/{id}?stream=true``: ``responses.stream(response_id=...)`` replays a stored
  response through ``retrieve(stream=True)`` (from its first event; ``starting_after`` is
  applied by the helper on the client side). Such a stream is observed too. A direct
  ``retrieve(stream=True, starting_after=n)`` starts mid-response and is left alone: its
  first events are missing, so the rules could only call it broken.

Linkage across turns. The results of a response are the
``function_call_output`` items of the next request, matched by ``call_id`` (an ``fc_``
item id there is an ``orphaned_result``). The response the next request answers is found by
what it carries, first match wins (:mod:`etf_otel.integrations._conversation`):

* the ``call_id`` of the ``function_call`` items of its last run of output items: the
  response that proposed them; the ``function_call_output`` items after that run answer it;
* ``previous_response_id``: the response with that id, taken from the ``response.created``
  event as it passed through the stream; every ``function_call_output`` of the input answers;
* by prefix: the new ``input`` repeats an earlier request's input items, then that
  response's output items (``function_call``, ``reasoning``, assistant messages, ...), then
  the outputs. Each run of output items is tried, the latest first, as the end of an earlier
  request's input (a SHA-256 of the items; no content is kept), when exactly one earlier
  request had it; the ``function_call_output`` items after it answer.

Only the latest response of a conversation can be settled: a request that continues an
older one (a retry, a branch) is not checked, rather than compared with proposals that
were never its own. Every index keeps at most ``max_conversations`` conversations (least
recently used first out).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.integrations._conversation import (
    ConversationIndex,
    Linked,
    LinkedConversation,
    digests,
    fingerprint,
    string_or_none,
)
from etf_otel.integrations._instrumentor_base import Prepared, rejected_by
from etf_otel.integrations._request_pairing import checked
from etf_otel.protocols import RESPONSES, field

__all__ = ["ResponsesLinkage", "output_run_starts", "result_call_ids"]

_CREATED: Final = "response.created"

# --- input items ------------------------------------------------------------------------------------------


def input_items(value: object) -> list[Any]:
    """The ``input`` of a request as a list of items: a string is one user message."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, (list, tuple)):
        return list(value)
    return []  # omitted (``omit``), an iterator (reading it would consume it), or another shape


def output_run_starts(items: Sequence[Any]) -> list[int]:
    """Positions where a run of output items begins (never 0: an empty prefix links nothing), as the
    protocol's reading of a request into turns has them (:attr:`~etf_otel.protocols.WireProtocol.history`)."""
    return [turn.at for turn in RESPONSES.history(list(items)) or () if turn.assistant and turn.at > 0]


def result_call_ids(items: Sequence[Any]) -> list[str | None]:
    """The ``call_id`` of every ``function_call_output`` item, in order (``None`` when not a string)."""
    return [string_or_none(call_id) for call_id in RESPONSES.result_ids(list(items)) or ()]


class ResponsesLinkage:
    """The Responses API's requests, linked across turns, and their responses observed."""

    def __init__(self, instrumentation: Instrumentation, max_conversations: int) -> None:
        self._instrumentation: Instrumentation | None = instrumentation
        self.index = ConversationIndex(max_conversations, rejected_by(instrumentation))

    def close(self) -> None:
        self._instrumentation = None

    # --- before the request -----------------------------------------------------------------

    def prepare(self, provider: str | None, body: Mapping[str, Any], target: str | None = None) -> Prepared | None:
        """Which conversation a ``POST /responses`` continues and the results it carries, before it is sent,
        and its pairing as the provider behind ``target`` checks it."""
        instrumentation = self._instrumentation
        if instrumentation is None:
            return None
        items = input_items(body.get("input"))
        item_digests = digests(items)
        previous = body.get("previous_response_id")
        linked = self._link(items, item_digests, previous)
        request_key = fingerprint(item_digests) if items else None
        prepared = Prepared(
            provider, linked.conversation, linked.result_ids, RESPONSES, request_key, ambiguous=linked.ambiguous
        )
        request = {**body, "input": items}
        held = self._held_calls(previous)
        return checked(prepared, linked, request, instrumentation, target=target, held_calls=held)

    def _held_calls(self, previous: object) -> frozenset[str] | None:
        """The calls of the stored response ``previous_response_id`` names, when this process saw it end."""
        if not isinstance(previous, str) or not previous:
            return None
        found = self.index.by_response(previous)[0]
        return found.response_ids if found is not None and found.response_id == previous else None

    def _link(self, items: list[Any], item_digests: list[bytes], previous: object) -> Linked:
        """The evidence of a request (:meth:`ConversationIndex.link_history`): the call ids of its runs of
        output items, the latest first, its ``previous_response_id``, then the items before each run as an
        earlier request's whole input."""
        turns = RESPONSES.history(items)
        if not turns:
            return Linked(None)
        instrumentation = self._instrumentation
        guarded = instrumentation is not None and bool(instrumentation.guard)
        return self.index.link_history(turns, item_digests, previous, guarded)._replace(turns=turns)

    def prepare_replay(self, provider: str | None, query: Mapping[str, Any]) -> Prepared | None:
        """``GET /responses/{id}?stream=true``: a stored response streamed again from its first event,
        a new conversation with no results. From ``starting_after`` on, its first events are
        missing (the rules could only call it broken); read without ``stream``, it is a response
        recorded already: both are left alone."""
        if self._instrumentation is None or query.get("stream") is not True:
            return None
        if isinstance(query.get("starting_after"), int):
            return None
        return Prepared(provider, protocol=RESPONSES)

    # --- the response -----------------------------------------------------------------------

    def observe(self, parsed: Any, prepared: Prepared, is_stream: bool) -> Any:
        """The proxy the application gets for a stream of Responses events; a body is recorded and returned."""
        instrumentation = self._instrumentation
        if instrumentation is None:
            return parsed
        conversation = prepared.conversation
        if not isinstance(conversation, LinkedConversation):
            conversation = prepared.conversation = self.index.new()  # result_ids are None for it
        if is_stream:
            observed = prepared.observe(instrumentation, parsed)
            if observed is parsed:
                return parsed  # not observed (disabled, suppressed): nothing to link either
        elif prepared.record(instrumentation, parsed) is None:
            return parsed
        else:
            observed = parsed
        # The request reached the model: it is now the conversation's latest.
        conversation.response_id = None
        conversation.request_key = None
        if prepared.request_key is not None:
            self.index.requested(conversation, prepared.request_key)
        if is_stream:
            _watch_response_id(parsed, self._started(conversation))
        else:
            response_id = field(parsed, "id")
            if isinstance(response_id, str) and response_id:
                self.index.responded(conversation, response_id)
        return observed

    def _started(self, conversation: LinkedConversation) -> Callable[[str], None]:
        def started(response_id: str) -> None:
            self.index.responded(conversation, response_id)

        return started


def _announce(event: object, started: Callable[[str], None]) -> bool:
    """Tell ``started`` the response id of a ``response.created`` event; whether it was one."""
    with internal_errors_swallowed("reading a response id"):
        if getattr(event, "type", None) == _CREATED:
            response_id = field(field(event, "response"), "id")
            if isinstance(response_id, str) and response_id:
                started(response_id)
                return True
    return False


def _watch_response_id(stream: Any, started: Callable[[str], None]) -> None:
    """Call ``started`` with the response id when the SDK ``stream`` yields ``response.created``.

    Wraps that one instance's iterator (``_iterator``, made when the stream was built and
    not started yet): the SDK's own event objects pass through unchanged, as do its
    exceptions. The sync side hands the rest of the stream to ``itertools.chain`` once the
    id is known (no Python frame per later event); the async side passes every event
    through one async generator.
    """
    iterator = getattr(stream, "_iterator", None)
    if iterator is None:
        return
    if hasattr(iterator, "__anext__"):

        async def watching_async() -> AsyncIterator[Any]:
            waiting = True
            async for event in iterator:
                if waiting and _announce(event, started):
                    waiting = False
                yield event

        stream._iterator = watching_async()
    else:

        def until_announced() -> Iterator[Any]:
            for event in iterator:
                announced = _announce(event, started)
                yield event
                if announced:
                    return

        stream._iterator = itertools.chain(until_announced(), iterator)
