"""The command line of ``etf-otel audit``: its arguments, their help and the epilog with the exit codes.

Its own module so that :mod:`etf_otel.cli._audit` holds what the command does (the audit over
files, Phoenix or a SQL engine, and its exit codes) and this one what it accepts; ``_audit``
re-exports :func:`add_audit_arguments`.
"""

from __future__ import annotations

import argparse
from typing import Final

from etf_otel.cli._exit_codes import CLI_DOCS

__all__ = ["EPILOG", "add_audit_arguments"]


EPILOG: Final = f"""\
exit codes:
  0  no finding (informational kinds such as unjudged, unobserved_llm_call or
     history_drift only)
  1  findings: a linkage problem (orphaned_execution, recorded_rejection, ...),
     telemetry the audit cannot judge (missing_span, malformed_span), or, with
     --strict, history_drift
  2  nothing to audit, unusable input or usage, one line on stderr: a file that is
     not OTLP JSON, an unreachable server, no span from etf-otel at all

example:
  etf-otel audit traces/ --json
More: {CLI_DOCS}
"""


def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``etf-otel audit``: ``paths``, ``--phoenix``, ``--project``, ``--json``, ``--no-progress``."""
    parser.description = "Check call-to-result linkage, per trace, in exported traces (OTLP JSON, Phoenix, SQL)."
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="OTLP JSON trace exports: files (JSON lines or documents, optionally gzip) or directories",
    )
    parser.add_argument(
        "--phoenix",
        metavar="URL",
        help="read the spans from the Arize Phoenix server at URL (REST API) instead of files",
    )
    parser.add_argument(
        "--project", metavar="NAME", help="Phoenix project to read (default: 'default'); only with --phoenix"
    )
    parser.add_argument(
        "--engine",
        choices=("python", "chdb"),
        default="python",
        help="python: the streaming audit (default); chdb: load PATHs into the ClickHouse exporter's otel_traces"
        " table in embedded chDB and run the audit's SQL (etf-otel[chdb])",
    )
    parser.add_argument(
        "--clickhouse",
        metavar="URL",
        help="run the audit's SQL on the ClickHouse server at URL (http[s]://[user[:password]@]host[:port]), over"
        " the tables of the Collector's clickhouse exporter (etf-otel[clickhouse])",
    )
    parser.add_argument("--database", metavar="NAME", help="database of otel_traces (default: otel); with --clickhouse")
    parser.add_argument(
        "--since",
        metavar="TIME",
        help="SQL engines only: audit traces with a span starting at or after TIME (ISO 8601, UTC unless an offset"
        " is given, or a duration ago: 30m, 2h, 7d)",
    )
    parser.add_argument("--until", metavar="TIME", help="SQL engines only: ... and before TIME")
    parser.add_argument("--json", action="store_true", help="print one JSON document for machines")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="count history_drift (a request history that holds together but differs from what the model"
        " proposed) as a finding: exit 1",
    )
    parser.add_argument(
        "--html",
        metavar="OUT",
        help="also write a self-contained HTML page: summary, then a timeline per trace with findings (files"
        " and --phoenix only)",
    )
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no progress bar on stderr (it is shown only when stderr is a terminal)",
    )
