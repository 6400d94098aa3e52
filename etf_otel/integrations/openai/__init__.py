"""The ``openai`` client: streamed Chat Completions and Responses, observed (docs/protocols.md).

Importing this package does not import ``openai``; :class:`OpenAIInstrumentor` patches the client
when it is instrumented. The SDK's own accumulators (``ChatCompletionStreamState``,
``ResponseStreamState``, the streams of ``chat.completions.stream(...)`` and
``responses.stream(...)``) are compared with the rules by :func:`instrument_accumulator`.
"""

from etf_otel.integrations.openai._instrumentor import (
    FALLBACK_PROVIDER,
    OpenAIInstrumentor,
    detect_provider,
    instrument_openai,
    provider_of_client,
)
from etf_otel.integrations.openai._state import instrument_accumulator

__all__ = [
    "FALLBACK_PROVIDER",
    "OpenAIInstrumentor",
    "detect_provider",
    "instrument_accumulator",
    "instrument_openai",
    "provider_of_client",
]
