"""An httpx transport that sends a request for a provider's host to the local scripted server: the client
believes it talks to ``api.openai.com`` (its target), the bytes go to 127.0.0.1. Apart from
tests/integrations/support.py so that a venv without ``httpx2`` (the agents leg) can import the harness."""

from __future__ import annotations

import httpx2


class LocalRedirect(httpx2.HTTPTransport):
    """A real HTTP transport that sends every request to the local server, whatever its URL says."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self._port = port

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(scheme="http", host="127.0.0.1", port=self._port)
        return super().handle_request(request)
