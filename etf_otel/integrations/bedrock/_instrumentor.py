"""OpenTelemetry instrumentor for Amazon Bedrock Converse through ``boto3`` / ``botocore``.

``BedrockInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``etf_otel_bedrock`` entry point) observes every ``converse`` and ``converse_stream`` call of a
``bedrock-runtime`` client: it wraps ``botocore.client.BaseClient._make_api_call``, the one method
every operation of every client passes with ``(operation_name, api_params)``, at class level, so
clients created before instrumenting are covered too. Every other operation and service passes
through untouched.

* ``ConverseStream``: the ``stream`` of the returned dict (botocore's ``EventStream``) is replaced by a
  transparent proxy that keeps its ``close()``; the application iterates the same dicts and gets the
  same exceptions (``EventStreamError``, ``ChecksumMismatch``, urllib3's ``ProtocolError``), which fail
  the response. The iterator ending without ``messageStop`` is ``truncated_stream``.
* ``Converse``: the returned dict is judged as a complete body and returned as it is.
* An error before the response (an HTTP error status, after botocore's retries) raises as it would
  without etf-otel; the request was linked all the same, and a ``400`` (``ValidationException``) gets the
  span its response would have had (docs/protocols.md, "The request before it is sent").

Linkage across turns: the request's ``messages`` are read into turns by
:data:`~etf_otel.protocols.BEDROCK_CONVERSE` (``toolUse`` blocks of assistant messages, ``toolResult``
blocks of the others, ``status: "error"`` an answer), and only the first message after the answered
assistant message may hold its results, as Converse requires.

``gen_ai.provider.name`` is ``aws.bedrock`` unless ``provider_name=`` or
``OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME`` says another. Instrumenting never imports ``botocore``:
the wrapper is put in place when the application imports ``botocore.client`` (a post-import hook).
The asynchronous client (``aiobotocore``) is not instrumented yet.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

import wrapt

from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._switches import _disabled, _suppressed
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    Prepared,
    instrumented,
    rejected_by,
    remove_own_wrapper,
)
from etf_otel.integrations._prefix_conversations import PrefixConversations
from etf_otel.integrations._request_pairing import checked, refused_by_provider
from etf_otel.protocols import BEDROCK_CONVERSE

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["PROVIDER", "BedrockInstrumentor", "instrument_bedrock"]

PROVIDER: Final = "aws.bedrock"
"""``gen_ai.provider.name`` of a ``bedrock-runtime`` client."""

_MODULE: Final = "botocore.client"
_METHOD: Final = "_make_api_call"
_SERVICE: Final = "bedrock-runtime"
_STREAMED: Final = "ConverseStream"
_WHOLE: Final = "Converse"


class BedrockInstrumentor(ClientInstrumentor):
    """Instruments ``bedrock-runtime`` ``converse`` / ``converse_stream`` calls of ``boto3`` with etf-otel.

    ``instrument(**options)`` (:class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`);
    ``uninstrument()`` restores the client.
    """

    _conversations: PrefixConversations | None = None
    _generation = 0
    _installed: Any = None
    _lock: Final = threading.RLock()  # BaseInstrumentor makes one instance: no __init__ of ours

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("botocore >= 1.34",)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, capacity = self._set_up(kwargs)
        guarded = bool(instrumentation.guard)
        self._conversations = PrefixConversations(
            capacity, BEDROCK_CONVERSE, rejected_by(instrumentation), guarded=guarded
        )
        with self._lock:
            self._generation += 1
            generation = self._generation
        wrapt.register_post_import_hook(lambda module: self._wrap(module, generation), _MODULE)

    def _uninstrument(self, **kwargs: Any) -> None:
        with self._lock:
            self._generation += 1
            if self._installed is not None:
                remove_own_wrapper(self._installed, self._call, _METHOD)
                self._installed = None
        self._instrumentation = None
        self._conversations = None

    def _wrap(self, module: ModuleType, generation: int) -> None:
        with self._lock, internal_errors_swallowed("instrumenting botocore"):
            if generation != self._generation or self._installed is not None:
                return
            base = getattr(module, "BaseClient", None)
            if base is None or not callable(getattr(base, _METHOD, None)):
                raise TypeError("botocore does not have the layout this version of etf-otel knows")
            wrapt.wrap_function_wrapper(base, _METHOD, self._call)
            self._installed = base

    def _prepare(self, client: Any, operation: object, params: object) -> Prepared | None:
        """The decision for one call: ``None`` for anything but Converse on ``bedrock-runtime``."""
        conversations = self._conversations
        if self._instrumentation is None or conversations is None or _disabled() or _suppressed():
            return None
        if operation not in (_STREAMED, _WHOLE) or _service(client) != _SERVICE:
            return None
        messages = params.get("messages") if isinstance(params, Mapping) else None
        linked = conversations.link(messages)
        provider = self._provider_override or PROVIDER
        prepared = Prepared(
            provider, linked.conversation, linked.result_ids, BEDROCK_CONVERSE, ambiguous=linked.ambiguous
        )
        return checked(prepared, linked, params, self._instrumentation, target=None)  # no id limit is stated

    def _call(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``_make_api_call(operation_name, api_params)``: the call made as it would be, its answer observed."""
        prepared = None
        with internal_errors_swallowed("preparing a Bedrock request"):
            operation = args[0] if args else kwargs.get("operation_name")
            params = args[1] if len(args) > 1 else kwargs.get("api_params")
            prepared = self._prepare(instance, operation, params)
        instrumentation = self._instrumentation
        if prepared is not None and instrumentation is not None and prepared.refusal is not None:
            with internal_errors_swallowed("recording a Bedrock request the guard refused"):
                prepared.refused(instrumentation, prepared.refusal, False)
            raise prepared.refusal  # the request guard: nothing is sent
        try:
            result = wrapped(*args, **kwargs)
        except Exception as error:
            if prepared is not None and instrumentation is not None and refused_by_provider(error):
                with internal_errors_swallowed("recording a Bedrock request the provider refused"):
                    prepared.refused(instrumentation, error, True)
            raise
        if prepared is None or instrumentation is None or not isinstance(result, dict):
            return result
        with internal_errors_swallowed("observing a Bedrock response"):
            if operation == _STREAMED:
                stream = result.get("stream")
                if stream is not None:
                    result["stream"] = prepared.observe(instrumentation, stream)
            else:
                prepared.record(instrumentation, result)
        return result


def _service(client: Any) -> object:
    """The ``service_name`` of a botocore client's service model (``bedrock-runtime``)."""
    meta = getattr(client, "meta", None)
    model = getattr(meta, "service_model", None)
    return getattr(model, "service_name", None)


def instrument_bedrock(**options: Unpack[InstrumentorOptions]) -> BedrockInstrumentor:
    """One line for manual use: instrument ``boto3``'s Bedrock Converse calls and return the instrumentor."""
    return instrumented(BedrockInstrumentor(), options)
