"""``etf-otel replay FILE``: assemble one recorded response and report on it.

The recording is read once (:mod:`etf_otel.recordings`; ``-`` is standard input), its
wire protocol is taken from ``--protocol`` or detected from the first event by the
registry (:mod:`etf_otel.protocols`), and the protocol's adapter assembles it by the
identity rules. With ``--followup NEXT`` the next request's results are checked against
the response's proposals (linkage), and its history as its provider pairs calls and results
(pairing; ``--target`` adds the provider's id limits). Exit codes: 0 nothing found, 1 a
rejection, a linkage finding or a pairing problem, 2 unusable input or usage (one line on
stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from etf_otel import protocols
from etf_otel.cli._exit_codes import CLI_DOCS, EXIT_BAD_INPUT, EXIT_FOUND, EXIT_OK
from etf_otel.cli._replay_export import export_telemetry
from etf_otel.cli._replay_input import load, next_request
from etf_otel.cli._replay_report import (
    ReplayReport,
    build_report,
    render_drift,
    render_linkage,
    render_pairing,
    render_report,
)
from etf_otel.cli._text import console_for, displayable, write_json
from etf_otel.cli.html._page import HtmlWriteError, write_page
from etf_otel.core._history import Drift, judge_history, shapes
from etf_otel.core._identity import DEFAULT_RULES, CompatibilityRule, IdentityRules
from etf_otel.core._linkage import DEFAULT_MAX_PENDING, Conversation, Finding, concatenated
from etf_otel.core._pairing import TARGETS, PairingCheck, PairingMemory
from etf_otel.core._results import AssemblyResult
from etf_otel.core._vocabulary import ErrorCategory, StreamState
from etf_otel.errors import RecordingError
from etf_otel.integrations._conversation import orphan_reason
from etf_otel.protocols import WireProtocol, check_request
from etf_otel.protocols._bodies import judge_body
from etf_otel.protocols._chat_completions import DONE
from etf_otel.recordings import STDIN, display_name

if TYPE_CHECKING:
    from etf_otel.cli._replay_assemblers import AssemblerComparison

__all__ = ["add_replay_arguments", "followup_linkage", "followup_pairing", "linkage", "run_replay"]

EPILOG: Final = f"""\
exit codes:
  0  nothing found: no call rejected, the stream ended properly, and (with
     --followup) each proposed call answered exactly once and nothing else
  1  integrity problems found: a rejection, a truncated stream, a divergence
     (--assembler), a linkage finding or a pairing problem (--followup)
  2  unusable input or usage, with a one-line reason on stderr: unreadable or
     empty input, not a recording of any supported protocol, a --followup that
     is no next request of that protocol

example:
  etf-otel replay reply.sse --followup next-request.json
  curl -sN ... | etf-otel replay - --json
  etf-otel replay reply.jsonl --html reply.html

More: {CLI_DOCS}
"""

ASSEMBLER_NAMES: Final = ("openai", "anthropic", "langchain", "google-genai", "reference")
"""``--assembler`` names: ``replay_assemblers.ASSEMBLERS``, not imported here to keep the CLI's start fast."""


ALLOWABLE: Final = [rule.value for rule in CompatibilityRule if rule is not CompatibilityRule.REQUIRE_CALL_ID]
"""``--allow`` and ``--deny`` names: the compatibility rules (``require_call_id`` is strictness,
``--require-call-id``)."""
DEFAULT_ON: Final = sorted(rule.value for rule in DEFAULT_RULES)
"""The rules on unless ``--deny`` names them."""


def add_replay_arguments(replay: argparse.ArgumentParser) -> None:
    replay.description = "Assemble one recorded streamed response by the identity rules; report each call."
    replay.epilog = EPILOG
    replay.formatter_class = argparse.RawDescriptionHelpFormatter
    replay.add_argument(
        "file",
        metavar="FILE",
        help="recorded response: JSON lines (one event per line) or raw SSE text; - reads standard input",
    )
    replay.add_argument(
        "--protocol",
        choices=sorted(protocols.PROTOCOLS),
        help="the recording's wire protocol (default: detected from its first event)",
    )
    replay.add_argument(
        "--followup",
        metavar="NEXT",
        help="the next request (JSON), to check that its results answer exactly the proposed calls; - reads stdin",
    )
    replay.add_argument(
        "--target",
        choices=TARGETS,
        help="the provider the --followup request goes to: also check its call ids against that provider's limits",
    )
    replay.add_argument("--json", action="store_true", help="print one JSON document for machines")
    replay.add_argument(
        "--show-arguments", action="store_true", help="include the assembled arguments (raw model output)"
    )
    _add_rule_arguments(replay)
    replay.add_argument(
        "--assembler",
        choices=ASSEMBLER_NAMES,
        help="also run this assembler (one that reads the recording's protocol), wrapped, and show where it"
        " diverges from the rules",
    )
    replay.add_argument(
        "--html",
        metavar="OUT",
        help="also write a self-contained HTML page: a swimlane per call, each fragment a mark",
    )
    replay.add_argument(
        "--export",
        metavar="PATH",
        help="also write the telemetry the instrumentation would emit for this stream (OTLP JSON lines)",
    )


