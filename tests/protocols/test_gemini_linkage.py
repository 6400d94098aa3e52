"""Gemini linkage (docs/protocols.md, "Gemini results in the next request"): by id when the calls have
ids, by name and order when they have none, and only the first content after the model turn.

Each case assembles the response the next request answers (ids or none, names repeated or not),
then links a next request built from the answers under test.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etf_otel.core._linkage import Finding
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.protocols import GEMINI
from etf_otel.protocols._gemini import assemble
from etf_otel.testing.gemini import MISSING, call, chunk, stream

ORPH, D, U = ErrorCategory.ORPHANED_RESULT, ErrorCategory.DUPLICATE_RESULT, ErrorCategory.UNANSWERED_CALL


def answer(name: Any, id: Any = MISSING) -> dict[str, Any]:  # the wire field is called id
    response = {key: value for key, value in (("id", id), ("name", name)) if value is not MISSING}
    return {"functionResponse": {**response, "response": {"ok": True}}}


def next_request(*answers: dict[str, Any], later: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    contents: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [call("x", {})]},
        {"role": "user", "parts": list(answers)},
    ]
    if later:
        contents.append({"role": "user", "parts": list(later)})
    return {"contents": contents}


POSITIONAL = assemble(stream(chunk(call("read", {"p": 1}), call("read", {"p": 2}), call("write", {}))))
WITH_IDS = assemble(stream(chunk(call("read", {"p": 1}, id="c1"), call("write", {}, id="c2"))))


@pytest.mark.parametrize(
    ("answers", "findings"),
    [
        ([answer("read"), answer("write"), answer("read")], []),  # order across names does not matter
        ([answer("read", "made-up"), answer("read", 7), answer("write", "")], []),  # ids ignored here
        ([answer("read"), answer("write")], [Finding(U, None, name="read")]),  # the second read unanswered
        ([answer("read"), answer("read"), answer("read"), answer("write")], [Finding(D, None, name="read")]),
        ([answer("read"), answer("read"), answer("write"), answer("delete")], [Finding(ORPH, name="delete")]),
        ([answer(MISSING), answer("read"), answer("read"), answer("write")], [Finding(ORPH)]),  # no name
    ],
)
def test_positional_mode_links_by_name_and_order(answers: list[dict[str, Any]], findings: list[Finding]) -> None:
    assert POSITIONAL.dispatchable
    assert GEMINI.link is not None
    assert GEMINI.link(POSITIONAL, next_request(*answers)) == findings


@pytest.mark.parametrize(
    ("answers", "findings"),
    [
        ([answer("read", "c1"), answer("write", "c2")], []),
        ([answer("write", "c2"), answer("read")], []),  # an id-less answer: the earliest unanswered read
        ([answer("read", "c2"), answer("write", "c2")], [Finding(ORPH, name="read"), Finding(U, "c1", name="read")]),
        ([answer("read", "c9"), answer("write", "c2")], [Finding(ORPH, name="read"), Finding(U, "c1", name="read")]),
        ([answer("read", "c1"), answer("read", "c1"), answer("write", "c2")], [Finding(D, "c1", name="read")]),
        ([answer("read", "c1"), answer("read"), answer("write", "c2")], [Finding(D, "c1", name="read")]),
        ([answer("c1", "c1"), answer("write", "c2")], [Finding(ORPH, name="c1"), Finding(U, "c1", name="read")]),
    ],
)
def test_id_mode_links_by_id_and_name(answers: list[dict[str, Any]], findings: list[Finding]) -> None:
    assert GEMINI.link is not None
    assert GEMINI.link(WITH_IDS, next_request(*answers)) == findings


def test_only_the_first_content_after_the_model_turn_answers() -> None:
    assert GEMINI.link is not None
    late = GEMINI.link(WITH_IDS, next_request(answer("read", "c1"), later=(answer("write", "c2"),)))
    assert late == [
        Finding(ORPH, name="write"),
        Finding(U, "c2", name="write"),
    ]  # the call it was meant for is unanswered


def test_a_response_that_is_not_dispatchable_proposed_nothing() -> None:
    assert GEMINI.link is not None
    cut = assemble([chunk(call("read", {}))])
    assert GEMINI.link(cut, next_request(answer("read"))) == [Finding(ORPH, name="read")]
    assert GEMINI.link(cut, {"contents": "no"}) is None


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_positional_linkage_is_a_count_per_name(names: list[str], random: Any) -> None:
    """Any order of one answer per call is clean; dropping or repeating one answer is one finding of that name."""
    result = assemble(stream(chunk(*(call(name, {}) for name in names))))
    assert GEMINI.link is not None
    answers = [answer(name) for name in names]
    random.shuffle(answers)
    assert GEMINI.link(result, next_request(*answers)) == []
    dropped = answers.pop()
    name = dropped["functionResponse"]["name"]
    assert GEMINI.link(result, next_request(*answers)) == [Finding(U, None, name=name)]
    assert GEMINI.link(result, next_request(*answers, dropped, dropped)) == [Finding(D, None, name=name)]
