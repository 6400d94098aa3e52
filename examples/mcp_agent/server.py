"""A plain MCP tool server: ``python server.py stdio`` or ``python server.py http PORT`` (127.0.0.1, ``/mcp``).

No etf-otel or OpenTelemetry import. Run it under ``opentelemetry-instrument``: the ``mcp``
SDK's own middleware opens a SERVER span for each ``tools/call``, and etf-otel's ``etf_otel_mcp``
instrumentor adds the proposal's call id and a link to the proposal, read from ``params._meta``.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("report-tools")

PAGES = {1: "Revenue grew 12% in the third quarter.", 2: "Costs fell 3%."}


@server.tool()
def read_page(page: int) -> str:
    """Read one page of the quarterly report."""
    return PAGES.get(page, "no such page")


@server.tool()
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
