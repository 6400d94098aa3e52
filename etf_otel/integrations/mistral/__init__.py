"""The Mistral SDK (``mistralai``): ``client.chat.complete`` and ``client.chat.stream``, sync and async,
recorded as Chat Completions.

Importing this package does not import ``mistralai``; :class:`MistralInstrumentor` wraps the SDK when
the application imports it.
"""

from etf_otel.integrations.mistral._instrumentor import PROVIDER, MistralInstrumentor, instrument_mistral

__all__ = ["PROVIDER", "MistralInstrumentor", "instrument_mistral"]
