"""``etf-otel replay FILE``: assemble one recorded response and report on it.

The recording is read (:mod:`etf_otel.cli.recording`), its wire protocol is taken from
``--protocol`` or detected from the first event, and the protocol's adapter assembles it
by the identity rules. Exit codes: 0 nothing found, 1 a rejection, 2 unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from etf_otel import protocols
from etf_otel.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FOUND, EXIT_OK
from etf_otel.cli.recording import read_chunks
from etf_otel.cli.replay_report import build_report, render_report
from etf_otel.core.identity import CompatibilityRule, IdentityRules
from etf_otel.errors import RecordingError
from etf_otel.protocols import CHAT_COMPLETIONS, WireProtocol

__all__ = ["add_replay_arguments", "run_replay"]


def add_replay_arguments(replay: argparse.ArgumentParser) -> None:
    replay.add_argument("file", help="recorded response: JSON lines, one chunk per line, or raw SSE text")
    replay.add_argument(
        "--protocol",
        choices=sorted(protocols.PROTOCOLS),
        help="the recording's wire protocol (default: detected from its first event)",
    )
    replay.add_argument("--json", action="store_true", help="print one JSON document (docs/cli.md)")
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


def _protocol_of(events: list[object], name: str | None) -> WireProtocol:
    """``--protocol``, else the protocol that recognizes the first event.

    A recording no protocol recognizes (an empty file, say) is still assembled as Chat
    Completions, as before protocols were detected: it then reads as a truncated stream.
    """
    if name is not None:
        return protocols.get(name)
    return (protocols.detect(events[0]) if events else None) or CHAT_COMPLETIONS


def run_replay(args: argparse.Namespace) -> int:
    try:
        events = list(read_chunks(args.file))
    except RecordingError as error:
        print(f"etf-otel replay: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    protocol = _protocol_of(events, args.protocol)
    assembler = protocol.assembler(rules=IdentityRules.for_rules(args.allow))
    for event in events:
        assembler.feed(event)
    result = assembler.finish()
    if args.export:
        _export(events, protocol, args)
    if args.assembler:
        from etf_otel.cli.replay_assemblers import render_comparison, run_assembler

        try:
            comparison = run_assembler(args.assembler, events, args.allow)
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


def _export(events: list[object], protocol: WireProtocol, args: argparse.Namespace) -> None:
    """Run the recording through the real instrumentation, exporting to ``args.export``."""
    from etf_otel.cli.sdk_setup import setup_sdk
    from etf_otel.instrumentation import Instrumentation

    setup = setup_sdk("etf-otel-replay", args.export)
    instrumentation = Instrumentation(setup.tracer_provider, setup.meter_provider, allow=args.allow)
    for _ in instrumentation.stream(iter(events), protocol=protocol):
        pass
    setup.shutdown()
