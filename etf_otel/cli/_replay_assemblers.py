"""``etf-otel replay --assembler NAME``: one recorded response through a third-party assembler, wrapped.

The recording is fed to the named assembler through its etf-otel adapter, exactly as an
application would use it, and what the wrapper records (``divergent_assembly`` events
with ``etf.divergence.kind``) is read back from a private in-memory tracer: the
divergences shown are the ones the instrumentation emits, not a separate computation.
Beside it, the identity rules of the recording's protocol assemble the whole recording
(``[DONE]`` included).

Which assemblers read which protocol (:data:`ASSEMBLERS_BY_PROTOCOL`):

* ``chat_completions``: ``openai`` (the SDK's ``ChatCompletionStreamState``; chunks are
  built as the SDK builds them from SSE data, and nothing after ``[DONE]`` reaches it, as
  with the SDK's own stream), ``langchain`` (``langchain-openai``'s chunk conversion summed
  with ``+``);
* ``responses``: ``openai`` (the SDK's ``ResponseStreamState``, which
  ``client.responses.stream(...)`` uses; events built as the SDK builds them, nothing after
  a ``[DONE]`` line);
* ``gemini``: ``google-genai`` (what the SDK's chat history keeps of a streamed turn: every
  chunk's first candidate content, its ``functionCall`` parts as they came; chunks built as the
  SDK builds them, nothing from an in-band error on);
* ``anthropic_messages``: ``anthropic`` (the SDK's ``accumulate_event`` as its
  ``MessageStream`` drives it; events built as the SDK builds them, ``ping`` dropped and
  nothing from an ``error`` event on, which the SDK's transport raises instead of handing
  on);
* any protocol: ``reference`` (the protocol's own adapter, which never diverges).

A name that does not read the recording's protocol, or whose library is not installed,
raises :class:`AssemblerUnavailable` with a one-line reason.

The named streams of the quirks tables live in :mod:`etf_otel.testing`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console
from rich.table import Table

from etf_otel import attributes as A
from etf_otel import protocols
from etf_otel.cli._replay_report import add_call_columns, build_report
from etf_otel.cli._replay_sdk_events import sdk_chunks, sdk_message_events, sdk_response_events, until_done
from etf_otel.cli._text import cut, print_table, shown
from etf_otel.core._identity import CompatibilityRule, IdentityRules
from etf_otel.core._results import AssemblyResult
from etf_otel.instrumentation._assemblers import ObservedAssembler
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.protocols import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, GEMINI, RESPONSES, WireProtocol
from etf_otel.protocols._chat_completions import ReferenceAssembler

__all__ = [
    "ASSEMBLERS",
    "ASSEMBLERS_BY_PROTOCOL",
    "AssemblerComparison",
    "AssemblerUnavailable",
    "check_assembler",
    "recording_protocol",
    "render_comparison",
    "run_assembler",
]

ASSEMBLERS: Final = ("openai", "anthropic", "langchain", "google-genai", "reference")
"""Every ``--assembler`` name; :data:`ASSEMBLERS_BY_PROTOCOL` says which protocol each one reads."""

ASSEMBLERS_BY_PROTOCOL: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        CHAT_COMPLETIONS.name: ("openai", "langchain", "reference"),
        RESPONSES.name: ("openai", "reference"),
        ANTHROPIC_MESSAGES.name: ("anthropic", "reference"),
        GEMINI.name: ("google-genai", "reference"),
    }
)
"""The assemblers that read each protocol's recordings (``reference`` reads all of them)."""

_LIBRARY: Final[Mapping[str, str]] = MappingProxyType(
    {"openai": "openai", "langchain": "langchain-core", "anthropic": "anthropic", "google-genai": "google-genai"}
)
_INSTALL: Final[Mapping[str, str]] = MappingProxyType(
    {
        "openai": "pip install 'etf-otel[openai]'",
        "langchain": "pip install 'etf-otel[langchain]'",
        "anthropic": "pip install 'etf-otel[anthropic]'",
        "google-genai": "pip install 'etf-otel[google-genai]'",
    }
)


class AssemblerUnavailable(ImportError):
    """The assembler cannot run on this recording: it does not read the recording's protocol,
    or its library is not installed. ``str(error)`` is a one-line reason (with the install
    command when a library is missing); ``error.name`` says what is needed, so that
    ``f"--assembler {name} needs {error.name}"`` reads too."""

    def __init__(self, reason: str, *, needs: str) -> None:
        super().__init__(reason, name=needs)


