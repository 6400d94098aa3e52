"""One verdict vocabulary: ``proposed`` only for the calls of a dispatchable response.

Per protocol (Gemini too), a stream with one call whose own checks pass and a problem elsewhere
that blocks the response: that call is ``rejected`` with the response's blocking category in
every place a user reads it (``replay --json``, the replay table, the ``assemble_tool_call`` span, the
``etf.tool_calls`` metric, the ``replay --html`` page, the audit of the exported spans in both
engines), and no ``proposed`` is counted anywhere.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from etf_otel import attributes as A
from etf_otel.instrumentation import Instrumentation
from etf_otel.testing import Capture, anthropic, gemini, responses
from etf_otel.testing.chat import chunk, finished, fragment

from .test_cli_replay import run, run_json
from .test_html_replay import elements

WEATHER = ('{"city":', '"Paris"}')


def _chat_missing_index() -> list[Any]:
    """A valid call, then a fragment without an index (it belongs to no slot, and blocks the response)."""
    valid = chunk(fragment(0, "call_a", "get_weather", "".join(WEATHER)))
    return finished(valid, chunk(fragment(None, arguments="{}")))


def _chat_sibling_invalid() -> list[Any]:
    """A valid call beside a call whose arguments are not JSON: the sibling blocks the response."""
    return finished(
        chunk(fragment(0, "call_a", "get_weather", "".join(WEATHER))),
        chunk(fragment(1, "call_b", "get_time", '{"tz": ')),
    )


def _responses_unknown_slot() -> list[Any]:
    """A valid call, then an argument delta for an output index no item opened."""
    return responses.stream(responses.call(0, "call_a", "get_weather", WEATHER), responses.delta(5, "{}"))


def _responses_sibling_incomplete() -> list[Any]:
    """A valid call beside an item that ended with status ``incomplete``."""
    sibling = [
        responses.added(1, call_id="call_b", name="get_time"),
        responses.delta(1, "{}"),
        responses.item_done(1, call_id="call_b", name="get_time", arguments="{}", status="incomplete"),
    ]
    return responses.stream(responses.call(0, "call_a", "get_weather", WEATHER), sibling)


def _anthropic_unknown_slot() -> list[Any]:
    """A valid ``tool_use`` block, then an ``input_json_delta`` for a block index never started."""
    return anthropic.stream(anthropic.tool_call(0, "call_a", "get_weather", *WEATHER), [anthropic.json_delta(7, "{}")])


def _anthropic_sibling_invalid() -> list[Any]:
    """A valid ``tool_use`` block beside one whose input is cut JSON."""
    cut = anthropic.tool_call(1, "call_b", "get_time", '{"tz":')
    return anthropic.stream(anthropic.tool_call(0, "call_a", "get_weather", *WEATHER), cut)


def _gemini_sibling_without_id() -> list[Any]:
    """A call with an id beside one without: once a call of the candidate has an id, every call needs one."""
    return gemini.stream(
        gemini.chunk(gemini.call("get_weather", {"city": "Paris"}, id="call_a"), gemini.call("get_time", {}))
    )


CASES = {
    # name: (protocol, events, the response's blocking category)
    "chat-missing-index": ("chat_completions", _chat_missing_index, "missing_index"),
    "chat-sibling-invalid": ("chat_completions", _chat_sibling_invalid, "invalid_arguments"),
    "responses-unknown-slot": ("responses", _responses_unknown_slot, "unknown_slot"),
    "responses-sibling-incomplete": ("responses", _responses_sibling_incomplete, "incomplete_response"),
    "anthropic-unknown-slot": ("anthropic_messages", _anthropic_unknown_slot, "unknown_slot"),
    "anthropic-sibling-invalid": ("anthropic_messages", _anthropic_sibling_invalid, "invalid_arguments"),
    "gemini-sibling-without-id": ("gemini", _gemini_sibling_without_id, "missing_id"),
}
CASE_IDS = list(CASES)


def recording(tmp_path: Path, name: str) -> Path:
    """The case as an SSE recording (``event:`` lines where the protocol has them)."""
    protocol, events, _ = CASES[name]
    frames = []
    for event in events():
        head = f"event: {event['type']}\n" if protocol in ("responses", "anthropic_messages") else ""
        frames.append(f"{head}data: {event if isinstance(event, str) else json.dumps(event)}\n\n")
    path = tmp_path / f"{name}.sse"
    path.write_text("".join(frames), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", CASE_IDS)
def test_replay_json_rejects_the_valid_call_with_the_blocking_category(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, blocking = CASES[name]
    code, report = run_json(["replay", str(recording(tmp_path, name))], capsys)
    assert code == 1
    assert report["dispatchable"] is False
    valid = next(call for call in report["calls"] if call["id"] == "call_a")
    assert (valid["verdict"], valid["categories"]) == ("rejected", [blocking])
    assert [call["verdict"] for call in report["calls"]] == ["rejected"] * len(report["calls"])
    # The rejections stay the causes: the blocked call adds none of its own.
    assert all(r["index"] != valid["index"] or r["category"] != blocking for r in report["rejections"])


@pytest.mark.parametrize("name", CASE_IDS)
def test_the_replay_table_says_rejected_and_the_category(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, blocking = CASES[name]
    code, out, _ = run(["replay", str(recording(tmp_path, name))], capsys)
    assert code == 1
    row = next(line.split("\t") for line in out.splitlines() if "\tcall_a\t" in line)  # piped: tab-separated
    assert row[5:] == ["rejected", blocking]
    assert "proposed" not in out


@pytest.mark.parametrize("name", CASE_IDS)
def test_the_span_and_the_metric_say_rejected_with_the_blocking_category(name: str, etf_capture: Capture) -> None:
    protocol, events, blocking = CASES[name]
    instrumentation = Instrumentation(etf_capture.tracer_provider, etf_capture.meter_provider)
    fed = events()
    assert list(instrumentation.stream(iter(fed), protocol=protocol)) == fed
    calls = etf_capture.spans(A.SPAN_ASSEMBLE_TOOL_CALL)
    (valid,) = [span for span in calls if (span.attributes or {}).get(A.GEN_AI_TOOL_CALL_ID) == "call_a"]
    attributes = valid.attributes or {}
    assert attributes[A.ETF_TOOL_CALL_VERDICT] == "rejected"
    assert tuple(attributes[A.ETF_TOOL_CALL_CATEGORIES]) == (blocking,)  # type: ignore[arg-type]
    assert attributes[A.ERROR_TYPE] == blocking
    assert all((span.attributes or {})[A.ETF_TOOL_CALL_VERDICT] == "rejected" for span in calls)
    response = etf_capture.span(A.SPAN_ASSEMBLE_RESPONSE)
    assert (response.attributes or {})[A.ETF_STREAM_DISPATCHABLE] is False
    assert etf_capture.metric_sum(A.METRIC_TOOL_CALLS, etf__tool_call__verdict="proposed") == 0
    assert etf_capture.metric_sum(A.METRIC_TOOL_CALLS, etf__tool_call__verdict="rejected") == len(calls)
    weather = etf_capture.metric_sum(
        A.METRIC_TOOL_CALLS, etf__tool_call__verdict="rejected", gen_ai__tool__name="get_weather"
    )
    assert weather == 1


@pytest.mark.parametrize("name", CASE_IDS)
def test_the_html_page_says_rejected_with_the_category(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, blocking = CASES[name]
    page = tmp_path / "page.html"
    code, _, err = run(["replay", str(recording(tmp_path, name)), "--html", str(page)], capsys)
    assert (code, err) == (1, "")
    document = page.read_text(encoding="utf-8")
    found = elements(document)
    verdicts = {attrs.get("data-call"): attrs["data-verdict"] for _, attrs in found if "data-call" in attrs}
    assert verdicts and set(verdicts.values()) == {"rejected"}
    lane = document[document.index('data-call="0:0"') :]
    lane = lane[: lane.index("</div></div>")]
    # The category is the response's: the page says so, and the calls table says the same.
    assert "\u2715 rejected" in lane and f'<div class="muted">{blocking} (response blocked)' in lane
    assert f"<td>rejected</td><td>{blocking} (response blocked)</td>" in document
    assert "held" not in document and "\u2715 proposed" not in document


ENGINES = [
    "python",
    pytest.param(
        "chdb",
        marks=pytest.mark.skipif(importlib.util.find_spec("chdb") is None, reason="chdb is not installed (chdb extra)"),
    ),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", CASE_IDS)
def test_the_audit_of_the_exported_spans_names_the_blocking_category(
    name: str, engine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, blocking = CASES[name]
    export = tmp_path / "spans.jsonl"
    code, _, err = run(["replay", str(recording(tmp_path, name)), "--export", str(export)], capsys)
    assert (code, err) == (1, "")
    code, report = run_json(["audit", "--no-progress", "--engine", engine, str(export)], capsys)
    assert code == 1
    assert [(kind["kind"], kind["categories"]) for kind in report["by_kind"]] == [("recorded_rejection", {blocking: 1})]
    (finding,) = report["traces_detail"][0]["findings"]
    assert blocking in finding["detail"] and "proposed" not in finding["detail"]
