"""OpenTelemetry instrumentor for LiteLLM's ``completion`` and ``acompletion`` (docs/frameworks.md, "LiteLLM").

LiteLLM speaks every provider's API itself and hands the application the Chat Completions
shape: a ``ModelResponse`` for a complete answer, a ``CustomStreamWrapper`` of
``chat.completion.chunk`` objects for a stream, whatever provider it translated from. That is
what is recorded, at the one place the application receives it: the public ``completion`` and
``acompletion`` (``litellm.completion``, the module that defines them, and ``litellm.main``'s).
Below them LiteLLM may call the ``openai`` client's low-level ``post`` and parse the SSE
itself, use its own HTTP client (Anthropic) or a native one: the call is recorded once, here,
and the ``openai`` and ``anthropic`` SDK hooks leave its requests alone
(:func:`~etf_otel.integrations._sdk_hooks.recorded_above`). A call made inside another one
(``acompletion`` runs ``completion``; retries, fallbacks) is the outer call's.

* A stream is returned as a transparent proxy that is iterable both ways (the wrapper has
  ``__iter__`` and ``__aiter__``, and ``acompletion`` returns the same class): a ``for`` and an
  ``async for`` both feed the rules. A stream LiteLLM ends with ``MidStreamFallbackError`` (no
  finish reason came) is recorded failed, and the exception reaches the application as it is.
* A ``ModelResponse`` is judged by the same rules and returned as it is.
* Linkage: the request's ``messages`` are Chat Completions messages whatever the provider, so a
  follow-up is linked to the response it answers as for the ``openai`` client
  (:mod:`etf_otel.integrations._conversation`); only a list or tuple of messages is read. Their
  pairing is checked as Chat Completions pairs them before the call (docs/protocols.md, "The request
  before it is sent"); a call LiteLLM raises a ``400`` for gets the span its response would have had.

``gen_ai.provider.name``: the configured one, else the provider LiteLLM routes to (the
``custom_llm_provider`` argument, the ``provider/`` prefix of the model, or the provider its
model table gives for a bare model name), in the GenAI spelling where one exists
(``anthropic``, ``azure.ai.openai``, ``gcp.gemini``, ...), a LiteLLM provider name otherwise
(a closed set), else :data:`FALLBACK_PROVIDER`.

Importing this module does not import ``litellm``; the wrappers are put in place when the
application imports it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Collection, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

import wrapt

from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    Prepared,
    dependency_met,
    instrumented,
    rejected_by,
    remove_own_wrapper,
)
from etf_otel.integrations._prefix_conversations import PrefixConversations
from etf_otel.integrations._request_pairing import checked, refused_by_provider
from etf_otel.integrations._sdk_hooks import recorded_above
from etf_otel.protocols import CHAT_COMPLETIONS

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["FALLBACK_PROVIDER", "LiteLLMInstrumentor", "instrument_litellm", "provider_of_call"]


_DEPENDENCY: Final = "litellm >= 1.100"

FALLBACK_PROVIDER: Final = "litellm"
"""``gen_ai.provider.name`` of a call whose provider LiteLLM's own tables do not name."""

_GENAI_NAMES: Final = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "anthropic": "anthropic",
    "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "bedrock": "aws.bedrock",
    "groq": "groq",
    "mistral": "mistral_ai",
    "deepseek": "deepseek",
    "xai": "x_ai",
    "perplexity": "perplexity",
    "cohere": "cohere",
    "cohere_chat": "cohere",
    "watsonx": "ibm.watsonx.ai",
}

_inside: ContextVar[bool] = ContextVar("etf_otel_inside_litellm", default=False)
"""Set while a recorded LiteLLM call runs: a call made inside it is its own (not recorded twice)."""

_TARGETS: Final = (
    ("litellm", "completion", False),
    ("litellm", "acompletion", True),
    ("litellm.chat_completions.dispatch", "completion", False),
    ("litellm.chat_completions.dispatch", "acompletion", True),
    ("litellm.main", "completion", False),
    ("litellm.main", "acompletion", True),
)
"""``(module, function, is async)``: where the application (or LiteLLM itself) finds the two calls."""


def _named(value: object) -> str | None:
    name = getattr(value, "value", value)  # LiteLLM's LlmProviders enum, or a plain string
    return name if isinstance(name, str) and name else None


_known: tuple[object, int, frozenset[str]] = (None, 0, frozenset())
"""LiteLLM's provider names, with the list they were read from and its length (read again when either changed)."""


def _known_providers(litellm: Any) -> frozenset[str]:
    global _known
    listed = getattr(litellm, "provider_list", None)
    names: list[Any] = listed if isinstance(listed, list) else []
    if _known[0] is not listed or _known[1] != len(names):
        _known = (listed, len(names), frozenset(name for name in map(_named, names) if name))
    return _known[2]


def provider_of_call(model: object, custom_llm_provider: object = None) -> str:
    """The ``gen_ai.provider.name`` of a LiteLLM call of ``model`` (see the module's documentation)."""
    litellm = sys.modules.get("litellm")
    known = _known_providers(litellm)
    provider = _named(custom_llm_provider)
    if provider is None and isinstance(model, str):
        prefix = model.split("/", 1)[0] if "/" in model else None
        if prefix in known:
            provider = prefix
        else:
            entry = (getattr(litellm, "model_cost", None) or {}).get(model)
            provider = _named(entry.get("litellm_provider")) if isinstance(entry, Mapping) else None
    if provider is None:
        return FALLBACK_PROVIDER
    return _GENAI_NAMES.get(provider) or (provider if provider in known else FALLBACK_PROVIDER)