@dataclass
class AssemblerComparison:
    """What one assembler made of a recording, beside what the rules made of it."""

    assembler: str
    calls: list[tuple[object, object, object]] | None
    """``(id, name, arguments)`` as the assembler produced them; ``None`` when it raised."""
    raised: str | None
    """The exception type the assembler raised (the message is not kept: it may quote values)."""
    rules: AssemblyResult
    divergences: list[str] = field(default_factory=list)

    def assembler_dict(self, *, show_arguments: bool = False) -> dict[str, Any]:
        """What the assembler made of the recording: ``name``, ``raised``, ``calls``, ``divergences``.

        ``replay --assembler NAME --json`` prints it as ``"assembler"`` beside the keys of the
        replay report of the same recording (docs/cli.md).
        """
        calls = None
        if self.calls is not None:
            calls = []
            for call_id, name, arguments in self.calls:
                entry: dict[str, Any] = {"id": call_id, "name": name}
                if show_arguments:
                    entry["arguments"] = arguments
                calls.append(entry)
        return {"name": self.assembler, "raised": self.raised, "calls": calls, "divergences": list(self.divergences)}

    def to_dict(self, *, show_arguments: bool = False) -> dict[str, Any]:
        """The comparison on its own (a library view; the CLI prints :meth:`assembler_dict` in the
        replay report): ``assembler`` (the name), ``raised``, ``calls``, ``divergences``, ``rules``."""
        own = self.assembler_dict(show_arguments=show_arguments)
        rules = build_report(self.rules, show_arguments=show_arguments).to_dict(show_arguments=show_arguments)
        return {"assembler": own.pop("name"), **own, "rules": rules}


@dataclass(frozen=True)
class _Driver:
    wrap: Callable[[Instrumentation], Any]
    feed: str
    finish: str
    calls: Callable[[Any], Sequence[tuple[object, object, object]]]
    chunks: Callable[[Sequence[object]], list[object]]


def recording_protocol(chunks: Sequence[object], protocol: WireProtocol | str | None = None) -> WireProtocol:
    """``protocol``, else the one that recognizes the first event (Chat Completions when none does)."""
    if protocol is not None:
        return protocols.get(protocol)
    return (protocols.detect(chunks[0]) if chunks else None) or CHAT_COMPLETIONS


def _reference_driver(protocol: WireProtocol) -> _Driver:
    from etf_otel.instrumentation._assemblers import reference_calls

    if protocol is CHAT_COMPLETIONS:
        return _Driver(
            lambda etf: etf.assembler(ReferenceAssembler(rules=etf.rules)), "feed", "finish", reference_calls, list
        )
    return _Driver(
        lambda etf: ObservedAssembler(protocol.assembler(rules=etf.rules), etf.observer(protocol=protocol)),
        "feed",
        "finish",
        reference_calls,
        list,
    )


def _library_driver(name: str, protocol: WireProtocol) -> _Driver:
    if name == "openai" and protocol is CHAT_COMPLETIONS:
        from etf_otel.integrations.openai import _state as chat

        return _Driver(
            lambda etf: chat.instrument_accumulator(chat.CHAT_COMPLETION_ACCUMULATOR.new_state(), instrumentation=etf),
            "handle_chunk",
            "get_final_completion",
            chat.completion_calls,
            sdk_chunks,
        )
    if name == "openai":  # Responses
        from openai.lib.streaming.responses import _responses  # noqa: F401 - the library must be there

        from etf_otel.integrations.openai import instrument_accumulator
        from etf_otel.integrations.openai._responses_state import RESPONSE_ACCUMULATOR, response_calls

        return _Driver(
            lambda etf: instrument_accumulator(RESPONSE_ACCUMULATOR.new_state(), instrumentation=etf),
            "handle_event",
            "get_final_response",
            response_calls,
            sdk_response_events,
        )
    if name == "langchain":
        import langchain_core  # noqa: F401 - the library must be there

        from etf_otel.integrations.langchain import instrument_langchain, message_calls

        return _Driver(
            lambda etf: instrument_langchain(instrumentation=etf), "add", "result", message_calls, until_done
        )
    if name == "google-genai":
        from google.genai import types  # noqa: F401 - the library must be there

        from etf_otel.integrations.google_genai._history import HISTORY_ADAPTER, ChatHistory, history_calls

        return _Driver(
            lambda etf: etf.assembler(ChatHistory(), adapter=HISTORY_ADAPTER, protocol=GEMINI),
            "add",
            "turn",
            history_calls,
            list,
        )
    from anthropic.lib.streaming import _messages  # noqa: F401 - the library must be there

    from etf_otel.integrations.anthropic._state import MessageAccumulator, instrument_accumulator, message_calls

    return _Driver(
        lambda etf: instrument_accumulator(MessageAccumulator(), instrumentation=etf),
        "accumulate",
        "get_final_message",
        message_calls,
        sdk_message_events,
    )


def _driver(name: str, protocol: WireProtocol = CHAT_COMPLETIONS) -> _Driver:
    if name not in ASSEMBLERS:
        raise ValueError(f"unknown assembler {name!r}; expected one of {', '.join(ASSEMBLERS)}")
    fitting = ASSEMBLERS_BY_PROTOCOL.get(protocol.name, ("reference",))
    if name not in fitting:
        readable = [wire for wire, names in ASSEMBLERS_BY_PROTOCOL.items() if name in names]
        raise AssemblerUnavailable(
            f"--assembler {name} does not read {protocol.name} recordings (it reads {' and '.join(readable)};"
            f" for {protocol.name}: {', '.join(fitting)})",
            needs="a recording of " + " or ".join(readable),
        )
    if name == "reference":
        return _reference_driver(protocol)
    try:
        return _library_driver(name, protocol)
    except ImportError as error:
        library, install = _LIBRARY[name], _INSTALL[name]
        raise AssemblerUnavailable(
            f"--assembler {name} needs {library}, which is not installed: {install}", needs=f"{library} ({install})"
        ) from error


