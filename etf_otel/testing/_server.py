"""An in-process LLM API server that replays scripted SSE streams on 127.0.0.1.

Why this exists: the demo (``etf-otel demo``) and the tests must drive the *real* ``openai`` client, whose
HTTP stack, SSE decoder and chunk models are exactly what production code sees, without any external
server. Mocking the transport would skip the parts that matter here: how the SDK frames events, how it
treats ``id: null`` in a tool-call fragment, and what it does when a connection dies mid-stream.

Usage::

    with LocalChatServer() as server:
        server.enqueue(Script(events=chat.finished(chat.chunk(chat.fragment(0, "call_1", "f", "{}")))))
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        for event in client.chat.completions.create(model="m", messages=[...], stream=True):
            ...
        server.requests[0].body["messages"]  # what the client sent

Wire format, chosen to match real providers closely enough that the SDK takes its normal code paths:

- Each ``POST`` to one of the streaming endpoints (``/v1/chat/completions``, ``/v1/responses`` for the
  OpenAI Responses API, ``/v1/messages`` for Anthropic Messages) consumes the next queued :class:`Script`
  (FIFO). With nothing queued the answer is ``500`` with an OpenAI-shaped JSON error, so a test that
  under-scripts fails loudly.
- The Responses and Anthropic APIs name each event with an ``event:`` line before its ``data:``; a
  script with ``named=True`` does the same, taking the name from the event's ``type``.
- A 200 answer is ``Content-Type: text/event-stream`` over HTTP/1.1 with ``Transfer-Encoding: chunked``
  and ``Connection: close``. Every event is one ``data: ...`` frame in its own HTTP chunk, written
  straight to the socket, so the client reads incrementally.
- Chunked framing is what makes the two ways a stream can end early distinguishable on the client:

  * a script without a terminal event and without ``cut_after`` ends the body *properly* (final
    zero-length chunk): the SDK simply stops iterating, with no error (a clean but truncated stream);
  * ``cut_after=n`` sends ``n`` events and then shuts the socket down without the final chunk: the
    client's HTTP layer sees an incomplete body and the ``openai`` SDK raises ``APIConnectionError``
    (observed with openai 3.51 / httpx2; see ``tests/testing/test_server.py``). The socket is shut down with
    FIN, not reset, so the events already sent are always delivered: the cut is deterministic.

- Gemini's ``google-genai`` client posts to ``/v1beta/models/{model}:streamGenerateContent?alt=sse``
  (streamed) and ``/v1beta/models/{model}:generateContent`` (not streamed): a path that ends with a
  protocol's ``:method`` request path is routed by that suffix, whatever the model and version
  before it. The non-streamed ``:generateContent`` answers ``application/json``: the script's
  ``body``, else its first event (a chunk is a complete body). Every SSE event is one ``data: {...}``
  line with a space after the colon, as the Gemini SDK requires (it fails on comments and
  ``event:`` lines, so a Gemini script is never ``named``).
- Amazon Bedrock's ``boto3`` client posts to ``/model/{modelId}/converse-stream`` (streamed) and
  ``/model/{modelId}/converse`` (a complete body). A streamed answer there is
  ``Content-Type: application/vnd.amazon.eventstream``: each event (botocore's dict form, one key)
  is one event-stream message in its own HTTP chunk (``etf_otel.testing.bedrock.frames``), an event
  that is ``bytes`` is sent as it is (a broken message). ``boto3`` raises an HTTP error from the
  body's ``__type`` (``{"__type": "ThrottlingException", "message": ...}``).
- Ollama's client posts to ``/api/chat`` for both forms; with ``"stream": false`` in the body the answer
  is the complete body (the script's ``body``, else its first event), otherwise ``application/x-ndjson``:
  each event one JSON line in its own HTTP chunk (a string or ``bytes`` event is sent as it is).
- A non-200 ``status`` answers ``application/json``: the script's first event if it is a dict (so a test
  can shape the error body), otherwise a generic OpenAI-style error object.
- A script with a ``body`` answers that complete response as ``application/json`` (what a request
  without ``stream`` gets).

Only the standard library is used: the module ships inside the package for the demo, which must run on a
bare install.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final, TypeAlias, cast

from etf_otel import protocols
from etf_otel.protocols._chat_completions import DONE
from etf_otel.testing.bedrock import frames

__all__ = ["DONE", "LocalChatServer", "RecordedRequest", "Responder", "Script"]

_logger = logging.getLogger(__name__)


_STREAMING_PATHS = protocols.REQUEST_PATHS  # each registered protocol's, read per request

_WHOLE_SUFFIXES: Final = {":streamGenerateContent": ":generateContent", "/converse-stream": "/converse"}
"""The non-streamed method beside a streamed path suffix (Gemini, Bedrock): answered with a complete body."""

_MODEL_PREFIX: Final = "/model/"
"""Bedrock's request paths: ``/model/{modelId}/converse-stream`` and ``/model/{modelId}/converse``."""

