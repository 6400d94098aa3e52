"""The ``anthropic`` client: streamed Messages, observed (docs/protocols.md).

Importing this package does not import ``anthropic``; :class:`AnthropicInstrumentor` patches the
client when it is instrumented. The SDK's own accumulation (``MessageStream``, or a
:class:`MessageAccumulator` fed by hand) is compared with the rules by :func:`instrument_accumulator`.
"""

from etf_otel.integrations.anthropic._instrumentor import (
    FALLBACK_PROVIDER,
    AnthropicInstrumentor,
    instrument_anthropic,
    provider_of_client,
)
from etf_otel.integrations.anthropic._state import MessageAccumulator, instrument_accumulator

__all__ = [
    "FALLBACK_PROVIDER",
    "AnthropicInstrumentor",
    "MessageAccumulator",
    "instrument_accumulator",
    "instrument_anthropic",
    "provider_of_client",
]
