"""LangChain and LangGraph agents: tool runs and ``ChatOpenAI``'s own assembly, zero code (docs/frameworks.md).

Importing this package imports neither ``langchain_core`` nor ``langchain_openai``:
:class:`LangChainInstrumentor` wraps them when the application imports them.
"""

from etf_otel.integrations.langgraph._instrumentor import LangChainInstrumentor, instrument_langgraph

__all__ = ["LangChainInstrumentor", "instrument_langgraph"]