_EVENT_STREAM: Final = "application/vnd.amazon.eventstream"

_NDJSON_PATH: Final = "/api/chat"
"""Ollama's chat: one path for both forms (``"stream": false`` in the body asks for the complete one);
a streamed answer is ``application/x-ndjson``, one JSON object a line."""


def _route(path: str) -> tuple[bool, bool]:
    """``(answered from the script queue, streamed)`` for a request path.

    An exact request path of a registered protocol, or (for a protocol whose request path is a
    ``:method`` suffix, as Gemini's, or follows a ``/model/{id}``, as Bedrock's) any path that ends
    with it; or the non-streamed method beside it.
    """
    if path in _STREAMING_PATHS:
        return True, True
    for suffix in _STREAMING_PATHS:
        if suffix.startswith(":") or path.startswith(_MODEL_PREFIX):
            if path.endswith(suffix):
                return True, True
            whole = _WHOLE_SUFFIXES.get(suffix)
            if whole is not None and path.endswith(whole):
                return True, False
    return False, False


_POLL_INTERVAL = 0.05
"""How often ``serve_forever`` checks for shutdown; small so that :meth:`LocalChatServer.close` is prompt."""

_JOIN_TIMEOUT = 5.0

Event: TypeAlias = "Mapping[str, Any] | str | bytes"
"""One scripted SSE event: a chunk object (sent as JSON) or a raw data string such as :data:`DONE`; on
Bedrock's paths an event (dict form) sent as one event-stream message, or ``bytes`` sent as they are."""


@dataclass(frozen=True)
class Script:
    """One scripted response, consumed by exactly one request.

    ``events`` are sent in order: a mapping as ``data: <json>``, a string verbatim as ``data: <string>``
    (``DONE`` gives the sentinel; any other string lets a test send malformed JSON).
    ``cut_after``: if set, the connection is dropped after that many events (no sentinel, no end of body),
    even if the script has more. ``status``: the HTTP status; anything but 200 answers a JSON error.
    """

    events: Sequence[Event] = ()
    cut_after: int | None = None
    status: int = 200
    named: bool = False
    """Precede each event that has a string ``type`` with ``event: <type>`` (Responses, Anthropic)."""
    body: Mapping[str, Any] | None = None
    """A complete (non-streamed) response: sent as ``application/json`` with ``status``, instead of events."""

    def __post_init__(self) -> None:
        if self.body is not None and (self.events or self.cut_after is not None):
            raise ValueError("a script answers with events or with a body, not both")
        # Freeze the events too: a script shared between tests must not change under a running server.
        object.__setattr__(self, "events", tuple(self.events))
        if self.cut_after is not None and self.cut_after < 0:
            raise ValueError(f"cut_after must be >= 0, got {self.cut_after}")
        if not 100 <= self.status <= 599:
            raise ValueError(f"status must be an HTTP status code, got {self.status}")


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the server received it, for assertions on what the client sent.

    ``headers`` has lower-cased names. ``body`` is the parsed JSON body, or ``None`` if it was not JSON.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


Responder: TypeAlias = "Callable[[RecordedRequest], Script | None]"
"""Answers a streaming request when no script is queued (``None``: the usual ``500``)."""


def _error_body(message: str, status: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": "etf_local_sse", "param": None, "code": str(status)}}


def _sse_frame(event: Event, named: bool = False) -> bytes:
    if isinstance(event, bytes):
        return event
    # A data string spanning lines must become one ``data:`` field per line to stay a single SSE event.
    text = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
    name = event.get("type") if named and isinstance(event, Mapping) else None
    head = f"event: {name}\n" if isinstance(name, str) and "\n" not in name else ""
    return (head + "".join(f"data: {line}\n" for line in text.split("\n"))).encode() + b"\n"


def _message(event: Event) -> bytes:
    """One Bedrock event as its event-stream message (``bytes``: sent as they are, broken ones too)."""
    if isinstance(event, bytes):
        return event
    if isinstance(event, str):
        return event.encode()
    return frames([event])


def _line(event: Event) -> bytes:
    """One Ollama chunk as its NDJSON line (a string or ``bytes``: sent as they are, a broken line too)."""
    if isinstance(event, bytes):
        return event
    return (event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))).encode() + b"\n"


