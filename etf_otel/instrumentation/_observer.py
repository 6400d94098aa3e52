"""The observer beside one streamed response (docs/telemetry.md).

A :class:`ResponseObserver` runs the identity rules, through the adapter of the stream's
wire protocol (Chat Completions unless told otherwise), over the same events the
application consumes and reports the response once, labelled with that protocol's name
(``etf.protocol``), when it ends: by exhaustion
(:data:`EOF`), by an error (:data:`ERROR`), or by being closed or abandoned
(:data:`CLOSED`). The stream and assembler wrappers drive it; it never raises into them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanContext

from etf_otel.core._history import Drift
from etf_otel.core._identity import IdentityRules
from etf_otel.core._linkage import Conversation, Finding
from etf_otel.core._pairing_model import PairingCheck
from etf_otel.core._results import AssemblyResult
from etf_otel.core._vocabulary import StreamState
from etf_otel.instrumentation import _linkage as linkage
from etf_otel.instrumentation import _open_calls as open_calls
from etf_otel.instrumentation import _positional as positional
from etf_otel.instrumentation._request_pairing import count_pairing
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._span_attributes import bounded
from etf_otel.instrumentation._telemetry import Telemetry
from etf_otel.protocols import CHAT_COMPLETIONS, StreamAssembler, WireProtocol
from etf_otel.protocols import get as get_protocol
from etf_otel.protocols._bodies import assemble_whole

__all__ = ["CLOSED", "EOF", "ERROR", "ResponseObserver", "observe_failed"]

EOF: Final = "eof"
"""The stream was exhausted."""
ERROR: Final = "error"
"""The stream (or the wrapped assembler) raised."""
CLOSED: Final = "closed"
"""The stream was closed (``close()``, ``aclose()``, leaving ``with``) or garbage collected before its end;
leaving a ``for`` loop is not an end (the stream may be resumed)."""


class ResponseObserver:
    """Runs the identity rules beside one streamed response and reports it once at the end.

    ``telemetry`` is the :class:`~etf_otel.instrumentation._telemetry.Telemetry` of one
    setup (``Instrumentation.observer()`` passes its own). With a ``conversation`` it first
    settles the previous response of that conversation (``tool_message_ids`` are the ids
    the new request answers with, when known): the findings are counted at once and
    recorded as events on this response's span, and the proposals found answered as its
    ``etf.linkage.answered_ids`` (the settlement evidence the audit reads).
    """

    __slots__ = (
        "__weakref__",
        "_answered",
        "answered_spans",
        "_assembler",
        "_at_eof",
        "_base",
        "_conversation",
        "_done",
        "_drift",
        "_findings",
        "_lock",
        "linkage_ambiguous",
        "_parent",
        "pairing",
        "_positional",
        "_protocol",
        "_reported",
        "_started_ns",
        "telemetry",
    )

    def __init__(
        self,
        telemetry: Telemetry,
        rules: IdentityRules,
        conversation: Conversation | None = None,
        *,
        provider_name: str | None = None,
        tool_message_ids: Sequence[str | None] | None = None,
        protocol: WireProtocol | str = CHAT_COMPLETIONS,
    ) -> None:
        self.telemetry = telemetry
        wire = get_protocol(protocol)
        self._assembler = wire.assembler(rules=rules, clock=time.time_ns)
        name = wire.name
        self._protocol = bounded(name) if isinstance(name, str) and name else None  # etf.protocol
        self._positional = wire.link is not None  # its id-less calls are linked by name and order
        self._conversation = conversation
        self._base = telemetry.base_attributes(provider_name)
        self._parent = otel_context.get_current()
        self._started_ns = time.time_ns()
        self._lock = threading.Lock()
        self._done = False
        self._findings: list[Finding] = []
        self._drift: tuple[Drift, ...] = ()
        self._answered: tuple[str, ...] = ()
        self._at_eof: Callable[[], None] | None = None
        self._reported: list[Callable[[AssemblyResult, Mapping[tuple[int, int], SpanContext]], None]] = []
        self.linkage_ambiguous = False
        self.answered_spans: tuple[str, ...] = ()
        """Set by an integration whose request answered id-less proposals: their ``assemble_tool_call`` span ids."""
        """Set by an integration whose request carried results it could link to no single response."""
        self.pairing: PairingCheck | None = None
        """Set by an integration that checked its request's pairing (``etf.request.pairing``)."""
        if conversation is not None:
            with internal_errors_swallowed("settling the previous response"):
                self._findings, self._answered, self._drift = linkage.settle(conversation, tool_message_ids)
                telemetry.count_findings(self._findings, self._base)
                telemetry.count_drift(self._drift, self._base)

    @property
    def finished(self) -> bool:
        return self._done

    @property
    def assembler(self) -> StreamAssembler:
        """The wire protocol's adapter assembling this response by the identity rules."""
        return self._assembler

    @property
    def rules_feed(self) -> Callable[[object], None]:
        """Where a wrapped assembler hands each chunk: the rules' own ``feed``, no frame in between.

        An observer that borrows another observer's assembly (the comparison beside an observed
        raw stream) hands the chunks nowhere: they were fed once already.
        """
        return self._assembler.feed

    def call_at_eof(self, check: Callable[[], None]) -> None:
        """Run ``check`` when the stream is exhausted, before the response is finalized.

        What an integration learns only once the events ran out (the Chat Completions ``[DONE]``
        the SDK swallows) is fed then, at no cost per event.
        """
        self._at_eof = check

    def when_reported(self, callback: Callable[[AssemblyResult, Mapping[tuple[int, int], SpanContext]], None]) -> None:
        """Call ``callback(result, call_spans)`` once the response is reported, however it ended.

        ``call_spans``: the ``assemble_tool_call`` span context of each call by ``(choice, index)``;
        an integration that ran the calls already links their executions to them.
        """
        self._reported.append(callback)

    def observe(self, chunk: object) -> None:
        try:
            self._assembler.feed(chunk)
        except Exception:  # pragma: no cover - the assembler never raises on JSON-shaped input
            observe_failed()

    def finish(self, how: str = EOF) -> AssemblyResult | None:
        """Finalize once; later calls (a finalizer after ``close()``) do nothing."""
        with self._lock:
            if self._done:
                return None
            self._done = True
        if how == EOF and self._at_eof is not None:
            with internal_errors_swallowed("reading the end of a stream"):
                self._at_eof()
        with internal_errors_swallowed("finalizing a response"):
            result = self._assembler.finish()
            if how == ERROR:
                state = StreamState.FAILED
            elif how == CLOSED and result.state is not StreamState.COMPLETED:
                state = StreamState.ABANDONED
            else:
                state = result.state
            self._report(result, state, streamed=True)
            return result
        return None

    def finish_whole(self, events: Sequence[object]) -> AssemblyResult | None:
        """Judge and report, once, a complete body given as the events it would have streamed as
        (:attr:`WireProtocol.body_events`), through this observer's own adapter: nothing was streamed."""
        with self._lock:
            if self._done:
                return None
            self._done = True
        with internal_errors_swallowed("reporting a response body"):
            result = assemble_whole(self._assembler, events)
            self._report(result, result.state, streamed=False)
            return result
        return None

    def _report(self, result: AssemblyResult, state: StreamState, *, streamed: bool) -> None:
        registered, call_spans = self.telemetry.record_response(
            result,
            state,
            self._parent,
            self._started_ns,
            self._conversation,
            self._base,
            self._findings,
            self._protocol,
            self._answered,
            self.linkage_ambiguous,
            streamed,
            self._drift,
            self.pairing,
            answered_spans=self.answered_spans,
        )
        if self.pairing is not None:
            count_pairing(self.telemetry, self.pairing, self._base)
        open_calls.note(self.telemetry, result.calls, registered)  # what an MCP client matches call_tool to
        if self._positional:
            positional.note(self.telemetry, result, call_spans)  # what a host matches an id-less call to
        for callback in self._reported:
            with internal_errors_swallowed("reporting a response to its integration"):
                callback(result, call_spans)


def observe_failed() -> None:  # pragma: no cover - see ResponseObserver.observe
    """Log (or, in strict mode, re-raise) the exception being handled while observing a chunk."""
    with internal_errors_swallowed("observing a chunk"):
        raise
