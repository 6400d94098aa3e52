"""Amazon Bedrock Converse through ``boto3`` / ``botocore``: ``converse`` and ``converse_stream`` observed.

Importing this package does not import ``botocore``; :class:`BedrockInstrumentor` wraps the client
when the application imports it.
"""

from etf_otel.integrations.bedrock._instrumentor import PROVIDER, BedrockInstrumentor, instrument_bedrock

__all__ = ["PROVIDER", "BedrockInstrumentor", "instrument_bedrock"]