class _Server(ThreadingHTTPServer):
    """The HTTP server, carrying a reference to the state it serves from."""

    daemon_threads = True
    # Handlers may still be writing when a test closes the server; joining them could hang close().
    block_on_close = False

    def __init__(self, owner: LocalChatServer, port: int) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The default prints a traceback to stderr; a client hanging up mid-stream is routine here.
        _logger.debug("local SSE server: error while handling %s", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "etf-local-sse"
    sys_version = ""

    def do_POST(self) -> None:
        owner = cast(_Server, self.server).owner
        # The connection is not reused: one request, one response keeps every script on a fresh socket.
        self.close_connection = True
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = self.path.split("?", 1)[0]
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        routed, streamed = _route(path)
        streamed = streamed and not (path == _NDJSON_PATH and isinstance(body, dict) and body.get("stream") is False)
        script = owner._record_and_take(RecordedRequest("POST", path, headers, body), routed)

        if not routed:
            self._send_json(HTTPStatus.NOT_FOUND, _error_body(f"no route for POST {path}", 404))
        elif script is None:
            self._send_json(HTTPStatus.INTERNAL_SERVER_ERROR, _error_body("no script queued", 500))
        elif script.body is not None:
            self._send_json(script.status, script.body)
        elif not streamed and script.status == 200:
            first = script.events[0] if script.events else None
            self._send_json(script.status, first if isinstance(first, Mapping) else {})
        elif script.status != 200:
            first = script.events[0] if script.events else None
            payload = (
                first if isinstance(first, Mapping) else _error_body(f"scripted status {script.status}", script.status)
            )
            self._send_json(script.status, payload)
        else:
            self._stream(script, framed=path.startswith(_MODEL_PREFIX), lines=path == _NDJSON_PATH)

    def _send_json(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, script: Script, framed: bool = False, lines: bool = False) -> None:
        self.send_response(HTTPStatus.OK)
        kind = _EVENT_STREAM if framed else "application/x-ndjson" if lines else "text/event-stream; charset=utf-8"
        self.send_header("Content-Type", kind)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        events = script.events if script.cut_after is None else script.events[: script.cut_after]
        try:
            for event in events:
                frame = _message(event) if framed else _line(event) if lines else _sse_frame(event, script.named)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                self.wfile.flush()
            if script.cut_after is not None:
                # FIN without the terminating chunk: the client sees the body end mid-message.
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            # The consumer stopped reading early (closed the stream): nothing left to do.
            _logger.debug("local SSE server: client went away mid-stream")

    def log_message(self, format: str, *args: Any) -> None:
        _logger.debug("local SSE server %s: %s", self.address_string(), format % args)


class LocalChatServer:
    """A scripted SSE server for the Chat Completions, Responses, Messages and Gemini APIs on ``127.0.0.1``.

    It starts serving (in a daemon thread) on construction; use it as a context manager or call
    :meth:`close`. Thread-safe: scripts may be enqueued while requests are being served.
    ``port`` 0 takes a free port (tests); ``responder`` answers the requests no queued script
    is left for (``python -m etf_otel.testing`` serves every request that way).
    """

    def __init__(self, port: int = 0, responder: Responder | None = None) -> None:
        self._lock = threading.Lock()
        self._scripts: deque[Script] = deque()
        self._requests: list[RecordedRequest] = []
        self._responder = responder
        self._closed = False
        self._httpd = _Server(self, port)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": _POLL_INTERVAL},
            name=f"etf-local-sse:{self.port}",
            daemon=True,
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The TCP port the server is bound to."""
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The value for ``openai.OpenAI(base_url=...)``: ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        """The value for ``anthropic.Anthropic(base_url=...)``, which adds ``/v1`` itself, and for
        ``google.genai``'s ``HttpOptions(base_url=..., api_version="v1beta")``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """How many enqueued scripts no request has consumed yet."""
        with self._lock:
            return len(self._scripts)

    def enqueue(self, *scripts: Script) -> None:
        """Queue scripts; each streaming request consumes the oldest one."""
        with self._lock:
            self._scripts.extend(scripts)

    def _record_and_take(self, request: RecordedRequest, consume: bool) -> Script | None:
        # Recording and taking under one lock keeps ``requests[i]`` paired with the i-th script.
        with self._lock:
            self._requests.append(request)
            script = self._scripts.popleft() if consume and self._scripts else None
        if script is None and consume and self._responder is not None:
            script = self._responder(request)
        return script

    def close(self) -> None:
        """Stop serving and release the port. Idempotent; returns within about ``_POLL_INTERVAL``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(_JOIN_TIMEOUT)

    def __enter__(self) -> LocalChatServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
