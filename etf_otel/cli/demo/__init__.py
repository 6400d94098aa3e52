"""``etf-otel demo``: the case study end to end through the real clients and a local server."""

from etf_otel.cli.demo._chat import run_demo

__all__ = ["run_demo"]
