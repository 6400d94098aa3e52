"""The ``mcp`` SDK: tool calls that cross a process boundary, linked to their proposals (docs/mcp.md).

Importing this package does not import ``mcp``; :class:`MCPInstrumentor` patches the client
session and the server middleware when it is instrumented.
"""

from etf_otel.integrations.mcp._instrumentor import MCPInstrumentor, call_proposed_tool, instrument_mcp, proposed_call

__all__ = ["MCPInstrumentor", "call_proposed_tool", "instrument_mcp", "proposed_call"]
