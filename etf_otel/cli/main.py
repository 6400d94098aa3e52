"""The ``etf-otel`` command line.

Exit codes for every subcommand (SPEC section 8): 0 success and nothing found, 1
integrity problems found, 2 bad usage or unreadable input (one-line reason on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rich.console import Console

from etf_otel._version import __version__
from etf_otel.audit.checks import add_audit_arguments, run_audit
from etf_otel.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FOUND, EXIT_OK
from etf_otel.cli.recording import RecordingError, read_chunks
from etf_otel.cli.replay_report import build_report, render_report
from etf_otel.core.identity import CompatibilityRule
from etf_otel.protocols.chat_completions import ReferenceAssembler

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
    replay.add_argument("file", help="recorded response: JSON lines, one chunk per line, or raw SSE text")
    replay.add_argument("--json", action="store_true", help="print one JSON document (SPEC section 8)")
    replay.add_argument(
        "--show-arguments", action="store_true", help="include the assembled arguments (raw model output)"
    )
    replay.add_argument(
        "--allow",
        action="append",
        default=[],
        choices=[rule.value for rule in CompatibilityRule],
        metavar="RULE",
        help="enable a compatibility rule: " + ", ".join(rule.value for rule in CompatibilityRule),
    )
    replay.add_argument(
        "--assembler",
        choices=["openai", "langchain", "reference"],
        help="also run this assembler, wrapped, and show where it diverges from the rules",
    )
    replay.add_argument(
        "--export",
        metavar="PATH",
        help="also write the telemetry the instrumentation would emit for this stream (OTLP JSON lines)",
    )

    audit = commands.add_parser("audit", help="check call-to-result linkage in exported traces (OTLP JSON)")
    add_audit_arguments(audit)

    demo = commands.add_parser("demo", help="run the case study end to end (no server needed)")
    demo.add_argument("--export", metavar="FILE", help="write the telemetry as OTLP JSON lines to FILE")
    return parser


def _replay(args: argparse.Namespace) -> int:
    try:
        chunks = list(read_chunks(args.file))
    except RecordingError as error:
        print(f"etf-otel replay: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    assembler = ReferenceAssembler(args.allow)
    for chunk in chunks:
        assembler.feed(chunk)
    result = assembler.finish()
    if args.export:
        _export_replay(chunks, args)
    if args.assembler:
        from etf_otel.cli.replay_assemblers import render_comparison, run_assembler

        try:
            comparison = run_assembler(args.assembler, chunks, args.allow)
        except ImportError as error:
            print(f"etf-otel replay: --assembler {args.assembler} needs {error.name or 'its library'}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if args.json:
            sys.stdout.write(json.dumps(comparison.to_dict(show_arguments=args.show_arguments), default=str) + "\n")
        else:
            render_comparison(comparison, Console(), show_arguments=args.show_arguments)
        return EXIT_FOUND if result.rejections or comparison.divergences else EXIT_OK
    report = build_report(result, show_arguments=args.show_arguments)
    if args.json:
        sys.stdout.write(report.to_json(show_arguments=args.show_arguments) + "\n")
    else:
        render_report(report, Console(), show_arguments=args.show_arguments)
    return EXIT_FOUND if result.rejections else EXIT_OK


def _export_replay(chunks: list[object], args: argparse.Namespace) -> None:
    """Run the recording through the real instrumentation, exporting to ``args.export``."""
    from etf_otel.cli.sdk_setup import setup_sdk
    from etf_otel.instrumentation.wrappers import Instrumentation

    setup = setup_sdk("etf-otel-replay", args.export)
    assert setup is not None
    instrumentation = Instrumentation(setup.tracer_provider, setup.meter_provider, allow=args.allow)
    for _ in instrumentation.stream(iter(chunks)):
        pass
    setup.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code instead of exiting."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # --help, --version and usage errors: return, do not exit
        return exit_.code if isinstance(exit_.code, int) else EXIT_BAD_INPUT
    if args.command == "replay":
        return _replay(args)
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
