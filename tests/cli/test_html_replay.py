"""``etf-otel replay --html``: the page's content, privacy and errors, without a browser (tests/browser/ has one)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from etf_otel import protocols
from etf_otel.cli.html._replay import MAX_COLUMNS, STREAM, replay_timeline
from etf_otel.cli.html._replay_page import render_replay
from etf_otel.protocols._chat_completions import DONE
from etf_otel.testing import ANTHROPIC_QUIRK_STREAMS, BEDROCK_QUIRK_STREAMS, QUIRK_STREAMS, RESPONSES_QUIRK_STREAMS
from etf_otel.testing.chat import chunk, finished, fragment

from .test_cli_replay import NO_ARGUMENTS_BODIES, ROOT, run, write_jsonl

CANARY = "call-CANARY-9f3e1"
ARGUMENT_CANARY = "ARGCANARY7c2"
PARALLEL = ROOT / "docs" / "images" / "parallel-calls.jsonl"
STREAMS = {
    "chat_completions": QUIRK_STREAMS,
    "responses": RESPONSES_QUIRK_STREAMS,
    "anthropic_messages": ANTHROPIC_QUIRK_STREAMS,
    "bedrock_converse": BEDROCK_QUIRK_STREAMS,
}


class _Elements(HTMLParser):
    """Every start tag with its attributes: the page must parse and its data attributes be findable."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))


