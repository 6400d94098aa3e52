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

from typing import Any, Final

from etf_otel.core._divergence import AssembledCall
from etf_otel.core._results import AssemblyResult
from etf_otel.instrumentation._assemblers import AssemblerAdapter, ObservedAssembler
from etf_otel.instrumentation._convenience import _instrumentation
from etf_otel.instrumentation._observer import ResponseObserver
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations._common import fresh_stream_state, observed_stream_manager, then_compare

__all__ = [
    "OPENAI_STATE_ADAPTER",
    "ComparisonObserver",
    "completion_calls",
    "instrument_completion_stream",
    "instrument_openai_state",
    "instrument_stream_manager",
    "observed_assembler",
]


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


OPENAI_STATE_ADAPTER: Final = AssemblerAdapter(
    feed=("handle_chunk",), finish="get_final_completion", done=None, calls=completion_calls
)
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
    instrumentation: Instrumentation, assembler: Any, *, record_response: bool, adapter: AssemblerAdapter
) -> Any:
    """``instrumentation.assembler(...)``, or with ``record_response=False`` the divergence check alone."""
    if record_response:
        return instrumentation.assembler(assembler, adapter=adapter)
    if _disabled():
        return assembler
    return ObservedAssembler(
        assembler, ComparisonObserver(instrumentation.telemetry, instrumentation.rules), adapter=adapter
    )


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
    return _instrumentation(instrumentation, config).assembler(state, adapter=OPENAI_STATE_ADAPTER)


def _is_fresh_state(state: Any) -> bool:
    if not callable(getattr(state, "handle_chunk", None)) or not callable(getattr(state, "get_final_completion", None)):
        return False
    try:
        state.current_completion_snapshot  # noqa: B018 - the SDK asserts it exists once a chunk was handled
    except AssertionError:
        return True
    return False


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
        fresh = fresh_stream_state(stream, _is_fresh_state, record_response)
        if fresh is None:
            return stream
        state, iterator, record_response = fresh
        observed = observed_assembler(
            _instrumentation(instrumentation, config),
            state,
            record_response=record_response,
            adapter=OPENAI_STATE_ADAPTER,
        )
        if observed is state:
            return stream
        stream._state = observed
        stream._iterator = then_compare(iterator, observed, "get_final_completion")
    return stream


def instrument_stream_manager(
    manager: Any,
    *,
    instrumentation: Instrumentation | None = None,
    record_response: bool | None = None,
    **config: Any,
) -> Any:
    """Wrap what ``client.chat.completions.stream(...)`` returns; ``with`` gives the instrumented stream."""
    return observed_stream_manager(manager, instrument_completion_stream, instrumentation, record_response, config)
