"""openai-agents: the function tools an agent runs, recorded as executions of the preserved calls
(docs/frameworks.md).

Importing this package does not import ``agents``; :class:`OpenAIAgentsInstrumentor` wraps the
framework's tool runner when the application imports it. Its model calls are recorded by the
``openai`` instrumentor.
"""

from etf_otel.integrations.openai_agents._instrumentor import OpenAIAgentsInstrumentor, instrument_openai_agents

__all__ = ["OpenAIAgentsInstrumentor", "instrument_openai_agents"]