def elements(document: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Elements()
    parser.feed(document)
    return parser.elements


def page_of(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    out = tmp_path / "page.html"
    code, _, err = run(["replay", str(path), "--html", str(out), *extra], capsys)
    assert err == ""
    return code, out.read_text(encoding="utf-8")


def test_the_parallel_recording_has_every_lane_verdict_and_the_rejected_category(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = page_of(PARALLEL, tmp_path, capsys)
    assert code == 1  # the page changes nothing about the exit code: the id_conflict is found
    found = elements(document)
    lanes = [attrs["data-lane"] for _, attrs in found if attrs.get("role") == "group"]
    assert lanes == ["response", *(f"choice 0 \u00b7 tool_calls[{i}]" for i in range(3))]
    verdicts = [attrs["data-verdict"] for _, attrs in found if "data-verdict" in attrs]
    # The two valid calls are rejected too: their sibling's id_conflict blocks the response.
    assert verdicts == ["stream", "rejected", "rejected", "rejected"]
    assert document.count("\u2715 rejected") == 3 and "proposed</span>" not in document
    assert document.count('<div class="muted">id_conflict (response blocked)</div>') == 2  # the siblings'
    assert document.count('<div class="muted">id_conflict</div>') == 1  # its own
    rejected = [attrs for _, attrs in found if attrs.get("data-kind") == "reject"]
    assert [(attrs["data-category"], attrs["data-fragment"]) for attrs in rejected] == [("id_conflict", "8")]
    assert ">id_conflict</span>" in document  # the category is written, not only coloured
    marks = [attrs for _, attrs in found if "data-fragment" in attrs]
    assert sorted(int(attrs["data-fragment"] or 0) for attrs in marks) == list(range(1, 10))  # every fragment
    lefts = {attrs["data-fragment"]: int(re.findall(r"left:(\d+)px", attrs["style"] or "")[0]) for attrs in marks}
    assert sorted(lefts, key=lambda fragment: lefts[fragment]) == [str(n) for n in range(1, 10)]  # one axis
    assert all(attrs.get("tabindex") == "0" and attrs.get("aria-label") for attrs in marks)
    assert "call_other" not in document  # the rejected id
    assert '"Par' not in document and "Europe/" not in document  # arguments


def test_no_external_resource_is_referenced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, document = page_of(PARALLEL, tmp_path, capsys)
    for tag, attrs in elements(document):
        assert "src" not in attrs and not (tag == "link"), (tag, attrs)
        assert not (attrs.get("href") or "").startswith(("http", "//")), attrs
    assert "http://" not in document and "https://" not in document and "@import" not in document
    assert "default-src 'none'" in document  # and the page forbids any fetch


@pytest.mark.parametrize("show", [False, True])
def test_canaries_appear_only_as_preserved_ids_and_opted_in_arguments(
    show: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = write_jsonl(
        tmp_path / "canary.jsonl",
        finished(
            chunk(fragment(0, "call-a", "read_page", '{"q": "' + ARGUMENT_CANARY)),
            chunk(fragment(0, CANARY, arguments='"}')),  # id_conflict: the rejected id is a canary
            chunk(fragment(1, "call-<b>x</b>", "<script>alert(1)</script>", "{}")),
        ),
    )
    code, document = page_of(recording, tmp_path, capsys, *(["--show-arguments"] if show else []))
    assert code == 1
    assert CANARY not in document
    assert (ARGUMENT_CANARY in document) is show
    assert "<script>alert(1)</script>" not in document and "&lt;script&gt;alert(1)&lt;/script&gt;" in document
    assert "call-&lt;b&gt;x&lt;/b&gt;" in document  # a preserved id, escaped


@pytest.mark.parametrize(
    ("name", "stream"),
    [(name, stream) for protocol in STREAMS.values() for name, stream in protocol.items()],
)
def test_every_quirk_stream_of_every_protocol_renders(name: str, stream: list[Any]) -> None:
    protocol = protocols.detect(stream[0]) if stream[0] != DONE else None
    assert protocol is not None, name
    timeline = replay_timeline(protocol, stream, [])
    document = render_replay(timeline, source=name, show_arguments=False)
    result = timeline.result
    assert len(re.findall(r'data-fragment="', document)) == len(result.diagnostics)
    assert len(re.findall(r"data-verdict=", document)) == len(timeline.lanes)
    for call in result.calls:
        assert f'data-call="{call.choice}:{call.index}"' in document
    categories = {d.category.value for d in result.diagnostics if d.category is not None}
    for category in categories:
        assert f'data-category="{category}"' in document
    assert f'data-state="{result.state.value}"' in document


def test_lifecycle_protocols_draw_snapshots_closes_and_the_end() -> None:
    for name in ("interleaved calls", "clean multi-call stream"):
        stream = RESPONSES_QUIRK_STREAMS[name]
        timeline = replay_timeline(protocols.get("responses"), stream, [])
        kinds = [(tick.lane, tick.kind) for tick in timeline.ticks]
        for key in (0, 1):
            assert ((0, key), "snapshot") in kinds and ((0, key), "close") in kinds
            if any(isinstance(e, dict) and e.get("type") == "response.function_call_arguments.done" for e in stream):
                assert ((0, key), "arguments_closed") in kinds
        assert (STREAM, "end") in kinds
    anthropic = replay_timeline(
        protocols.get("anthropic_messages"), ANTHROPIC_QUIRK_STREAMS["clean multi-call stream"], []
    )
    assert any(tick.kind == "close" for tick in anthropic.ticks)
    assert anthropic.ticks[-1].kind == "end"
    bedrock = replay_timeline(
        protocols.get("bedrock_converse"), BEDROCK_QUIRK_STREAMS["clean multi-call stream (Anthropic on Bedrock)"], []
    )
    kinds = [(tick.lane, tick.kind) for tick in bedrock.ticks]
    assert ((0, 1), "close") in kinds and ((0, 2), "close") in kinds  # the lanes are the block indexes
    assert bedrock.ticks[-1].kind == "end"
    document = render_replay(bedrock, source="bedrock", show_arguments=False)
    assert "content block 1" in document and "content block 2" in document


def test_a_cut_stream_ends_with_a_cut_mark() -> None:
    timeline = replay_timeline(protocols.get("chat_completions"), QUIRK_STREAMS["cut mid-arguments"], [])
    assert timeline.ticks[-1].lane == STREAM and timeline.ticks[-1].kind == "cut"
    assert "truncated" in render_replay(timeline, source="cut", show_arguments=False)


def test_columns_are_capped_and_the_rest_counted(tmp_path: Path) -> None:
    pieces = [chunk(fragment(0, "call-a", "f", "{"))] + [chunk(fragment(0, arguments=" ")) for _ in range(MAX_COLUMNS)]
    timeline = replay_timeline(protocols.get("chat_completions"), finished(*pieces), [])
    assert len(timeline.ticks) == MAX_COLUMNS
    assert timeline.dropped == len(pieces) + 2 - MAX_COLUMNS  # + the finish reason and [DONE]
    assert f"{timeline.dropped} more column(s) not drawn" in render_replay(timeline, source="x", show_arguments=False)


def test_the_page_is_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, first = page_of(PARALLEL, tmp_path, capsys)
    _, second = page_of(PARALLEL, tmp_path, capsys)
    assert first == second


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        (".", "is a directory"),
        ("", "empty file name"),
        ("missing-dir/page.html", "no directory"),
        ("/dev/full", "cannot write /dev/full"),
    ],
)
def test_an_unwritable_html_path_is_one_line_and_exit_2(
    target: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["replay", str(PARALLEL), "--html", target], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("etf-otel replay: --html") and reason in err, err


def test_a_snapshot_that_contradicted_the_deltas_is_red_and_says_so() -> None:
    stream = RESPONSES_QUIRK_STREAMS["call_id changed in response.completed"]
    timeline = replay_timeline(protocols.get("responses"), stream, [])
    assert any("snapshot_mismatch" in (c.value for c in call.categories) for call in timeline.result.calls)
    document = render_replay(timeline, source="mismatch", show_arguments=False)
    (mark,) = re.findall(
        r'<span class="mark [^"]*t-snapshot_mismatch"[^>]*data-kind="snapshot_mismatch"[^>]*>', document
    )
    assert "snapshot_mismatch: the provider&#x27;s whole arguments contradicted its deltas" in mark
    after = document[document.index(mark) + len(mark) :]
    assert re.match(r'S</span><span class="cat[^"]*"[^>]*>snapshot_mismatch</span>', after), "labelled on the lane"
    assert re.search(r"\.t-reject, \.t-snapshot_mismatch \{ --c: #b3261e; \}", document), "red, as a rejection"
    clean = render_replay(
        replay_timeline(protocols.get("responses"), RESPONSES_QUIRK_STREAMS["clean multi-call stream"], []),
        source="clean",
        show_arguments=False,
    )
    assert 'data-kind="snapshot_mismatch"' not in clean and 'data-kind="snapshot"' in clean


def test_table_cells_never_wrap_mid_word() -> None:
    stream = RESPONSES_QUIRK_STREAMS["clean multi-call stream"]
    document = render_replay(replay_timeline(protocols.get("responses"), stream, []), source="s", show_arguments=False)
    rule = re.search(r"table\.data th, table\.data td \{[^}]*\}", document)
    assert rule is not None and "overflow-wrap: normal" in rule.group() and "anywhere" not in rule.group()
    assert re.search(r"table\.data \{[^}]*overflow-x: auto", document), "a wide table scrolls instead"


def test_every_transition_has_a_mark() -> None:
    """A transition the page cannot draw would fail the page of every response that meets it."""
    from etf_otel.cli.html._replay import SHAPES
    from etf_otel.core._vocabulary import Transition

    assert {transition.value for transition in Transition} <= set(SHAPES)


@pytest.mark.parametrize("shape", sorted(NO_ARGUMENTS_BODIES))
def test_a_body_call_without_arguments_renders_its_compatibility_decision(
    shape: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(NO_ARGUMENTS_BODIES[shape]), encoding="utf-8")
    code, document = page_of(path, tmp_path, capsys)
    assert code == 0
    assert "read as {} (compatibility rule)" in document
    code, document = page_of(path, tmp_path, capsys, "--deny", "absent_arguments_in_body")
    assert code == 1
