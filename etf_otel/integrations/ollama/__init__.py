"""Ollama's native chat through the ``ollama`` client: ``Client.chat`` and ``AsyncClient.chat`` observed.

Importing this package does not import ``ollama``; :class:`OllamaInstrumentor` wraps the client when
the application imports it.
"""

from etf_otel.integrations.ollama._instrumentor import PROVIDER, OllamaInstrumentor, instrument_ollama

__all__ = ["PROVIDER", "OllamaInstrumentor", "instrument_ollama"]
