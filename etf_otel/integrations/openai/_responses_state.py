"""Divergence checks for the ``openai`` SDK's own Responses accumulator (``ResponseStreamState``).

``client.responses.stream(...)`` gives a ``ResponseStream`` (``AsyncResponseStream``) that
owns a ``ResponseStreamState`` (``openai.lib.streaming.responses._responses``): every raw
event goes through ``state.handle_event(event)``, and ``stream.get_final_response()``
returns the ``ParsedResponse`` the state built from ``response.completed``, or raises
``RuntimeError`` when none came. Both are wrapped here without changing what they return
or raise; at the end of the response the function calls of that final response are
compared with what the identity rules (protocol ``"responses"``) preserve for the same
events, and every difference is recorded as ``divergent_assembly`` with a bounded
``etf.divergence.kind``.

What the SDK does with the quirks (``openai`` 3.51, pinned in
``tests/integrations/test_responses_state.py`` and shown in ``docs/quirks.md``):

* The final response is ``response.completed``'s ``output`` as sent: a ``call_id``
  changed there (after ``output_item.done``) is taken (``id_replaced``), and the
  argument snapshots of ``function_call_arguments.done`` and ``output_item.done`` are
  never compared with the deltas or with each other (``arguments_differ`` when the
  terminal output disagrees with the deltas). An empty terminal ``output`` gives a
  response without calls (``calls_merged``).
* ``handle_event`` raises ``RuntimeError`` (recorded as ``assembler_raised``) on an
  argument delta for an ``output_index`` with no ``output_item.added`` (an early delta or
  an unknown index), on a ``call_id`` or item ``id`` changed between ``output_item.added``
  and ``output_item.done`` (an empty placeholder ``call_id`` and GitHub Copilot's rotated
  item ids included), on a reused ``output_index`` and on a second ``response.created``
  with another id.
* Without ``response.completed`` (a cut stream, ``response.incomplete``,
  ``response.failed``) ``get_final_response`` raises ``RuntimeError``
  (``assembler_raised``).

Entry points:

* ``instrument_responses_state(state)``: a ``ResponseStreamState`` (a new one when
  ``state`` is ``None``) fed by hand; ``handle_event`` feeds the rules too and
  ``get_final_response()`` (which the SDK's state lacks: it is the stream's, with the
  same ``RuntimeError``) ends the response and compares.
* ``instrument_response_stream(stream)`` takes the ``ResponseStream`` (sync or async) of
  ``with client.responses.stream(...) as stream`` and returns the **same object**: its
  state is replaced by the observed one (every attribute and method forwarded), and when
  its events are exhausted the final response is compared, so iterating the events is
  enough. Instrument it before consuming it (a stream already started is returned
  unchanged). ``instrument_response_stream_manager(client.responses.stream(...))`` does
  that on entering the ``with`` block.

``instrument_assembler`` is not the way in for this SDK: it runs the Chat Completions
rules. The ``openai`` package is imported only when a state has to be created.
"""

from __future__ import annotations

from typing import Any, Final

from etf_otel.core._divergence import AssembledCall
from etf_otel.instrumentation._assemblers import AssemblerAdapter, ObservedAssembler
from etf_otel.instrumentation._convenience import _instrumentation
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations._common import (
    ObjectProxy,
    ObservedStreamManager,
    fresh_stream_state,
    observed_stream_manager,
    then_compare,
)
from etf_otel.integrations.openai._state import ComparisonObserver

__all__ = [
    "NO_COMPLETED_RESPONSE",
    "OPENAI_RESPONSES_STATE_ADAPTER",
    "PROTOCOL",
    "ObservedStreamManager",
    "ResponseStateWithFinal",
    "instrument_response_stream",
    "instrument_response_stream_manager",
    "instrument_responses_state",
    "observed_protocol_assembler",
    "response_calls",
]

PROTOCOL: Final = "responses"
"""The wire protocol whose rules the SDK's assembly is compared with."""

NO_COMPLETED_RESPONSE: Final = "Didn't receive a `response.completed` event."
"""The message of the SDK's ``RuntimeError`` when a stream ends without ``response.completed``."""


def response_calls(response: Any) -> list[AssembledCall]:
    """``(call_id, name, arguments)`` of every ``function_call`` item of a (final) response, in output order."""
    return [
        (getattr(item, "call_id", None), getattr(item, "name", None), getattr(item, "arguments", None))
        for item in getattr(response, "output", None) or ()
        if getattr(item, "type", None) == "function_call"
    ]


