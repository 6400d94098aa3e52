"""The command line: the only layer that prints or exits."""

from etf_otel.cli._main import main

__all__ = ["main"]