def _add_rule_arguments(replay: argparse.ArgumentParser) -> None:
    """``--allow``, ``--deny`` and ``--require-call-id``: the identity rules the replay assembles by."""
    replay.add_argument(
        "--allow",
        action="append",
        default=[],
        choices=ALLOWABLE,
        metavar="RULE",
        help="enable a compatibility rule: " + ", ".join(ALLOWABLE),
    )
    replay.add_argument(
        "--deny",
        action="append",
        choices=ALLOWABLE,
        metavar="RULE",
        help="disable a compatibility rule, one on by default too (" + ", ".join(DEFAULT_ON) + "); wins over --allow",
    )
    replay.add_argument(
        "--require-call-id",
        action="store_true",
        help="Gemini: every call without an id is missing_id (by default such calls are identified by position)",
    )


def _refuse(reason: str) -> int:
    print(f"etf-otel replay: {' '.join(reason.splitlines())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _assemble(
    protocol: WireProtocol, events: Sequence[object], allow: Sequence[str], deny: Sequence[str]
) -> AssemblyResult:
    assembler = protocol.assembler(rules=IdentityRules.for_rules(allow, deny=deny))
    for event in events:
        if event == DONE:
            assembler.feed_done()
        else:
            assembler.feed(event)
    return assembler.finish()


def linkage(result: AssemblyResult, result_ids: Sequence[str | None]) -> list[Finding]:
    """Findings of the next request against ``result``: only a dispatchable response proposed anything.
    An orphaned result says why (``etf.linkage.orphan_reason``), as the live linkage does."""
    proposed = [call.id for call in result.proposals if call.id is not None]
    conversation = Conversation(max_pending=max(DEFAULT_MAX_PENDING, len(proposed)))
    conversation.proposed(proposed)
    pending = set(proposed)
    calls = frozenset(call.id for call in result.calls if call.id is not None)
    reasons = iter(
        [
            orphan_reason(call_id, calls, result.refused_ids)
            for call_id in result_ids
            if not isinstance(call_id, str) or call_id not in pending
        ]
    )
    return [
        dataclasses.replace(finding, reason=next(reasons, None))
        if finding.category is ErrorCategory.ORPHANED_RESULT
        else finding
        for finding in conversation.next_request(result_ids)
    ]


def followup_linkage(
    protocol: WireProtocol, result: AssemblyResult, document: object, result_ids: Sequence[str | None]
) -> tuple[list[Finding], list[Drift]]:
    """The findings and drift of the next request ``document`` against ``result``, over the scope of the
    turn that carries its calls (:mod:`etf_otel.core._history`); a request with no such turn is judged
    by the results after its last assistant turn (``result_ids``)."""
    if protocol.link is not None:
        linked = protocol.link(result, document)
        if linked is not None:
            return linked, protocol.link_drift(result, document)
    turns = protocol.history(document)
    judgement = None
    if turns is not None:
        ids = [call.id for call in result.calls if call.id is not None]
        refused = result.refused_ids
        judgement = judge_history(
            turns,
            shapes(result),
            known=lambda call_id: call_id in refused or concatenated(call_id, ids, refused),
            rejected=lambda call_id: call_id in refused,
            adjacent=protocol.answers_adjacent,
        )
    if judgement is None:
        return linkage(result, result_ids), []
    return linkage(result, judgement.result_ids), judgement.drift


def followup_pairing(
    protocol: WireProtocol, result: AssemblyResult, document: object, target: str | None = None
) -> PairingCheck | None:
    """What the provider refuses in the next request ``document``, as it pairs calls and results; ``None``
    when the protocol states no pairing rules. The response is the conversation's memory (a result for one
    of its calls, without that call, was trimmed away with it); with ``previous_response_id`` the provider
    holds its calls, known when the stream ended properly. Only proposed ids are named."""
    ids = [call.id for call in result.calls if call.id is not None]
    memory = PairingMemory()
    memory.responded(ids, result.refused_ids)
    proposed = {call.id for call in result.proposals if call.id is not None}
    held = ids if result.state is StreamState.COMPLETED else None
    return check_request(
        protocol, document, target=target, memory=memory, held_calls=held, preserved=proposed.__contains__
    )


