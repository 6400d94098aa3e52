"""The ``pydantic_ai`` agent framework: the tools its agents run, recorded as executions (docs/frameworks.md).

Importing this package does not import ``pydantic_ai``; :class:`PydanticAIInstrumentor` hooks
its tool manager when the application imports it. The model calls an agent makes are recorded
by the ``openai`` and ``anthropic`` instrumentors.
"""

from etf_otel.integrations.pydantic_ai._instrumentor import PydanticAIInstrumentor, instrument_pydantic_ai

__all__ = ["PydanticAIInstrumentor", "instrument_pydantic_ai"]
