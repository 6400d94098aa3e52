"""A fourth wire protocol, whole, in this one module: the seam holds with no edit elsewhere.

``toy`` is a made-up protocol: its events are ``{"toy": "call", "slot", "ref", "tool", "args"}``
and ``{"toy": "end", "why"}``, its next request is a list of messages whose ``"answer"`` ones
carry ``"ref"``, a host receives a call as ``{"ref", "tool", "args"}``. Its adapter lowers the
events onto the slot model, its :class:`WireProtocol` description says everything else, and
:func:`etf_otel.protocols.register` (with :func:`etf_otel.testing.register_quirk_table`) is
all it takes for ``replay --json``, ``--html``, ``--followup``, the host's call reading, the
scripted server and the quirks tooling to take it like the built-in ones. It is registered for
the tests of this module only, and unregistered after.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from etf_otel import ABSENT, AssemblyResult, IdentityRules, ResponseSlots, protocols
from etf_otel.cli._main import main
from etf_otel.instrumentation._host import call_fields
from etf_otel.protocols import CallFields, FollowUp, WireProtocol, field
from etf_otel.testing import QUIRK_TABLES, LocalChatServer, Script, register_quirk_table, unregister_quirk_table

from ..conftest import Captured

ROOT = Path(__file__).resolve().parents[2]

# --- the protocol: its adapter and its description -----------------------------------------------


class ToyAssembler:
    """Lowers ``toy`` events onto :class:`ResponseSlots`: one scope, a slot per ``slot`` number."""

    def __init__(self, *, rules: IdentityRules, clock: Callable[[], int] | None = None, **_: object) -> None:
        self._slots = ResponseSlots(rules, clock=clock)

    @property
    def slots(self) -> ResponseSlots:
        return self._slots

    @property
    def finished(self) -> bool:
        return self._slots.finished

    def feed(self, event: object) -> None:
        kind = field(event, "toy")
        if kind == "call":
            fields = (field(event, name) for name in ("ref", "tool", "args"))
            self._slots.fragment(0, event.get("slot", 0), *fields)  # type: ignore[union-attr]
        elif kind == "end":
            self._slots.finish_reason(0, str(field(event, "why")))
            self._slots.end()

    def feed_done(self) -> None:
        return None

    def finish(self) -> AssemblyResult:
        return self._slots.finish()


def _recognizes(event: object) -> bool:
    return isinstance(field(event, "toy"), str)


def _result_ids(followup: object) -> list[object] | None:
    messages = field(followup, "messages") if isinstance(followup, dict) else followup
    if not isinstance(messages, list):
        return None
    return [field(message, "ref") for message in messages if field(message, "role") == "answer"]


def _follow_up(messages: Sequence[object]) -> FollowUp | None:
    asked = [at for at, message in enumerate(messages) if field(message, "role") == "model"]
    if not asked:
        return None
    ids = _result_ids(list(messages[asked[-1] + 1 :])) or []
    return asked[-1], [ref if isinstance(ref, str) else None for ref in ids]


def _complete_body(event: object) -> str | None:
    return "a complete toy body" if field(event, "toy") == "whole" else None


def _later_responses(events: Sequence[object]) -> list[int]:
    ended, starts = False, []
    for position, event in enumerate(events):
        if ended and field(event, "toy") == "call":
            starts.append(position)
            ended = False
        ended = ended or field(event, "toy") == "end"
    return starts


def _call_fields(call: object) -> CallFields | None:
    if field(call, "ref") is ABSENT:
        return None
    return field(call, "ref"), field(call, "tool"), field(call, "args")


TOY = WireProtocol(
    name="toy",
    assembler=ToyAssembler,
    recognizes=_recognizes,
    result_ids=_result_ids,
    title="Toy Protocol",
    finish_reasons=frozenset({"toy_done"}),
    followup_shape="a list of messages, or an object holding it as messages",
    follow_up=_follow_up,
    complete_body=_complete_body,
    later_responses=_later_responses,
    slot_label=lambda choice, index: "toy: no slot" if index is None else f"toy slot {index}",
    call_fields=_call_fields,
    request_path="/v1/toy",
)
QUIRKS: dict[str, list[object]] = {
    "clean": [{"toy": "call", "ref": "toy-1", "tool": "read_page", "args": "{}"}, {"toy": "end", "why": "toy_done"}],
    "ref changes mid-call": [
        {"toy": "call", "ref": "toy-1", "tool": "read_page", "args": "{"},
        {"toy": "call", "ref": "toy-2", "args": "}"},
        {"toy": "end", "why": "toy_done"},
    ],
}

EVENTS: list[object] = [
    {"toy": "call", "slot": 0, "ref": "toy-1", "tool": "read_page", "args": '{"page":'},
    {"toy": "call", "slot": 0, "args": "1}"},
    {"toy": "end", "why": "toy_done"},
]


@pytest.fixture(autouse=True)
def toy() -> Iterator[WireProtocol]:
    protocols.register(TOY)
    register_quirk_table(TOY, QUIRKS)
    try:
        yield TOY
    finally:
        unregister_quirk_table(TOY)
        protocols.unregister(TOY)


def replay(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["replay", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def write(path: Path, events: Sequence[object]) -> str:
    path.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")
    return str(path)


# --- replay ----------------------------------------------------------------------------------------


def test_replay_json_detects_and_assembles_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = replay([write(tmp_path / "r.jsonl", EVENTS), "--json", "--show-arguments"], capsys)
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert [(c["id"], c["name"], c["arguments"], c["verdict"]) for c in report["calls"]] == [
        ("toy-1", "read_page", '{"page":1}', "proposed")
    ]
    assert report["dispatchable"] is True
    code, out, _ = replay([write(tmp_path / "r.jsonl", EVENTS), "--json", "--protocol", "toy"], capsys)
    assert code == 0
    assert "toy_done" in out  # its own finish reason is known: kept, not _OTHER
    assert "toy_done" in protocols.known_finish_reasons()


def test_replay_refuses_its_complete_body_and_two_responses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = replay([write(tmp_path / "body.jsonl", [{"toy": "whole"}])], capsys)
    assert code == 2
    assert "a complete toy body, not a stream: toy judges streamed responses only" in err
    code, _, err = replay([write(tmp_path / "two.jsonl", [*EVENTS, *EVENTS])], capsys)
    assert code == 2
    assert "2 responses in one recording (the second starts at event 4)" in err


def test_replay_followup_links_its_next_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recording = write(tmp_path / "r.jsonl", EVENTS)
    answered = tmp_path / "next.json"
    answered.write_text(json.dumps({"messages": [{"role": "model"}, {"role": "answer", "ref": "toy-1"}]}))
    code, out, _ = replay([recording, "--followup", str(answered), "--json"], capsys)
    assert code == 0
    assert json.loads(out)["linkage"] == []
    orphaned = tmp_path / "orphaned.json"
    orphaned.write_text(json.dumps([{"role": "answer", "ref": "toy-1"}, {"role": "answer", "ref": "toy-9"}]))
    code, out, _ = replay([recording, "--followup", str(orphaned), "--json"], capsys)
    assert code == 1
    assert [finding["category"] for finding in json.loads(out)["linkage"]] == ["orphaned_result"]
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps("not a request"))
    code, _, err = replay([recording, "--followup", str(wrong)], capsys)
    assert code == 2
    assert err.endswith(f"{wrong}: not a toy next request (a list of messages, or an object holding it as messages)\n")


def test_replay_html_names_its_slots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "r.html"
    code, _, _ = replay([write(tmp_path / "r.jsonl", EVENTS), "--html", str(page)], capsys)
    assert code == 0
    html = page.read_text(encoding="utf-8")
    assert "toy slot 0" in html
    assert "<b>protocol</b> toy" in html


def test_its_follow_up_shape_is_read_through_the_description() -> None:
    messages = [{"role": "user"}, {"role": "model"}, {"role": "answer", "ref": "toy-1"}, {"role": "answer", "ref": 7}]
    assert protocols.get("toy").follow_up(messages) == (1, ["toy-1", None])
    assert protocols.get("toy").follow_up([{"role": "user"}]) is None


# --- hosts, the scripted server, the quirks tooling ----------------------------------------------


def test_a_host_reads_its_call_objects(captured: Captured) -> None:
    call = {"ref": "toy-1", "tool": "read_page", "args": '{"page":1}'}
    assert call_fields(call) == ("toy-1", "read_page", '{"page":1}')
    instrumentation = captured.instrumentation()
    for _ in instrumentation.stream(iter(EVENTS), protocol="toy"):
        pass
    host = instrumentation.host(lambda received: "page text")
    assert host(call) == "page text"
    (execution,) = captured.spans("execute_tool")
    assert (execution.attributes or {})["gen_ai.tool.call.id"] == "toy-1"  # the proposal's id: linked
    (assembly,) = captured.spans("assemble_tool_call")
    assert [link.context.span_id for link in execution.links] == [assembly.context.span_id]


def test_the_scripted_server_answers_on_its_path() -> None:
    with LocalChatServer() as server:
        server.enqueue(Script(events=EVENTS))
        request = urllib.request.Request(f"{server.root_url}/v1/toy", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            body = answer.read().decode("utf-8")
    assert [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")] == EVENTS
    assert "/v1/toy" in protocols.REQUEST_PATHS


def _quirks_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("quirks_table_for_toy", ROOT / "scripts" / "quirks_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_the_quirks_tooling_writes_its_table() -> None:
    pytest.importorskip("openai")
    pytest.importorskip("anthropic")
    pytest.importorskip("langchain_openai")
    assert list(QUIRK_TABLES["toy"]) == ["clean", "ref changes mid-call"]
    script: Any = _quirks_script()
    sections = script._sections()
    (section,) = [section for section in sections if section.protocol == "toy"]
    assert (section.heading, section.intro, section.columns) == ("Toy Protocol", "", ())
    table = script.build_table(section)
    rows = table.splitlines()
    assert rows[:2] == ["| quirk | identity rules (reference assembler) |", "|---|---|"]
    assert rows[2] == "| clean | `toy-1` `read_page` `{}`: proposed<br>**dispatchable** |"
    assert rows[3].startswith("| ref changes mid-call |") and "id_conflict" in rows[3]
    page = script.build_page({other.protocol: "(table)" for other in sections} | {"toy": table})
    assert "\n## Toy Protocol\n\n| quirk |" in page