def run_replay(args: argparse.Namespace) -> int:
    if args.file == STDIN and args.followup == STDIN:
        return _refuse("FILE and --followup cannot both read standard input (-)")
    deny = _rule_options(args)
    try:
        recording = load(args.file, args.protocol)
        protocol, events = recording.protocol, recording.events
        followup = next_request(args.followup, protocol) if args.followup is not None else None
    except RecordingError as error:
        return _refuse(str(error))
    streamed = recording.body is None
    if args.assembler and not streamed:
        return _refuse("--assembler compares stream assemblers; FILE is a complete body: nothing was streamed")
    if args.assembler:
        from etf_otel.cli._replay_assemblers import check_assembler

        try:
            check_assembler(args.assembler, protocol)
        except (ImportError, ValueError) as error:  # not for this protocol, or its library is missing
            return _refuse(str(error) or f"--assembler {args.assembler} needs {getattr(error, 'name', None)}")
    if streamed:
        result = _assemble(protocol, events, args.allow, deny)
    else:
        judged = judge_body(protocol, recording.body, IdentityRules.for_rules(args.allow, deny=deny))
        assert judged is not None  # _load judged it a complete body
        result = judged
    findings = drift = pairing = None
    if followup is not None:
        findings, drift = followup_linkage(protocol, result, *followup)
        pairing = followup_pairing(protocol, result, followup[0], getattr(args, "target", None)) or PairingCheck()
    if args.export:
        try:
            export_telemetry(recording, args)
        except OSError as error:
            return _refuse(f"--export: cannot write {display_name(args.export)}: {error.strerror or error}")
    if args.html is not None:
        try:
            _write_html(args, protocol, events)
        except HtmlWriteError as error:
            return _refuse(str(error))
    container = protocol.pairing.container if protocol.pairing is not None else "messages"
    report = build_report(
        result,
        show_arguments=args.show_arguments,
        linkage=findings,
        streamed=streamed,
        drift=drift or (),
        pairing=pairing,
        container=container,
    )
    if args.assembler:
        return _compare(args, protocol, events, result, report)
    if args.json:
        write_json(report.to_dict(show_arguments=args.show_arguments))
    else:
        render_report(report, console_for(), show_arguments=args.show_arguments)
    return EXIT_FOUND if result.rejections or findings or (pairing and pairing.broken) else EXIT_OK


def _rule_options(args: argparse.Namespace) -> list[str]:
    """``args.allow`` and ``args.deny`` as the rules take them (``--require-call-id`` allows it); the deny list."""
    if getattr(args, "require_call_id", False):
        args.allow = [*args.allow, CompatibilityRule.REQUIRE_CALL_ID.value]
    deny: list[str] = getattr(args, "deny", None) or []  # None when --deny is not given
    args.deny, args.allow = deny, [rule for rule in args.allow if rule not in deny]  # --deny wins
    return deny


def _write_html(args: argparse.Namespace, protocol: WireProtocol, events: list[object]) -> None:
    """``--html OUT``: the page of this replay (``etf_otel.cli.html._replay``)."""
    from etf_otel.cli.html._replay import replay_timeline
    from etf_otel.cli.html._replay_page import render_replay

    timeline = replay_timeline(protocol, events, args.allow, args.deny)
    document = render_replay(timeline, source=display_name(args.file), show_arguments=args.show_arguments)
    write_page(args.html, document)


def _compare(
    args: argparse.Namespace,
    protocol: WireProtocol,
    events: list[object],
    result: AssemblyResult,
    report: ReplayReport,
) -> int:
    """``--assembler``: the replay report of ``result``, plus what the assembler made of the recording."""
    from etf_otel.cli._replay_assemblers import render_comparison, run_assembler

    try:
        comparison = run_assembler(args.assembler, events, args.allow, protocol=protocol)
    except ImportError as error:
        return _refuse(str(error) or f"--assembler {args.assembler} needs {error.name or 'its library'}")
    comparison = dataclasses.replace(comparison, rules=result)  # the very result replay reports
    if args.json:
        document = report.to_dict(show_arguments=args.show_arguments)
        document["assembler"] = comparison.assembler_dict(show_arguments=args.show_arguments)
        write_json(document)
    else:
        console = console_for()
        render_comparison(_displayable_comparison(comparison), console, show_arguments=args.show_arguments)
        if report.linkage is not None:
            render_linkage(report.linkage, console, dispatchable=result.dispatchable)
            render_drift(report.drift or (), console)
            render_pairing(report, console)
    found = result.rejections or comparison.divergences or report.linkage or report.pairing
    return EXIT_FOUND if found else EXIT_OK


def _displayable_comparison(comparison: AssemblerComparison) -> AssemblerComparison:
    """A copy of ``comparison`` whose strings are safe to print (see ``displayable``)."""

    def shown(value: str | None) -> str | None:
        return None if value is None else displayable(value)

    def shown_part(value: object) -> object:
        return displayable(value) if isinstance(value, str) else value

    rules = comparison.rules
    calls = tuple(
        call._replace(id=shown(call.id), name=shown(call.name), arguments=displayable(call.arguments))
        for call in rules.calls
    )
    theirs = None if comparison.calls is None else [tuple(map(shown_part, call)) for call in comparison.calls]
    return dataclasses.replace(
        comparison,
        calls=theirs,  # type: ignore[arg-type]  # still (id, name, arguments) triples
        rules=dataclasses.replace(rules, calls=calls),
    )