class ResponseStateWithFinal(ObjectProxy):
    """A ``ResponseStreamState`` with the stream's ``get_final_response()``; everything else is the state's.

    The SDK's state keeps the final response in ``_completed_response`` and the stream
    reads it there; ``get_final_response`` does what ``ResponseStream.get_final_response``
    does once the events are consumed (the same ``RuntimeError`` without one).
    """

    def get_final_response(self) -> Any:
        response = self.__wrapped__._completed_response
        if not response:
            raise RuntimeError(NO_COMPLETED_RESPONSE)
        return response


OPENAI_RESPONSES_STATE_ADAPTER: Final = AssemblerAdapter(
    feed=("handle_event",), finish="get_final_response", done=None, calls=response_calls
)
"""How a :class:`ResponseStateWithFinal` is driven."""

_ADAPTER: Final = OPENAI_RESPONSES_STATE_ADAPTER


def observed_protocol_assembler(
    instrumentation: Instrumentation,
    assembler: Any,
    adapter: AssemblerAdapter,
    protocol: str,
    *,
    record_response: bool = True,
) -> Any:
    """``assembler`` observed against ``protocol``'s rules; with ``record_response=False`` the divergence check alone.

    ``Instrumentation.assembler`` always runs the Chat Completions rules; the integrations
    of other protocols build their observer here.
    """
    if _disabled():
        return assembler
    if record_response:
        observer = instrumentation.observer(protocol=protocol)
    else:
        observer = ComparisonObserver(instrumentation.telemetry, instrumentation.rules, protocol=protocol)
    return ObservedAssembler(assembler, observer, adapter=adapter)


def _new_state() -> Any:
    from openai._types import omit
    from openai.lib.streaming.responses._responses import ResponseStreamState

    return ResponseStreamState(input_tools=omit, text_format=omit)


def instrument_responses_state(
    state: Any = None,
    *,
    instrumentation: Instrumentation | None = None,
    **config: Any,
) -> Any:
    """Wrap a ``ResponseStreamState`` (a new one when ``state`` is ``None``) for one response.

    The result forwards everything to the state and adds ``get_final_response()`` (also
    when etf-otel is disabled: then it is the bare :class:`ResponseStateWithFinal`).
    ``config`` (``tracer_provider``, ``allow``, ...) builds a dedicated :class:`Instrumentation`
    when ``instrumentation`` is not given.
    """
    if state is None:
        state = _new_state()
    return observed_protocol_assembler(
        _instrumentation(instrumentation, config), ResponseStateWithFinal(state), _ADAPTER, PROTOCOL
    )


def _is_fresh_state(state: Any) -> bool:
    if not callable(getattr(state, "handle_event", None)) or not hasattr(state, "_completed_response"):
        return False
    return (
        getattr(state, "_ResponseStreamState__current_snapshot", None) is None
        and state._completed_response is None
        and not getattr(state, "_output_items", None)
    )


def instrument_response_stream(
    stream: Any,
    *,
    instrumentation: Instrumentation | None = None,
    record_response: bool | None = None,
    **config: Any,
) -> Any:
    """Add the divergence check to a ``ResponseStream`` / ``AsyncResponseStream``; returns ``stream``.

    ``record_response`` ``None`` (default): record the response's spans and metrics unless
    its raw stream is already observed by etf-otel. Anything that is not a fresh SDK
    stream is returned untouched.
    """
    if _disabled():
        return stream
    with internal_errors_swallowed("instrumenting a response stream"):
        fresh = fresh_stream_state(stream, _is_fresh_state, record_response)
        if fresh is None:
            return stream
        state, iterator, record_response = fresh
        observed = observed_protocol_assembler(
            _instrumentation(instrumentation, config),
            ResponseStateWithFinal(state),
            _ADAPTER,
            PROTOCOL,
            record_response=record_response,
        )
        stream._state = observed
        stream._iterator = then_compare(iterator, observed, "get_final_response")
    return stream


def instrument_response_stream_manager(
    manager: Any,
    *,
    instrumentation: Instrumentation | None = None,
    record_response: bool | None = None,
    **config: Any,
) -> Any:
    """Wrap what ``client.responses.stream(...)`` returns; ``with`` gives the instrumented stream."""
    return observed_stream_manager(manager, instrument_response_stream, instrumentation, record_response, config)
