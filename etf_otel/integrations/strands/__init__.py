"""Strands Agents: the tools its agents run, recorded as executions (docs/frameworks.md).

Importing this package does not import ``strands``; :class:`StrandsInstrumentor` hooks its tool
executor when the application imports it. The model calls of Strands' ``BedrockModel`` are recorded
by the Bedrock instrumentor (``boto3``).
"""

from etf_otel.integrations.strands._instrumentor import StrandsInstrumentor, instrument_strands

__all__ = ["StrandsInstrumentor", "instrument_strands"]
