"""Divergence checks for the ``openai`` SDK's own Responses accumulator (``ResponseStreamState``).

``client.responses.stream(...)`` gives a ``ResponseStream`` (``AsyncResponseStream``) that
owns a ``ResponseStreamState`` (``openai.lib.streaming.responses._responses``): every raw
event goes through ``state.handle_event(event)``, and ``stream.get_final_response()``
returns the ``ParsedResponse`` the state built from ``response.completed``, or raises
``RuntimeError`` when none came. Both are wrapped here without changing what they return
or raise; at the end of the response the function calls of that final response are
compared with what the identity rules (protocol ``RESPONSES``) preserve for the same
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

``instrument_accumulator`` takes a ``ResponseStreamState`` fed by hand (``handle_event``
feeds the rules too; ``get_final_response()``, which the SDK's state lacks, is the stream's,
with the same ``RuntimeError``, and ends the response and compares), a ``ResponseStream``
(sync or async) of ``with client.responses.stream(...) as stream``, returned as the **same
object** (its state replaced by the observed one, the final response compared when its
events are exhausted; a stream already started is returned unchanged), or the manager
``client.responses.stream(...)`` returns.

The ``openai`` package is never imported here.
"""

from __future__ import annotations

from typing import Any, Final

from etf_otel.core._divergence import AssembledCall
from etf_otel.instrumentation._assemblers import AssemblerAdapter
from etf_otel.integrations._accumulators import ObjectProxy, SdkAccumulator
from etf_otel.protocols import RESPONSES

__all__ = [
    "NO_COMPLETED_RESPONSE",
    "OPENAI_RESPONSES_STATE_ADAPTER",
    "RESPONSE_ACCUMULATOR",
    "ResponseStateWithFinal",
    "response_calls",
]

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


class _ResponseAccumulator(SdkAccumulator):
    protocol = RESPONSES
    adapter = OPENAI_RESPONSES_STATE_ADAPTER
    states = frozenset({"openai.ResponseStreamState"})
    streams = frozenset({"openai.ResponseStream", "openai.AsyncResponseStream"})
    managers = frozenset({"openai.ResponseStreamManager", "openai.AsyncResponseStreamManager"})

    def new_state(self) -> Any:
        from openai._types import omit
        from openai.lib.streaming.responses._responses import ResponseStreamState

        return ResponseStreamState(input_tools=omit, text_format=omit)

    def hand_fed(self, state: Any) -> Any:
        return ResponseStateWithFinal(state)

    def is_fresh_state(self, state: Any) -> bool:
        if not callable(getattr(state, "handle_event", None)) or not hasattr(state, "_completed_response"):
            return False
        return (
            getattr(state, "_ResponseStreamState__current_snapshot", None) is None
            and state._completed_response is None
            and not getattr(state, "_output_items", None)
        )


RESPONSE_ACCUMULATOR: Final = _ResponseAccumulator()
