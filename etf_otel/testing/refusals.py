"""A provider's 400 refusal, scripted: the error body each provider answers a request it refuses with, so the
real SDKs raise their real errors (``openai.BadRequestError``, ``anthropic.BadRequestError``, botocore's
``ValidationException``, google-genai's ``ClientError``, mistralai's ``SDKError``) against
:class:`~etf_otel.testing.LocalChatServer`.

Each builder takes the provider's message (docs/protocols.md, "The request before it is sent", quotes the real
ones) and returns a :class:`~etf_otel.testing.Script` to enqueue; the server answers the next request with it.
"""

from __future__ import annotations

from typing import Any

from etf_otel.testing._server import Script

__all__ = ["anthropic", "bedrock", "gemini", "mistral", "openai"]

_BAD_REQUEST = 400


def openai(message: str, param: str | None = None, code: str | None = None) -> Script:
    """OpenAI's body (Chat Completions and Responses): ``error.message``, ``type``, ``param``, ``code``."""
    error: dict[str, Any] = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return Script(status=_BAD_REQUEST, body={"error": error})


def anthropic(message: str) -> Script:
    """Anthropic's body: ``{"type": "error", "error": {"type": "invalid_request_error", "message": ...}}``."""
    return Script(
        status=_BAD_REQUEST, body={"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    )


def bedrock(message: str) -> Script:
    """Bedrock Runtime's body: the error's type in ``__type`` (botocore reads the code from it), ``message``."""
    return Script(status=_BAD_REQUEST, body={"__type": "ValidationException", "message": message})


def mistral(message: str) -> Script:
    """Mistral's body: ``{"object": "error", "message": ..., "type": "invalid_request_error", ...}``."""
    body = {"object": "error", "message": message, "type": "invalid_request_error", "param": None, "code": None}
    return Script(status=_BAD_REQUEST, body=body)


def gemini(message: str) -> Script:
    """The Gemini API's body: ``{"error": {"code": 400, "message": ..., "status": "INVALID_ARGUMENT"}}``."""
    return Script(
        status=_BAD_REQUEST, body={"error": {"code": _BAD_REQUEST, "message": message, "status": "INVALID_ARGUMENT"}}
    )
