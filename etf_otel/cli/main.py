"""The ``etf-otel`` command line.

Exit codes for every subcommand (docs/cli.md): 0 success and nothing found, 1
integrity problems found, 2 bad usage or unreadable input (one-line reason on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from etf_otel._version import __version__
from etf_otel.cli.audit import add_audit_arguments, run_audit
from etf_otel.cli.exit_codes import EXIT_BAD_INPUT
from etf_otel.cli.replay import add_replay_arguments, run_replay

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line, as every other bad input does."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="etf-otel", description="Observe and check streamed LLM tool calls.")
    parser.add_argument("--version", action="version", version=f"etf-otel {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    replay = commands.add_parser("replay", help="assemble one recorded response (JSON lines or SSE)")
    add_replay_arguments(replay)

    audit = commands.add_parser("audit", help="check call-to-result linkage in exported traces (OTLP JSON)")
    add_audit_arguments(audit)

    demo = commands.add_parser("demo", help="run the case study end to end (no server needed)")
    demo.add_argument("--export", metavar="FILE", help="write the telemetry as OTLP JSON lines to FILE")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code instead of exiting."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # --help, --version and usage errors: return, do not exit
        return exit_.code if isinstance(exit_.code, int) else EXIT_BAD_INPUT
    if args.command == "replay":
        return run_replay(args)
    if args.command == "audit":
        return run_audit(
            args.paths,
            json_output=args.json,
            progress=args.progress,
            phoenix=args.phoenix,
            project=args.project,
            engine=args.engine,
            clickhouse=args.clickhouse,
            database=args.database,
            since=args.since,
            until=args.until,
        )
    if args.command == "demo":
        from etf_otel.cli.demo import run_demo

        return run_demo(args.export)
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover - argparse rejects it


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
