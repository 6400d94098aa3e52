"""The ``anthropic`` client: streamed Messages, observed (docs/protocols.md).

Importing this package does not import ``anthropic``; :class:`AnthropicInstrumentor` patches the
client when it is instrumented.
"""

from etf_otel.integrations.anthropic._instrumentor import AnthropicInstrumentor, instrument_anthropic

__all__ = ["AnthropicInstrumentor", "instrument_anthropic"]
