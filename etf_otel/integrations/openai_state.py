"""Divergence checks for the ``openai`` SDK's own accumulator (``ChatCompletionStreamState``).

The SDK assembles streamed tool calls itself in two places: ``ChatCompletionStreamState``
(fed by hand with ``handle_chunk``) and the ``chat.completions.stream(...)`` helper, whose
``ChatCompletionStream`` owns such a state. Both are wrapped here without changing what
they return or raise; at the end of the response the calls the SDK assembled are compared
with what the identity rules preserve for the same chunks, and every difference is
recorded as ``divergent_assembly`` with a bounded ``etf.divergence.kind``.

* ``instrument_openai_state(state)`` (or ``instrument_assembler(state, adapter=OPENAI_STATE_ADAPTER)``):
  ``handle_chunk`` feeds the rules too; ``get_final_completion()`` ends the response and
  compares. An exception of ``handle_chunk`` or ``get_final_completion`` (the SDK raises
  ``IndexError`` when the first tool index is 1, ``AssertionError`` on ``type: null``,
  ``LengthFinishReasonError`` on ``finish_reason: "length"``) reaches the caller unchanged
  and is recorded as ``assembler_raised``.
* ``instrument_completion_stream(stream)`` takes the ``ChatCompletionStream`` (sync or
  async) that ``with client.chat.completions.stream(...) as stream`` gives, and returns the
  **same object**: its state is replaced by the observed state (every attribute and method
  is forwarded) and, when its events are exhausted, the final completion is compared, so
  the check also happens for applications that only iterate the events. Instrument it
  before consuming it (a stream already started is returned unchanged).
  ``instrument_stream_manager(client.chat.completions.stream(...))`` does that on entering
  the ``with`` block.

With the OpenAI instrumentor active the helper's raw stream is already observed (response
and call spans, metrics); the stream adapter then only adds the divergence check, so one
response is never recorded twice.

The ``openai`` package is imported only when a state has to be created.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import wrapt

from etf_otel.core.divergence import AssembledCall
from etf_otel.core.results import AssemblyResult
from etf_otel.instrumentation._switches import _disabled
from etf_otel.instrumentation.assemblers import ObservedAssembler
from etf_otel.instrumentation.convenience import _instrumentation
from etf_otel.instrumentation.observer import ResponseObserver
from etf_otel.instrumentation.safety import internal_errors_swallowed
from etf_otel.instrumentation.setup import Instrumentation
from etf_otel.instrumentation.streams import ObservedAsyncStream, ObservedStream

__all__ = [
    "OPENAI_STATE_ADAPTER",
    "ComparisonObserver",
    "completion_calls",
    "instrument_completion_stream",
    "instrument_openai_state",
    "instrument_stream_manager",
    "observed_assembler",
]

if TYPE_CHECKING:
    _ObjectProxy = wrapt.ObjectProxy[Any]
else:
    _ObjectProxy = wrapt.ObjectProxy


def completion_calls(completion: Any) -> list[AssembledCall]:
    """``(id, name, arguments)`` of every tool call of a (snapshot or final) ``ChatCompletion``, in choice order."""
    calls: list[AssembledCall] = []
    for choice in getattr(completion, "choices", None) or ():
        message = getattr(choice, "message", None)
        for tool_call in getattr(message, "tool_calls", None) or ():
            function = getattr(tool_call, "function", None)
            calls.append(
                (getattr(tool_call, "id", None), getattr(function, "name", None), getattr(function, "arguments", None))
            )
    return calls


OPENAI_STATE_ADAPTER: dict[str, Any] = {
    "feed": ("handle_chunk",),
    "finish": "get_final_completion",
    "done": None,
    "calls": completion_calls,
}
"""How :func:`~etf_otel.instrumentation.instrument_assembler` drives a ``ChatCompletionStreamState``."""


class ComparisonObserver(ResponseObserver):
    """Runs the rules for the divergence check only, recording no response telemetry.

    For a response that another observer (the stream proxy of the OpenAI instrumentor)
    already records: the divergence events and counts are the only output.
    """

    def finish(self, how: str = "eof") -> AssemblyResult | None:
        with self._lock:
            if self._done:
                return None
            self._done = True
        return self._assembler.finish()


def observed_assembler(
    instrumentation: Instrumentation, assembler: Any, *, record_response: bool, **adapter: Any
) -> Any:
    """``instrumentation.assembler(...)``, or with ``record_response=False`` the divergence check alone."""
    if record_response:
        return instrumentation.assembler(assembler, **adapter)
    if _disabled():
        return assembler
    return ObservedAssembler(assembler, ComparisonObserver(instrumentation.telemetry, instrumentation.rules), **adapter)


def instrument_openai_state(
    state: Any = None,
    *,
    instrumentation: Instrumentation | None = None,
    **config: Any,
) -> Any:
    """Wrap a ``ChatCompletionStreamState`` (a new one when ``state`` is ``None``) for one response.

    ``config`` (``tracer_provider``, ``allow``, ...) builds a dedicated :class:`Instrumentation`
    when ``instrumentation`` is not given.
    """
    if state is None:
        from openai.lib.streaming.chat import ChatCompletionStreamState

        state = ChatCompletionStreamState()
    return _instrumentation(instrumentation, config).assembler(state, **OPENAI_STATE_ADAPTER)


def _is_fresh_state(state: Any) -> bool:
    if not callable(getattr(state, "handle_chunk", None)) or not callable(getattr(state, "get_final_completion", None)):
        return False
    try:
        state.current_completion_snapshot  # noqa: B018 - the SDK asserts it exists once a chunk was handled
    except AssertionError:
        return True
    return False


def _compare_now(observed: Any) -> None:
    """End the response: the observed ``get_final_completion`` compares (or records that it raised)."""
    try:
        observed.get_final_completion()
    except Exception:  # recorded as assembler_raised; the application meets it when it asks for the completion
        return


def _finishing(iterator: Iterator[Any], observed: Any) -> Iterator[Any]:
    yield from iterator
    _compare_now(observed)


async def _async_finishing(iterator: AsyncIterator[Any], observed: Any) -> AsyncIterator[Any]:
    async for event in iterator:
        yield event
    _compare_now(observed)


def instrument_completion_stream(
    stream: Any,
    *,
    instrumentation: Instrumentation | None = None,
    record_response: bool | None = None,
    **config: Any,
) -> Any:
    """Add the divergence check to a ``ChatCompletionStream`` / ``AsyncChatCompletionStream``; returns ``stream``.

    ``record_response`` ``None`` (default): record the response's spans and metrics unless
    the raw stream is already observed by etf-otel (the OpenAI instrumentor).
    Anything that is not a fresh SDK stream is returned untouched.
    """
    if _disabled():
        return stream
    with internal_errors_swallowed("instrumenting a completion stream"):
        state = getattr(stream, "_state", None)
        iterator = getattr(stream, "_iterator", None)
        if iterator is None or not _is_fresh_state(state):
            return stream
        if record_response is None:
            raw = getattr(stream, "_raw_stream", None)
            record_response = not isinstance(raw, (ObservedStream, ObservedAsyncStream))
        observed = observed_assembler(
            _instrumentation(instrumentation, config), state, record_response=record_response, **OPENAI_STATE_ADAPTER
        )
        if observed is state:
            return stream
        finishing = (
            _async_finishing(iterator, observed) if hasattr(iterator, "__anext__") else _finishing(iterator, observed)
        )
        stream._state = observed
        stream._iterator = finishing
    return stream


class _ObservedStreamManager(_ObjectProxy):
    """``ChatCompletionStreamManager`` (sync or async) whose stream gets the divergence check on entry."""

    def __init__(self, manager: Any, instrumentation: Instrumentation, record_response: bool | None) -> None:
        super().__init__(manager)
        self._self_instrumentation = instrumentation
        self._self_record_response = record_response

    def __enter__(self) -> Any:
        stream = self.__wrapped__.__enter__()
        return instrument_completion_stream(
            stream, instrumentation=self._self_instrumentation, record_response=self._self_record_response
        )

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)

    async def __aenter__(self) -> Any:
        stream = await self.__wrapped__.__aenter__()
        return instrument_completion_stream(
            stream, instrumentation=self._self_instrumentation, record_response=self._self_record_response
        )

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self.__wrapped__.__aexit__(*exc_info)


def instrument_stream_manager(
    manager: Any,
    *,
    instrumentation: Instrumentation | None = None,
    record_response: bool | None = None,
    **config: Any,
) -> Any:
    """Wrap what ``client.chat.completions.stream(...)`` returns; ``with`` gives the instrumented stream."""
    if _disabled():
        return manager
    return _ObservedStreamManager(manager, _instrumentation(instrumentation, config), record_response)