def check_assembler(name: str, protocol: WireProtocol | str) -> None:
    """Raise what :func:`run_assembler` would for ``name`` on a ``protocol`` recording, before running anything.

    ``ValueError`` for an unknown name; :class:`AssemblerUnavailable` (an ``ImportError``
    whose ``str`` is the one-line reason) when it does not read that protocol or its
    library is not installed.
    """
    _driver(name, protocols.get(protocol))


def run_assembler(
    name: str,
    chunks: Sequence[object],
    allow: Iterable[CompatibilityRule | str] = (),
    protocol: WireProtocol | str | None = None,
) -> AssemblerComparison:
    """Run ``chunks`` through assembler ``name`` (wrapped) and through the rules; see the module doc.

    ``protocol`` is the recording's (a name of ``etf_otel.protocols.PROTOCOLS``); ``None``
    detects it from the first event as ``replay`` does. ``ValueError`` for an unknown
    name, :class:`AssemblerUnavailable` for one that cannot run on this recording.
    """
    allow = list(allow)
    wire = recording_protocol(chunks, protocol)
    driver = _driver(name, wire)
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(shutdown_on_exit=False)
    etf = Instrumentation(tracer_provider, meter_provider, allow=allow)
    calls: list[tuple[object, object, object]] | None = None
    raised: str | None = None
    with tracer_provider.get_tracer("etf_otel.cli._replay_report").start_as_current_span("replay"):
        wrapped = driver.wrap(etf)
        try:
            for chunk in driver.chunks(chunks):
                getattr(wrapped, driver.feed)(chunk)
            calls = list(driver.calls(getattr(wrapped, driver.finish)()))
        except Exception as error:  # the assembler's own failure is a result here
            raised = type(error).__name__
        del wrapped  # a response abandoned by a raising feed is finalized now, inside the span
    tracer_provider.shutdown()
    meter_provider.shutdown()
    kinds: list[str] = []
    for span in exporter.get_finished_spans():
        for event in span.events:
            kind = (event.attributes or {}).get(A.ETF_DIVERGENCE_KIND)
            if event.name == A.EVENT_INTEGRITY_VIOLATION and isinstance(kind, str):
                kinds.append(kind)
    rules = wire.assembler(rules=IdentityRules.for_rules(allow))
    for chunk in chunks:
        rules.feed(chunk)
    return AssemblerComparison(name, calls, raised, rules.finish(), sorted(set(kinds)))


def _text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return cut(value)
    import json

    return cut(json.dumps(value, sort_keys=True, separators=(",", ":")))


def render_comparison(comparison: AssemblerComparison, console: Console, *, show_arguments: bool = False) -> None:
    """Print the rules' calls (with their categories) and the assembler's side by side, then the divergences.

    On a terminal the ids and arguments fold, the names are whole or cut with ``…``, the rest is whole.
    """
    table = Table(title=f"rules vs {comparison.assembler}", title_justify="left")
    columns = ["#", "rules id", "rules name", "verdict", "categories"]
    if show_arguments:
        columns.append("rules arguments")
    columns += [f"{comparison.assembler} id", f"{comparison.assembler} name"]
    if show_arguments:
        columns.append(f"{comparison.assembler} arguments")
    add_call_columns(table, columns)
    ours = comparison.rules.calls
    theirs = comparison.calls or []
    for position in range(max(len(ours), len(theirs))):
        row = [str(position)]
        if position < len(ours):
            call = ours[position]
            row += [_text(call.id), _text(call.name), call.verdict.value]
            row.append("\n".join(category.value for category in call.categories) or "-")
            if show_arguments:
                row.append(shown(call.arguments))
        else:
            row += ["", "", "", ""] + ([""] if show_arguments else [])
        if position < len(theirs):
            call_id, name, arguments = theirs[position]
            row += [_text(call_id), _text(name)] + ([_text(arguments)] if show_arguments else [])
        else:
            row += ["", ""] + ([""] if show_arguments else [])
        table.add_row(*row)
    print_table(console, table)
    if comparison.raised is not None:
        console.print(f"{comparison.assembler} raised {comparison.raised}")
    rejections = ", ".join(dict.fromkeys(rejection.category.value for rejection in comparison.rules.rejections))
    dispatchable = "dispatchable" if comparison.rules.dispatchable else "not dispatchable"
    console.print(f"rules: {dispatchable}" + (f" (rejections: {rejections})" if rejections else ""))
    console.print("divergences: " + (", ".join(comparison.divergences) or "none"))
