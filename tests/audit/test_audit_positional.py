"""Id-less proposals (identity by position) settled by span: ``etf.linkage.answered_spans`` on the request that
answered them (the Ollama integration records it), read alike by both engines.

The export is written here by hand, as the OTLP JSON file exporter writes it, so the cases the live loop
cannot produce on demand (an upper-case span id, a settlement that ended before the proposal) are exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .test_audit_evidence import ENGINES, audit, kinds

TRACE, LATER = "a" * 32, "b" * 32
RESPONSE = {"etf.stream.state": "completed", "etf.stream.dispatchable": True}
PROPOSED = {"etf.tool_call.verdict": "proposed", "etf.id.positional": "1"}


def attribute(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, list):
        return {"key": key, "value": {"arrayValue": {"values": [{"stringValue": item} for item in value]}}}
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    return {"key": key, "value": {"stringValue": value}}


def span(
    trace: str, span_id: int, name: str, times: tuple[int, int], attributes: dict[str, Any], parent: int = 0
) -> Any:
    found = {
        "traceId": trace,
        "spanId": f"{span_id:016x}",
        "name": name,
        "startTimeUnixNano": str(times[0]),
        "endTimeUnixNano": str(times[1]),
        "attributes": [attribute(key, value) for key, value in attributes.items()],
    }
    if parent:
        found["parentSpanId"] = f"{parent:016x}"
    return found


def export(tmp_path: Path, settled: list[str], settled_at: int) -> Path:
    spans = [
        span(TRACE, 1, "assemble_response", (100, 200), RESPONSE),
        span(TRACE, 0xA2, "assemble_tool_call get_a", (110, 150), PROPOSED, parent=1),
        span(TRACE, 0xB3, "assemble_tool_call get_b", (120, 160), PROPOSED, parent=1),
        # the next request, a trace of its own (zero code): the proposals it answered, by their spans
        span(
            LATER,
            9,
            "assemble_response",
            (settled_at - 5, settled_at),
            {**RESPONSE, "etf.linkage.answered_spans": settled},
        ),
    ]
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"scope": {"name": "etf_otel"}, "spans": spans}]}]}))
    return path


@pytest.mark.parametrize("engine", ENGINES)
def test_id_less_proposals_named_by_a_later_settlement_are_answered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    path = export(tmp_path, [f"{0xA2:016x}", f"{0xB3:016X}"], 400)  # an exporter's upper-case hex is the same span
    code, report = audit(capsys, path, engine)
    assert (code, kinds(report)) == (0, {}), report


@pytest.mark.parametrize("engine", ENGINES)
def test_a_settlement_naming_one_span_or_ending_before_the_proposal_settles_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    one = export(tmp_path, [f"{0xA2:016x}"], 400)
    assert kinds(audit(capsys, one, engine)[1]) == {"unjudged": 1}  # get_b: no evidence either way
    early = export(tmp_path, [f"{0xA2:016x}", f"{0xB3:016x}"], 140)  # ended before either proposal did
    assert kinds(audit(capsys, early, engine)[1]) == {"unjudged": 2}
