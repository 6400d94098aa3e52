"""Google ADK: the tools its agents run, recorded as executions of the preserved calls (docs/frameworks.md).

Importing this package does not import ``google.adk``; :class:`ADKInstrumentor` hooks ADK's tool caller
and its tool-span tracing when the application imports them. ADK's model calls go through
``google-genai``, which the google-genai instrumentor (``etf_otel_google_genai``) records.
"""

from etf_otel.integrations.adk._instrumentor import ADKInstrumentor, instrument_adk

__all__ = ["ADKInstrumentor", "instrument_adk"]
