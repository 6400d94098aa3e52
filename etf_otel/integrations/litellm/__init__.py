"""LiteLLM: ``completion`` / ``acompletion``, streamed or not, observed as the Chat Completions it hands the app.

Importing this package does not import ``litellm``; :class:`LiteLLMInstrumentor` wraps it when
the application imports it (docs/frameworks.md, "LiteLLM").
"""

from etf_otel.integrations.litellm._instrumentor import (
    FALLBACK_PROVIDER,
    LiteLLMInstrumentor,
    instrument_litellm,
    provider_of_call,
)

__all__ = ["FALLBACK_PROVIDER", "LiteLLMInstrumentor", "instrument_litellm", "provider_of_call"]
