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

The asynchronous client of ``aiobotocore`` (hence ``aioboto3``, whose clients are aiobotocore's)
overrides that method with a coroutine, ``aiobotocore.client.AioBaseClient._make_api_call``; it is
wrapped the same way, when the application imports ``aiobotocore.client``. Its ``stream`` is an
``AioEventStream``, read with ``async for``, observed the same way.

Linkage across turns: the request's ``messages`` are read into turns by
:data:`~etf_otel.protocols.BEDROCK_CONVERSE` (``toolUse`` blocks of assistant messages, ``toolResult``
blocks of the others, ``status: "error"`` an answer), and only the first message after the answered
assistant message may hold its results, as Converse requires.

``gen_ai.provider.name`` is ``aws.bedrock`` unless ``provider_name=`` or
``OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME`` says another. Instrumenting never imports ``botocore``:
the wrappers are put in place when the application imports ``botocore.client`` or
``aiobotocore.client`` (post-import hooks), so a process that never uses the asynchronous client never
imports ``aiobotocore``.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from functools import partial
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
from etf_otel.integrations._request_pairing import checked, record_provider_refusal, refuse_unsent
from etf_otel.protocols import BEDROCK_CONVERSE

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["PROVIDER", "BedrockInstrumentor", "instrument_bedrock"]

PROVIDER: Final = "aws.bedrock"
"""``gen_ai.provider.name`` of a ``bedrock-runtime`` client."""

_MODULES: Final = {"botocore.client": "BaseClient", "aiobotocore.client": "AioBaseClient"}
"""The module of each client class whose ``_make_api_call`` is wrapped, and the class."""
_METHOD: Final = "_make_api_call"
_SERVICE: Final = "bedrock-runtime"
_STREAMED: Final = "ConverseStream"
_WHOLE: Final = "Converse"
_SDK: Final = "Bedrock"


class BedrockInstrumentor(ClientInstrumentor):
    """Instruments ``bedrock-runtime`` ``converse`` / ``converse_stream`` calls of ``boto3`` with etf-otel.

    ``instrument(**options)`` (:class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`);
    ``uninstrument()`` restores the client.
    """

    _conversations: PrefixConversations | None = None
    _generation = 0
    _installed: dict[str, Any] | None = None
    """The classes wrapped, by module (one instrumentor instance: set in ``_instrument``)."""
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
            self._installed = {}
        for name in _MODULES:
            wrapt.register_post_import_hook(partial(self._wrap, generation=generation), name)

    def _uninstrument(self, **kwargs: Any) -> None:
        with self._lock:
            self._generation += 1
            for name, owner in (self._installed or {}).items():
                remove_own_wrapper(owner, self._acall if name.startswith("aio") else self._call, _METHOD)
            self._installed = None
        self._instrumentation = None
        self._conversations = None

    def _wrap(self, module: ModuleType, generation: int) -> None:
        """Wrap the client class of ``module`` (``botocore.client`` or ``aiobotocore.client``) once."""
        with self._lock, internal_errors_swallowed(f"instrumenting {module.__name__}"):
            installed = self._installed
            if generation != self._generation or installed is None or module.__name__ in installed:
                return
            base = getattr(module, _MODULES.get(module.__name__, ""), None)
            if base is None or not callable(vars(base).get(_METHOD)):
                raise TypeError(f"{module.__name__} does not have the layout this version of etf-otel knows")
            wrapper = self._acall if module.__name__.startswith("aio") else self._call
            wrapt.wrap_function_wrapper(base, _METHOD, wrapper)
            installed[module.__name__] = base

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
        prepared = self._before(instance, args, kwargs)
        refuse_unsent(None if prepared is None else prepared[1], self._instrumentation, _SDK)
        try:
            result = wrapped(*args, **kwargs)
        except Exception as error:
            record_provider_refusal(None if prepared is None else prepared[1], self._instrumentation, error, _SDK)
            raise
        return result if prepared is None else self._after(prepared, result)

    async def _acall(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """aiobotocore's coroutine ``_make_api_call``: awaited as it would be, its answer observed the same way."""
        prepared = self._before(instance, args, kwargs)
        refuse_unsent(None if prepared is None else prepared[1], self._instrumentation, _SDK)
        try:
            result = await wrapped(*args, **kwargs)
        except Exception as error:
            record_provider_refusal(None if prepared is None else prepared[1], self._instrumentation, error, _SDK)
            raise
        return result if prepared is None else self._after(prepared, result)

    def _before(self, instance: Any, args: Any, kwargs: Any) -> tuple[object, Prepared] | None:
        """The operation and what the request decided, before it is sent; ``None``: not observed."""
        with internal_errors_swallowed("preparing a Bedrock request"):
            operation = args[0] if args else kwargs.get("operation_name")
            params = args[1] if len(args) > 1 else kwargs.get("api_params")
            prepared = self._prepare(instance, operation, params)
            return None if prepared is None else (operation, prepared)
        return None

    def _after(self, decided: tuple[object, Prepared], result: Any) -> Any:
        """``result`` handed back: a ``ConverseStream``'s ``stream`` replaced by its observed proxy, a
        ``Converse`` body recorded; anything unexpected returned untouched."""
        operation, prepared = decided
        instrumentation = self._instrumentation
        if instrumentation is None or not isinstance(result, dict):
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
