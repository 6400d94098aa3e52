"""Testing helpers that are part of the product: try and test an integration without a provider.

- :class:`LocalChatServer`: a scripted LLM server on 127.0.0.1 for the Chat Completions, Responses
  and Anthropic Messages paths, driven by the real clients (``python -m etf_otel.testing`` runs
  one from the command line);
- :mod:`~etf_otel.testing.chat`, :mod:`~etf_otel.testing.responses`, :mod:`~etf_otel.testing.anthropic`,
  :mod:`~etf_otel.testing.gemini`, :mod:`~etf_otel.testing.bedrock`, :mod:`~etf_otel.testing.ollama`: the
  wire-event builders of each protocol (plain dicts, :data:`MISSING` leaves a key out);
  :mod:`~etf_otel.testing.refusals`: each provider's 400 refusal body, so the real SDKs raise their real errors;
- the quirk streams: what providers, gateways and bridges have been seen to send, by name;
- :func:`capture`: in-memory tracer and meter providers; the pytest fixture ``etf_capture`` gives one per test.

See ``docs/testing.md``. Importing this package needs no OpenTelemetry SDK; :func:`capture` does.
"""

from etf_otel.testing import anthropic, bedrock, chat, gemini, ollama, refusals, responses
from etf_otel.testing._capture import Capture, MetricPoint, capture
from etf_otel.testing._quirks import (
    ANTHROPIC_QUIRK_STREAMS,
    BEDROCK_QUIRK_STREAMS,
    GEMINI_QUIRK_STREAMS,
    OLLAMA_QUIRK_STREAMS,
    QUIRK_STREAMS,
    QUIRK_TABLES,
    RESPONSES_QUIRK_STREAMS,
    register_quirk_table,
    unregister_quirk_table,
)
from etf_otel.testing._server import DONE, LocalChatServer, RecordedRequest, Responder, Script
from etf_otel.testing._wire import MISSING

__all__ = [
    "ANTHROPIC_QUIRK_STREAMS",
    "BEDROCK_QUIRK_STREAMS",
    "DONE",
    "GEMINI_QUIRK_STREAMS",
    "MISSING",
    "OLLAMA_QUIRK_STREAMS",
    "QUIRK_STREAMS",
    "QUIRK_TABLES",
    "RESPONSES_QUIRK_STREAMS",
    "Capture",
    "LocalChatServer",
    "MetricPoint",
    "RecordedRequest",
    "Responder",
    "Script",
    "anthropic",
    "bedrock",
    "capture",
    "chat",
    "gemini",
    "ollama",
    "refusals",
    "register_quirk_table",
    "responses",
    "unregister_quirk_table",
]
