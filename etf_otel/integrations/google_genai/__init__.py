"""The ``google-genai`` client: Gemini responses, streamed or not, observed (docs/protocols.md).

Importing this package does not import ``google.genai``; :class:`GoogleGenAIInstrumentor` patches
the client when the application imports it.
"""

from etf_otel.integrations.google_genai._instrumentor import (
    DEVELOPER_PROVIDER,
    VERTEX_PROVIDER,
    GoogleGenAIInstrumentor,
    instrument_google_genai,
)

__all__ = ["DEVELOPER_PROVIDER", "VERTEX_PROVIDER", "GoogleGenAIInstrumentor", "instrument_google_genai"]
