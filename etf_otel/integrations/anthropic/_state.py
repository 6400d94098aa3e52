"""Divergence checks for the ``anthropic`` SDK's own accumulator (``accumulate_event``, ``MessageStream``).

``client.messages.stream(...)`` gives a ``MessageStream`` (``AsyncMessageStream``) that
folds every raw event into a ``ParsedMessage`` snapshot with
``anthropic.lib.streaming._messages.accumulate_event`` (plus one JSON buffer per block
index) and hands that snapshot out from ``get_final_message()``. Both ways of using it
are wrapped here without changing what they return or raise; at the end of the message
its ``tool_use`` blocks are compared with what the identity rules (protocol
``"anthropic_messages"``) preserve for the same events, and every difference is recorded
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

Entry points:

* :class:`MessageAccumulator` does exactly what ``MessageStream`` does with each raw
  event (events before ``message_start`` skipped, then ``accumulate_event`` with the
  stream's own snapshot and JSON buffers), for events fed by hand; wrap it with
  :func:`instrument_anthropic_state`: ``accumulate(event)`` feeds the rules too,
  ``get_final_message()`` ends the message and compares.
* :func:`instrument_message_stream` takes the ``MessageStream`` (sync or async) of
  ``with client.messages.stream(...) as stream`` and returns the **same object**: it
  watches the raw events the stream reads and the stream's own snapshot, and compares
  when the events are exhausted (``get_final_message``, ``until_done`` and plain
  iteration all get there). An exception of the SDK's accumulation reaches the caller
  unchanged and is recorded as ``assembler_raised``; a transport error (a dropped
  connection, an ``error`` event) is not the accumulator's and records no divergence.
  ``instrument_message_stream_manager(client.messages.stream(...))`` does that on entering
  the ``with`` block.

``instrument_assembler`` is not the way in for this SDK: it runs the Chat Completions
rules. The ``anthropic`` package is imported only when an event is accumulated.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

from etf_otel.core._divergence import AssembledCall
from etf_otel.instrumentation._assemblers import AssemblerAdapter
from etf_otel.instrumentation._convenience import _instrumentation
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._streams import observer_of
from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations._common import ObjectProxy, compare_now, observed_stream_manager
from etf_otel.integrations.openai._responses_state import observed_protocol_assembler

__all__ = [
    "ANTHROPIC_STATE_ADAPTER",
    "PROTOCOL",
    "MessageAccumulator",
    "instrument_anthropic_state",
    "instrument_message_stream",
    "instrument_message_stream_manager",
    "message_calls",
]

PROTOCOL: Final = "anthropic_messages"
"""The wire protocol whose rules the SDK's assembly is compared with."""

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

_ADAPTER: Final = ANTHROPIC_STATE_ADAPTER


def instrument_anthropic_state(
    accumulator: MessageAccumulator | None = None,
    *,
    instrumentation: Instrumentation | None = None,
    **config: Any,
) -> Any:
    """Wrap a :class:`MessageAccumulator` (a new one when ``None``) for one message.

    ``config`` (``tracer_provider``, ``allow``, ...) builds a dedicated :class:`Instrumentation`
    when ``instrumentation`` is not given.
    """
    if accumulator is None:
        accumulator = MessageAccumulator()
    return observed_protocol_assembler(_instrumentation(instrumentation, config), accumulator, _ADAPTER, PROTOCOL)


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


def _is_fresh_stream(stream: Any) -> bool:
    current = getattr(stream, "_current_snapshot_or_none", None)
    return (
        callable(current)
        and current() is None
        and getattr(stream, "_raw_stream", None) is not None
        and getattr(stream, "_iterator", None) is not None
    )


def instrument_message_stream(
    stream: Any,
    *,
    instrumentation: Instrumentation | None = None,
    record_response: bool | None = None,
    **config: Any,
) -> Any:
    """Add the divergence check to a ``MessageStream`` / ``AsyncMessageStream``; returns ``stream``.

    ``record_response`` ``None`` (default): record the message's spans and metrics unless
    its raw stream is already observed by etf-otel. Anything that is not a fresh SDK
    stream is returned untouched.
    """
    if _disabled():
        return stream
    with internal_errors_swallowed("instrumenting a message stream"):
        if not _is_fresh_stream(stream):
            return stream
        raw = stream._raw_stream
        if record_response is None:
            record_response = observer_of(raw) is None
        observed = observed_protocol_assembler(
            _instrumentation(instrumentation, config),
            _StreamView(stream),
            _VIEW_ADAPTER,
            PROTOCOL,
            record_response=record_response,
        )
        tap = _RawTap(raw, observed)
        iterator = stream._iterator
        checked = (
            _async_checked(iterator, tap, observed)
            if hasattr(iterator, "__anext__")
            else _checked(iterator, tap, observed)
        )
        stream._raw_stream = tap
        stream._iterator = checked
    return stream


def instrument_message_stream_manager(
    manager: Any,
    *,
    instrumentation: Instrumentation | None = None,
    record_response: bool | None = None,
    **config: Any,
) -> Any:
    """Wrap what ``client.messages.stream(...)`` returns; ``with`` gives the instrumented stream."""
    return observed_stream_manager(manager, instrument_message_stream, instrumentation, record_response, config)
