"""The ``openai`` client: streamed Chat Completions and Responses, observed (docs/protocols.md).

Importing this package does not import ``openai``; :class:`OpenAIInstrumentor` patches the client
when it is instrumented. The SDK's own accumulators (``chat.completions.stream(...)``,
``responses.stream(...)``) are compared with the rules by the helpers re-exported here.
"""

from etf_otel.integrations.openai._instrumentor import (
    FALLBACK_PROVIDER,
    OpenAIInstrumentor,
    detect_provider,
    instrument_openai,
    provider_of_client,
)

__all__ = ["FALLBACK_PROVIDER", "OpenAIInstrumentor", "detect_provider", "instrument_openai", "provider_of_client"]