class LiteLLMInstrumentor(ClientInstrumentor):
    """Instruments LiteLLM's ``completion`` / ``acompletion``, streamed or not, with etf-otel.

    ``instrument(**options)`` (:class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`);
    an option left ``None`` takes its environment variable. ``uninstrument()`` restores LiteLLM.
    """

    _conversations: PrefixConversations | None = None
    _generation = 0
    _installed: tuple[tuple[Any, str, Any], ...] = ()
    """``(module, name, wrapper)`` of each wrapper in place."""
    _lock: Final = threading.Lock()  # one instance per class (BaseInstrumentor is a singleton)

    def instrumentation_dependencies(self) -> Collection[str]:
        return (_DEPENDENCY,)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, capacity = self._set_up(kwargs)
        self._conversations = PrefixConversations(
            capacity, CHAT_COMPLETIONS, rejected_by(instrumentation), guarded=bool(instrumentation.guard)
        )
        with self._lock:
            self._generation += 1
            generation = self._generation
        wrapt.register_post_import_hook(lambda module: self._wrap(generation), "litellm")

    def _uninstrument(self, **kwargs: Any) -> None:
        with self._lock:
            self._generation += 1
            for owner, name, wrapper in self._installed:
                remove_own_wrapper(owner, wrapper, name)
            self._installed = ()
        self._instrumentation = None
        self._conversations = None

    def _wrap(self, generation: int) -> None:
        with self._lock, internal_errors_swallowed("instrumenting litellm"):
            if generation != self._generation or self._installed or not _checked_version():
                return
            for module_name, name, is_async in _TARGETS:
                module = sys.modules.get(module_name)
                if module is None or not callable(vars(module).get(name)):
                    continue  # a layout without that module: the others still are wrapped
                wrapper = self._acompletion if is_async else self._completion
                wrapt.wrap_function_wrapper(module, name, wrapper)
                self._installed = (*self._installed, (module, name, wrapper))

    # --- the call ------------------------------------------------------------------------------

    def _prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Prepared | None:
        """How the response of one call is to be recorded (``None``: not at all), linked to what it answers."""
        conversations = self._conversations
        if self._instrumentation is None or conversations is None or _disabled() or _inside.get():
            return None
        with internal_errors_swallowed("preparing a litellm call"):
            model = args[0] if args else kwargs.get("model")
            messages = args[1] if len(args) > 1 else kwargs.get("messages")
            provider = self._provider_override or provider_of_call(model, kwargs.get("custom_llm_provider"))
            linked = conversations.link(messages)
            prepared = Prepared(provider, linked.conversation, linked.result_ids, ambiguous=linked.ambiguous)
            target = None if kwargs.get("api_base") or kwargs.get("base_url") else _TARGETS_OF.get(provider)
            return checked(prepared, linked, messages, self._instrumentation, target=target)
        return None

    def _refused(self, prepared: Prepared, error: BaseException, provider_refused: bool) -> None:
        """A call that got no response: the span its response would have had (the provider's ``400``, or the
        request guard's refusal, raised here before anything is sent)."""
        instrumentation = self._instrumentation
        if instrumentation is not None and (not provider_refused or refused_by_provider(error)):
            with internal_errors_swallowed("recording a refused litellm call"):
                prepared.refused(instrumentation, error, provider_refused)
        if not provider_refused:
            raise error

    def _completion(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        # ``acompletion=True`` returns ``acompletion(...)``'s coroutine: recorded where it is awaited
        prepared = None if kwargs.get("acompletion") else self._prepare(args, kwargs)
        if prepared is None:
            return wrapped(*args, **kwargs)
        if prepared.refusal is not None:
            self._refused(prepared, prepared.refusal, False)
        token = _inside.set(True)
        try:
            with recorded_above():
                result = wrapped(*args, **kwargs)
        except Exception as error:
            self._refused(prepared, error, True)
            raise
        finally:
            _inside.reset(token)
        return self._observe(result, prepared)

    async def _acompletion(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare(args, kwargs)
        if prepared is None:
            return await wrapped(*args, **kwargs)
        if prepared.refusal is not None:
            self._refused(prepared, prepared.refusal, False)
        token = _inside.set(True)
        try:
            with recorded_above():
                result = await wrapped(*args, **kwargs)
        except Exception as error:
            self._refused(prepared, error, True)
            raise
        finally:
            _inside.reset(token)
        return self._observe(result, prepared)

    def _observe(self, result: Any, prepared: Prepared) -> Any:
        """What the application gets for ``result``: a stream observed, a ``ModelResponse`` recorded as it is."""
        instrumentation = self._instrumentation
        if instrumentation is None:
            return result
        with internal_errors_swallowed("observing a litellm response"):
            litellm = sys.modules.get("litellm")
            stream_type = getattr(litellm, "CustomStreamWrapper", None)
            body_type = getattr(litellm, "ModelResponse", None)
            if isinstance(stream_type, type) and isinstance(result, stream_type):
                return prepared.observe(instrumentation, result)
            if isinstance(body_type, type) and isinstance(result, body_type):
                prepared.record(instrumentation, result)
        return result  # anything else (a text completion) as it is


_TARGETS_OF: Final = {"openai": "openai", "azure.ai.openai": "azure_openai", "mistral_ai": "mistral"}
"""The pairing check's target of a provider LiteLLM routes to with no ``api_base`` of the caller's (its own
host): the id limits those providers state for Chat Completions ids (docs/protocols.md)."""


def _checked_version() -> bool:
    return dependency_met(_DEPENDENCY, "litellm is not instrumented")


def instrument_litellm(**options: Unpack[InstrumentorOptions]) -> LiteLLMInstrumentor:
    """One line for manual use: instrument LiteLLM and return the instrumentor."""
    return instrumented(LiteLLMInstrumentor(), options)
