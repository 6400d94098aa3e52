"""Test helpers that are part of the product: a scripted LLM server and the quirk streams.

The server replays scripted SSE streams on 127.0.0.1 for the Chat Completions, Responses and
Anthropic Messages paths, so the real clients can be driven without an API key.
"""

from etf_otel.testing._quirks import (
    ANTHROPIC_QUIRK_STREAMS,
    QUIRK_STREAMS,
    QUIRK_TABLES,
    RESPONSES_QUIRK_STREAMS,
    register_quirk_table,
    unregister_quirk_table,
)
from etf_otel.testing._server import DONE, LocalChatServer, RecordedRequest, Script, chunk

__all__ = [
    "ANTHROPIC_QUIRK_STREAMS",
    "DONE",
    "QUIRK_STREAMS",
    "QUIRK_TABLES",
    "RESPONSES_QUIRK_STREAMS",
    "LocalChatServer",
    "RecordedRequest",
    "Script",
    "chunk",
    "register_quirk_table",
    "unregister_quirk_table",
]
