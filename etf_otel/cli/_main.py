"""The ``etf-otel`` command line.

Exit codes for every subcommand (docs/cli.md): 0 success and nothing found, 1
integrity problems found, 2 bad usage or unreadable input (one-line reason on stderr).
A crash or a missing package is never 0 or 1: it is 2, with one line naming it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Final

from etf_otel._version import __version__
from etf_otel.cli._audit import add_audit_arguments, run_audit
from etf_otel.cli._exit_codes import CLI_DOCS, EXIT_BAD_INPUT, EXIT_INTERRUPTED
from etf_otel.cli._replay import add_replay_arguments, run_replay
from etf_otel.core import COMPILED

__all__ = ["main"]

COMMANDS: Final = ("replay", "audit", "demo")
_BUILD: Final = " (compiled core)" if COMPILED else ""

EPILOG: Final = f"""\
exit codes (every command):
  0  success, and nothing was found
  1  integrity problems were found
  2  bad usage or unusable input, with a one-line reason on stderr (also a
     missing package or an internal error: never 0 or 1)
  130  interrupted (Ctrl-C, SIGINT): one line on stderr, no verdict

example:
  etf-otel replay reply.sse --followup next-request.json
  etf-otel audit traces/ --json

More: etf-otel COMMAND --help, {CLI_DOCS}
"""

DEMO_EPILOG: Final = f"""\
exit codes:
  0  every case behaved as the rules say
  1  a case did not (the table shows which)
  2  bad usage, or the demo cannot run (a missing package, an unwritable
     --export FILE, --otlp without a collector configured or accepting the
     spans, the openai client already instrumented): one line on stderr
  130  interrupted (Ctrl-C, SIGINT): one line on stderr, no verdict

telemetry goes to the printed summary only, unless --export FILE or --otlp
(the collector of OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL, ...;
those variables are read only with --otlp)

example:
  etf-otel demo --export demo-traces.jsonl && etf-otel audit demo-traces.jsonl
  OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 etf-otel demo --otlp

More: {CLI_DOCS}
"""

_EXTRAS: Final = {
    "openai": "openai",
    "anthropic": "anthropic",
    "langchain_core": "langchain",
    "langchain_openai": "langchain",
    "chdb": "chdb",
    "clickhouse_connect": "clickhouse",
    "sseclient": "cli",  # read lazily by etf_otel.recordings, so only replaying SSE finds it missing
    "opentelemetry": "cli",  # the API comes with the library: a missing opentelemetry.* is the SDK or an exporter
}
"""Importable name -> the etf-otel extra that installs it."""


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line, as every other bad input does."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="etf-otel",
        description="Observe and check streamed LLM tool calls.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"etf-otel {__version__}{_BUILD}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    replay = commands.add_parser("replay", help="assemble one recorded response (JSON lines or SSE)")
    add_replay_arguments(replay)

    audit = commands.add_parser("audit", help="check call-to-result linkage in exported traces (OTLP JSON)")
    add_audit_arguments(audit)

    demo = commands.add_parser(
        "demo",
        help="run the case study end to end (no server needed)",
        description="Run the case study end to end: scripted streams through the real SDK clients, checked\n"
        "by the rules (needs etf-otel[openai]).",
        epilog=DEMO_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    destination = demo.add_mutually_exclusive_group()
    destination.add_argument("--export", metavar="FILE", help="write the telemetry as OTLP JSON lines to FILE")
    destination.add_argument(
        "--otlp", action="store_true", help="send the telemetry to the collector of the OTEL_EXPORTER_OTLP_* variables"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code instead of exiting."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments:
        print(f"etf-otel: no command given: choose one of {', '.join(COMMANDS)} (etf-otel --help)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        args = _parser().parse_args(arguments)
    except SystemExit as exit_:  # --help, --version and usage errors: return, do not exit
        return exit_.code if isinstance(exit_.code, int) else EXIT_BAD_INPUT
    try:
        return _run(args)
    except KeyboardInterrupt:  # Ctrl-C: no verdict, and no traceback
        _interrupted(args.command)
        return EXIT_INTERRUPTED
    except ImportError as error:  # an optional package a command needs at run time
        name = (error.name or "").partition(".")[0]
        if not name or name == "etf_otel":
            return _crashed(args.command, error)
        extra = _EXTRAS.get(name)
        install = f"pip install 'etf-otel[{extra}]'" if extra else f"pip install {name}"
        state = "is not installed" if isinstance(error, ModuleNotFoundError) else "cannot be imported (its version?)"
        print(f"etf-otel {args.command}: needs {name}, which {state}: {install}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as error:  # a bug must not pass for a finding (1) nor for a clean result (0)
        return _crashed(args.command, error)


def _interrupted(command: str) -> None:
    try:
        print(f"etf-otel {command}: interrupted", file=sys.stderr)
    except (OSError, ValueError):  # stderr is gone too
        pass


def _crashed(command: str, error: BaseException) -> int:
    """One line naming the exception's type only: its message may quote model output."""
    print(
        f"etf-otel {command}: internal error ({type(error).__name__}): a bug in etf-otel, not a verdict on the"
        " input; please report it with the command that raised it",
        file=sys.stderr,
    )
    return EXIT_BAD_INPUT


def _run(args: argparse.Namespace) -> int:
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
            html=args.html,
            strict=args.strict,
        )
    if args.command == "demo":
        from etf_otel.cli.demo._chat import run_demo

        return run_demo(args.export, otlp=args.otlp)
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover - argparse rejects it


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
