"""Divergence checks for the ``anthropic`` SDK's own accumulator (``accumulate_event``, ``MessageStream``).

``client.messages.stream(...)`` gives a ``MessageStream`` (``AsyncMessageStream``) that
folds every raw event into a ``ParsedMessage`` snapshot with
``anthropic.lib.streaming._messages.accumulate_event`` (plus one JSON buffer per block
index) and hands that snapshot out from ``get_final_message()``. Both ways of using it
are wrapped here without changing what they return or raise; at the end of the message
its ``tool_use`` blocks are compared with what the identity rules (protocol
``ANTHROPIC_MESSAGES``) preserve for the same events, and every difference is recorded
as ``divergent_assembly`` with a bounded ``etf.divergence.kind``. ``input`` is a parsed
object, so arguments are compared as JSON values (:mod:`etf_otel.core._divergence`).

What the SDK does with the quirks (``anthropic`` 2.14.0, pinned in
``tests/integrations/test_anthropic_state.py`` and shown in ``docs/quirks.md``):

* ``content_block_start`` appends a block whatever its ``index``; deltas and stops look
  the block up by ``index`` as a position. A delta for an index with no block there
  raises ``IndexError`` (``assembler_raised``): a first tool block at index 1 with no
  block 0, or a delta for an index never started. A reused index appends a second block
  that never gets its deltas: they go to the first one (``call_split``).
* Arguments are parsed in partial mode from all the deltas ever sent for an index: a
  delta after ``content_block_stop`` still changes the input, trailing garbage after a
  complete object is dropped, and a string cut mid-way disappears (``arguments_differ``).
* Nothing decides the end: a cut stream gives a partial message with
  ``stop_reason=None``, a second ``message_start`` appends the next message's blocks to
  the first one, and a parameter withheld by ``max_tokens`` is the start placeholder
  ``{}``. That ``{}`` is also what the rules assemble (no divergence): the rules refuse
  the call for ``incomplete_response`` instead.

:class:`MessageAccumulator` does exactly what ``MessageStream`` does with each raw event
(events before ``message_start`` skipped, then ``accumulate_event`` with the stream's own
snapshot and JSON buffers), for events fed by hand. ``instrument_accumulator`` takes one
(``accumulate(event)`` feeds the rules too, ``get_final_message()`` ends the message and
compares), a ``MessageStream`` (sync or async) of ``with client.messages.stream(...) as
stream``, returned as the **same object** (it watches the raw events the stream reads and
the stream's own snapshot, and compares when the events are exhausted:
``get_final_message``, ``until_done`` and plain iteration all get there), or the manager
``client.messages.stream(...)`` returns. An exception of the SDK's accumulation reaches the
caller unchanged and is recorded as ``assembler_raised``; a transport error (a dropped
connection, an ``error`` event) is not the accumulator's and records no divergence.

The ``anthropic`` package is imported only when an event is accumulated.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, Final, TypeVar

from etf_otel.core._divergence import AssembledCall
from etf_otel.instrumentation._assemblers import AssemblerAdapter
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.integrations._accumulators import ObjectProxy, SdkAccumulator, compare_now, observe_accumulator
from etf_otel.protocols import ANTHROPIC_MESSAGES

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from etf_otel.instrumentation._convenience import SetupOptions

__all__ = [
    "ANTHROPIC_STATE_ADAPTER",
    "MESSAGE_ACCUMULATOR",
    "MessageAccumulator",
    "instrument_accumulator",
    "message_calls",
]

_T = TypeVar("_T")

_NOTHING: Final[Any] = object()


def message_calls(message: Any) -> list[AssembledCall]:
    """``(id, name, input)`` of every ``tool_use`` block of a (snapshot or final) message, in content order."""
    return [
        (getattr(block, "id", None), getattr(block, "name", None), getattr(block, "input", None))
        for block in getattr(message, "content", None) or ()
        if getattr(block, "type", None) == "tool_use"
    ]


def _no_message() -> AssertionError:
    # MessageStream.get_final_message asserts that a message_start came.
    return AssertionError("no message_start was accumulated")


class MessageAccumulator:
    """``MessageStream``'s accumulation of raw events, for events fed one by one.

    ``accumulate(event)`` takes a raw stream event (the SDK's typed event, or its parsed
    JSON, which the SDK converts itself) and returns the snapshot so far (``None`` until
    ``message_start``: earlier events are skipped, as the stream skips them).
    ``get_final_message()`` returns the snapshot as ``MessageStream.get_final_message``
    does: whatever was accumulated, ``AssertionError`` when nothing was.
    """

    def __init__(self, output_format: Any = _NOTHING) -> None:
        self._snapshot: Any = None
        self._json_bufs: dict[int, bytes] = {}
        self._output_format = output_format

    @property
    def current_message_snapshot(self) -> Any:
        if self._snapshot is None:
            raise _no_message()
        return self._snapshot

    def accumulate(self, event: Any) -> Any:
        from anthropic._models import construct_type_unchecked
        from anthropic.lib.streaming._messages import accumulate_event
        from anthropic.types import RawMessageStreamEvent
        from pydantic import BaseModel

        if not isinstance(event, BaseModel):  # what accumulate_event does with a dict
            event = construct_type_unchecked(type_=RawMessageStreamEvent, value=event)  # type: ignore[arg-type]
        if self._snapshot is None and getattr(event, "type", None) != "message_start":
            return None
        options: dict[str, Any] = {} if self._output_format is _NOTHING else {"output_format": self._output_format}
        self._snapshot = accumulate_event(
            event=event, current_snapshot=self._snapshot, json_bufs=self._json_bufs, **options
        )
        return self._snapshot

    def get_final_message(self) -> Any:
        return self.current_message_snapshot


ANTHROPIC_STATE_ADAPTER: Final = AssemblerAdapter(
    feed=("accumulate",), finish="get_final_message", done=None, calls=message_calls
)
"""How a :class:`MessageAccumulator` is driven."""


# --- MessageStream --------------------------------------------------------------------------------


class _StreamView:
    """What the observer drives for a ``MessageStream``: the stream accumulates, this only reports.

    ``accumulated(event)`` is called once the stream has accumulated ``event``;
    ``accumulated(event, error)`` when accumulating it raised ``error`` (re-raised, so the
    wrapper records ``assembler_raised``). ``get_final_message`` reads the stream's snapshot
    (the stream's own method would consume the events again).
    """

    def __init__(self, stream: Any) -> None:
        self._stream = weakref.ref(stream)

    def accumulated(self, event: Any, error: BaseException | None = None) -> None:
        if error is not None:
            raise error

    def get_final_message(self) -> Any:
        stream = self._stream()
        snapshot = None if stream is None else stream._current_snapshot_or_none()
        if snapshot is None:
            raise _no_message()
        return snapshot


_VIEW_ADAPTER: Final = AssemblerAdapter(
    feed=("accumulated",), finish="get_final_message", done=None, calls=message_calls
)


class _RawTap(ObjectProxy):
    """The raw event stream a ``MessageStream`` reads: every event it accumulated is reported.

    An event is reported when the stream asks for the next one (it has accumulated it by
    then), the last one when the raw stream ends. ``_self_failed`` tells a transport error
    (raised by the raw stream) from one of the accumulation.
    """

    def __init__(self, raw: Any, observed: Any) -> None:
        super().__init__(raw)
        self._self_observed = observed
        self._self_pending: Any = _NOTHING
        self._self_failed = False

    def _self_settle(self) -> None:
        pending, self._self_pending = self._self_pending, _NOTHING
        if pending is not _NOTHING:
            self._self_observed.accumulated(pending)

    def _self_raise_in_accumulation(self, error: BaseException) -> None:
        """Record that the stream raised ``error`` while accumulating the pending event."""
        if self._self_failed:
            return
        pending, self._self_pending = self._self_pending, _NOTHING
        try:
            self._self_observed.accumulated(None if pending is _NOTHING else pending, error)
        except BaseException:  # the same error, recorded: the caller re-raises it
            return

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self.__wrapped__)
        while True:
            try:
                event = next(iterator)
            except StopIteration:
                return
            except BaseException:
                self._self_failed = True
                raise
            self._self_pending = event
            yield event
            self._self_settle()

    async def __aiter__(self) -> AsyncIterator[Any]:
        iterator = self.__wrapped__.__aiter__()
        while True:
            try:
                event = await iterator.__anext__()
            except StopAsyncIteration:
                return
            except BaseException:
                self._self_failed = True
                raise
            self._self_pending = event
            yield event
            self._self_settle()


def _checked(iterator: Iterator[Any], tap: _RawTap, observed: Any) -> Iterator[Any]:
    try:
        yield from iterator
    except Exception as error:
        tap._self_raise_in_accumulation(error)
        raise
    tap._self_settle()
    compare_now(observed, "get_final_message")


async def _async_checked(iterator: AsyncIterator[Any], tap: _RawTap, observed: Any) -> AsyncIterator[Any]:
    try:
        async for event in iterator:
            yield event
    except Exception as error:
        tap._self_raise_in_accumulation(error)
        raise
    tap._self_settle()
    compare_now(observed, "get_final_message")


class _MessageAccumulator(SdkAccumulator):
    """A ``MessageStream`` owns no state object: the observer drives a view of it, fed by a tap on its raw stream."""

    protocol = ANTHROPIC_MESSAGES
    adapter = ANTHROPIC_STATE_ADAPTER
    states = frozenset({"etf_otel.MessageAccumulator"})
    streams = frozenset({"anthropic.MessageStream", "anthropic.AsyncMessageStream"})
    managers = frozenset({"anthropic.MessageStreamManager", "anthropic.AsyncMessageStreamManager"})

    def new_state(self) -> Any:
        return MessageAccumulator()

    def stream_target(self, stream: Any) -> tuple[Any, AssemblerAdapter] | None:
        current = getattr(stream, "_current_snapshot_or_none", None)
        fresh = (
            callable(current)
            and current() is None
            and getattr(stream, "_raw_stream", None) is not None
            and getattr(stream, "_iterator", None) is not None
        )
        return (_StreamView(stream), _VIEW_ADAPTER) if fresh else None

    def attach(self, stream: Any, observed: Any, adapter: AssemblerAdapter) -> None:
        tap = _RawTap(stream._raw_stream, observed)
        iterator = stream._iterator
        checked = (
            _async_checked(iterator, tap, observed)
            if hasattr(iterator, "__anext__")
            else _checked(iterator, tap, observed)
        )
        stream._raw_stream = tap
        stream._iterator = checked


MESSAGE_ACCUMULATOR: Final = _MessageAccumulator()


def instrument_accumulator(
    target: _T,
    *,
    instrumentation: Instrumentation | None = None,
    record_response: bool | None = None,
    **options: Unpack[SetupOptions],
) -> _T:
    """Compare an ``anthropic`` accumulator with the rules; returns ``target`` (or a transparent proxy of it).

    ``target`` is a :class:`MessageAccumulator` fed by hand, the ``MessageStream`` of ``with
    client.messages.stream(...)`` (changed in place, instrument it before consuming it), or
    the manager ``client.messages.stream(...)`` returns. Anything else is returned unchanged.
    ``record_response`` ``None``: an accumulator records its response, a stream unless its
    raw stream is already observed (the Anthropic instrumentor). Without ``instrumentation``,
    the shared setup of ``options`` (``tracer_provider``, ...).
    """
    return observe_accumulator(target, (MESSAGE_ACCUMULATOR,), instrumentation, record_response, options)
