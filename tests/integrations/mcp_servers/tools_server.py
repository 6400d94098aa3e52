"""A real MCP tool server for the tests, run as its own OS process (usually under ``opentelemetry-instrument``).

``python tools_server.py stdio`` serves on stdin/stdout; ``python tools_server.py http PORT`` serves
Streamable HTTP on 127.0.0.1:PORT at ``/mcp``. No etf-otel or OpenTelemetry import: what it traces
comes from the SDK's own middleware and the instrumentors ``opentelemetry-instrument`` loads.

Tools: ``read_page(page)`` answers; ``fail()`` raises; ``slow(seconds)`` sleeps (a client cancels it);
``die()`` ends the process mid-call (the transport closes); ``meta_keys()`` returns the ``_meta`` keys
the request carried, so a test sees what crossed the boundary.
"""

from __future__ import annotations

import os
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("tools")


@server.tool()
def read_page(page: int) -> str:
    """Read one page of the report."""
    return f"page {page}: revenue grew"


@server.tool()
def fail() -> str:
    """Always raises."""
    raise RuntimeError("the tool failed")


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps, so that a client can give up first."""
    await anyio.sleep(seconds)
    return "done"


@server.tool()
def die() -> str:
    """Ends the server process in the middle of the call."""
    sys.stdout.flush()
    time.sleep(0.2)  # the batch processor's short delay has exported the spans before this one
    os._exit(3)


@server.tool()
def meta_keys(ctx: Context) -> list[str]:
    """The ``_meta`` keys of this very request."""
    meta = ctx.request_context.meta or {}
    return sorted(meta)


if __name__ == "__main__":
    if os.environ.get("TOOLS_SERVER_NO_SDK_SPAN"):  # a server without the SDK's OpenTelemetryMiddleware
        server._lowlevel_server.middleware[:] = [
            middleware
            for middleware in server._lowlevel_server.middleware
            if type(middleware).__name__ != "OpenTelemetryMiddleware"
        ]
    if os.environ.get("ETF_TEST_ORDER"):
        from tests.integrations.mcp_servers.setup_order import instrument_in_order

        instrument_in_order()
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
