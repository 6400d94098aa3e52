"""The two places every response of the ``openai`` and ``anthropic`` SDKs passes (docs/integrations.md).

Both SDKs are generated from one template: every call shape (``create`` streamed or not,
``with_streaming_response`` / ``with_raw_response`` then ``.parse()``, the ``.stream(...)`` and
``.parse(...)`` helpers, ``beta`` namespaces, the low-level ``post``, the Azure, Bedrock and
Vertex clients) ends in the client's ``request(cast_to, options, stream=..., stream_cls=...)``,
and its answer becomes the application's object in the response's ``_parse()``. So only
those are wrapped, on the SDK's base classes, and a method the SDK adds later is seen too:

* ``SyncAPIClient.request`` / ``AsyncAPIClient.request``: the request as the SDK will send it
  (method, path, JSON body), before it is sent. The instrumentor decides there whether it is a
  model call and of which protocol, and links it to the response it answers
  (:class:`~etf_otel.integrations._instrumentor_base.Prepared`); a response that fails is
  linked all the same. Only the path is read for every other request (files, embeddings, ...).
* ``BaseAPIResponse._parse`` (and ``LegacyAPIResponse._parse``, where the SDK has it): the
  SDK's stream object or its parsed body, which the instrumentor observes (a transparent
  proxy of the stream; a body is judged at once and returned as it is).

The decision reaches the parse through a context variable while ``request`` runs (the SDK
parses inside it), or, for ``with_raw_response`` and ``with_streaming_response`` whose
response is parsed later by the application, through the response object it returned. Each
decision is observed once: a second ``parse()`` (the SDK caches it) or a parse into another
type (``parse(to=...)``) is left alone.

A layer above the SDK that records the response itself, as the application gets it (LiteLLM,
which calls the ``openai`` client and hands the application chunks of its own), runs the call
inside :func:`recorded_above`: the hooks then leave every request of that call alone, so one
model call is recorded once.

Instrumenting never imports the SDK: the hooks are put in place when the application imports
it (a post-import hook), so a process that never uses it pays nothing.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

import wrapt

from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.integrations._instrumentor_base import Method, Prepared, remove_own_wrapper

__all__ = ["SdkHooks", "recorded_above", "request_body", "request_options", "request_route"]

_pending: ContextVar[Prepared | None] = ContextVar("etf_otel_pending_response", default=None)
_above: ContextVar[bool] = ContextVar("etf_otel_recorded_above", default=False)
"""Set while a layer above the SDK records the call's response itself (:func:`recorded_above`)."""
_later: weakref.WeakKeyDictionary[Any, Prepared] = weakref.WeakKeyDictionary()
"""The decisions of responses the application parses after ``request`` returned."""
_later_lock: Final = threading.Lock()

Prepare = Callable[[Any, Any], "Prepared | None"]
"""``(client, options)``: the decision for one request, ``None`` for a request that is no model call."""
Observe = Callable[[Any, Prepared, bool], Any]
"""``(parsed, prepared, is_stream)``: what the application gets instead of ``parsed`` (the same object for a body)."""
Refused = Callable[[Prepared, BaseException, bool], None]
"""``(prepared, error, provider_refused)``: a request that got no response, refused by the provider or not sent."""

_BAD_REQUEST: Final = 400


@contextmanager
def recorded_above() -> Iterator[None]:
    """The SDK requests made inside are recorded by the caller's layer: the hooks leave them alone."""
    token = _above.set(True)
    try:
        yield
    finally:
        _above.reset(token)


def request_options(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The ``options`` argument of ``request(cast_to, options, ...)``."""
    return args[1] if len(args) > 1 else kwargs.get("options")


def request_route(options: Any) -> tuple[str, str] | None:
    """``(method, path)`` of a request's options (the query left out), ``None`` when it names no URL."""
    url = getattr(options, "url", None)
    if not isinstance(url, str):
        return None
    method = getattr(options, "method", None)
    return (method if isinstance(method, str) else "", url.split("?", 1)[0].rstrip("/"))


def request_body(options: Any) -> Mapping[str, Any]:
    """The JSON body of a request as the SDK will send it (after its own transformation)."""
    body = getattr(options, "json_data", None)
    return body if isinstance(body, Mapping) else {}


@dataclass
class SdkHooks:
    """The wrappers of one SDK's ``request`` and ``_parse``, put in place when it is imported."""

    sdk: str
    """The SDK's top-level module: ``openai``, ``anthropic``."""
    prepare: Prepare
    observe: Observe
    supported: Callable[[], bool] = lambda: True
    """Checked once the SDK is imported: ``False`` leaves it as it is (a version this one does not know)."""
    refused: Refused | None = None
    """Records a model request that got no response: the provider's 400, or the request guard's refusal."""
    _generation: int = 0
    _stream_types: tuple[type, ...] = ()
    _installed: list[tuple[Any, str, Any]] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def install(self) -> None:
        """Wrap the SDK now if it is imported, else when it is (never importing it here)."""
        with self._lock:
            self._generation += 1
            generation = self._generation
        wrapt.register_post_import_hook(lambda module: self._wrap(generation, module), self.sdk)

    def uninstall(self) -> None:
        """Remove the wrappers (another instrumentation's wrappers around them stay); a pending hook does nothing."""
        with self._lock:
            self._generation += 1
            for owner, name, wrapper in self._installed:
                remove_own_wrapper(owner, wrapper, name)
            self._installed.clear()

    def _wrap(self, generation: int, module: Any) -> None:
        with self._lock, internal_errors_swallowed(f"instrumenting the {self.sdk} SDK"):
            if generation != self._generation or self._installed or not self.supported():
                return
            base_client = sys.modules.get(f"{self.sdk}._base_client")
            responses = sys.modules.get(f"{self.sdk}._response")
            streaming = sys.modules.get(f"{self.sdk}._streaming")
            if base_client is None or responses is None or streaming is None:
                raise TypeError(f"the {self.sdk} SDK does not have the layout this version of etf-otel knows")
            self._stream_types = (streaming.Stream, streaming.AsyncStream)
            targets: list[tuple[Any, Method]] = [
                (base_client, ("SyncAPIClient", "request", self._request)),
                (base_client, ("AsyncAPIClient", "request", self._async_request)),
                (responses, ("BaseAPIResponse", "_parse", self._parse)),
            ]
            legacy = sys.modules.get(f"{self.sdk}._legacy_response")
            if legacy is not None and hasattr(legacy, "LegacyAPIResponse"):
                targets.append((legacy, ("LegacyAPIResponse", "_parse", self._parse)))
            for owner_module, (cls, name, wrapper) in targets:
                wrapt.wrap_function_wrapper(owner_module, f"{cls}.{name}", wrapper)
                self._installed.append((getattr(owner_module, cls), name, wrapper))

    # --- the request --------------------------------------------------------------------------

    def _decide(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Prepared | None:
        if _above.get():
            return None  # a layer above records this call (recorded_above)
        with internal_errors_swallowed(f"preparing a {self.sdk} request"):
            return self.prepare(instance, request_options(args, kwargs))
        return None

    def _request(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._decide(instance, args, kwargs)
        if prepared is None:
            return wrapped(*args, **kwargs)
        self._guard(prepared)
        token = _pending.set(prepared)
        try:
            result = wrapped(*args, **kwargs)
        except Exception as error:
            self._failed(prepared, error)
            raise
        finally:
            _pending.reset(token)
        return self._parsed_later(result, prepared)

    async def _async_request(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._decide(instance, args, kwargs)
        if prepared is None:
            return await wrapped(*args, **kwargs)
        self._guard(prepared)
        token = _pending.set(prepared)
        try:
            result = await wrapped(*args, **kwargs)
        except Exception as error:
            self._failed(prepared, error)
            raise
        finally:
            _pending.reset(token)
        return self._parsed_later(result, prepared)

    def _guard(self, prepared: Prepared) -> None:
        """Raise the request guard's refusal, if any, before the SDK sends a byte (its span recorded first)."""
        refusal = prepared.refusal
        if refusal is None:
            return
        if self.refused is not None:
            with internal_errors_swallowed(f"recording a {self.sdk} request the guard refused"):
                self.refused(prepared, refusal, False)
        raise refusal

    def _failed(self, prepared: Prepared, error: Exception) -> None:
        """A request the provider refused (``400``, the SDK's ``BadRequestError``) still gets its response's span."""
        if self.refused is None or getattr(error, "status_code", None) != _BAD_REQUEST:  # the SDK's status error
            return
        with internal_errors_swallowed(f"recording a {self.sdk} request the provider refused"):
            self.refused(prepared, error, True)

    @staticmethod
    def _parsed_later(result: Any, prepared: Prepared) -> Any:
        """Remember the decision on a response the application will parse itself (raw, streaming)."""
        if not prepared.taken:
            with internal_errors_swallowed("remembering a response to observe"), _later_lock:
                _later[result] = prepared
        return result

    # --- the parse ----------------------------------------------------------------------------

    def _parse(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        parsed = wrapped(*args, **kwargs)
        if args or kwargs.get("to") is not None:
            return parsed  # into a type of the application's choosing: its own reading
        prepared: Prepared | None = None
        with internal_errors_swallowed("finding the request of a response"):
            with _later_lock:
                prepared = _later.pop(instance, None)
            if prepared is None:
                prepared = _pending.get()
        if prepared is None or prepared.taken:
            return parsed
        prepared.taken = True
        with internal_errors_swallowed(f"observing a {self.sdk} response"):
            return self.observe(parsed, prepared, isinstance(parsed, self._stream_types))
        return parsed
