"""Real framework traffic, by its shape: ``replay FILE --followup NEXT`` on recorded shapes (issue 36).

Each case under ``tests/fixtures/real_shapes/<cause>/`` is a pair written for this suite: the
response as ``replay`` reads it (``<case>.response.*``: SSE, JSON lines or a complete body) and the
next request the framework sent (``<case>.next.json``). The ids, tool names and arguments are our own;
only the shape follows a public recording of real provider traffic, named in ``SHAPES`` below
(repository, path, commit). No third-party file or text is in the repository.

The judgement is the contract of issue 36 (the spec's sections 11.6 and 11.7, real agent stacks):

* **framework habits** (stateless histories, turns after the answer, reused ids a framework makes
  unique, refused calls answered with an error, a body call without ``arguments``) are no linkage
  violation: the provider accepted the request and every call of the answered turn was answered;
  what differs from the proposals is drift (``id_replaced``, ``call_fabricated``,
  ``refusal_answered``), never an ``orphaned_result`` or ``unanswered_call``;
* **real mistakes** (an item id sent back as ``call_id``, an empty id a framework replaced with its
  own, a result for an id no turn carries, a concatenated id) stay findings.

Cases that ``replay`` judges otherwise today are ``xfail(strict=True)`` with the reason: they must lose
the mark once fixed. Drift kinds (the document's ``drift`` entries) and orphan reasons (not in the
document yet) are asserted in tests of their own, apart from the violation tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from etf_otel import ErrorCategory
from etf_otel.cli import main

ROOT = Path(__file__).resolve().parents[2]
SHAPES_DIR = ROOT / "tests" / "fixtures" / "real_shapes"

PYDANTIC_AI = "pydantic/pydantic-ai"
ANTHROPIC_SDK = "anthropics/anthropic-sdk-python"

ORPHANED = ErrorCategory.ORPHANED_RESULT.value
UNANSWERED = ErrorCategory.UNANSWERED_CALL.value
LINKAGE_VIOLATIONS = {ORPHANED, ErrorCategory.DUPLICATE_RESULT.value, UNANSWERED}
"""The linkage categories that are violations; drift, however the document comes to spell it, is none of them."""

ORPHAN_REASONS = {"concatenated_ids", "rejected_call", "rejected_incoming_id", "unknown"}
"""The bounded values of ``etf.linkage.orphan_reason`` (AGENT-STACKS 11.2)."""

ISSUE_36_GEMINI_ERROR = (
    "issue 36: a Gemini error functionResponse to a rejected call leaves linkage, but no refusal_answered drift (11.7)"
)
ISSUE_36_REASON = "issue 36: replay --json carries no orphan reason yet (11.2)"
ISSUE_36_ITEM_ID = (
    "issue 36 regression (main 4b94f10): an fc_ item id sent back as call_id in a function_call item without"
    " its own id is taken for id_replaced drift; the issue keeps it a finding"
)
ISSUE_36_CONCATENATED = (
    "issue 36 regression (main 4b94f10): a concatenated id the history carries consistently is taken for"
    " id_replaced drift; 11.7 lists a result for a concatenated id as a violation"
)


@dataclass(frozen=True)
class Follows:
    """The public recording whose shape a case follows; ``path`` ``None`` when none was found."""

    repository: str
    path: str | None
    commit: str | None
    note: str = ""


@dataclass(frozen=True)
class Shape:
    case: str
    """``<cause>/<case>``: the pair ``<case>.response.*`` and ``<case>.next.json`` under the cause."""
    follows: Follows
    dispatchable: bool = True
    drift: str | None = None
    """The drift kind of 11.7 the case shows, if any."""
    findings: tuple[tuple[str, str | None], ...] = ()
    """A real mistake's linkage findings today and after issue 36: (category, id), in document order."""
    reason: str | None = None
    """The orphan reason of the mistake's ``orphaned_result``; ``"*"`` for any of the bounded values."""
    xfail: str | None = None
    """Why the judgement fails today (the reason of its strict xfail)."""
    drift_xfail: str | None = None
    """Why the drift kind is not reported today (the reason of its strict xfail)."""

    @property
    def response(self) -> Path:
        cause, case = self.case.split("/")
        (found,) = (SHAPES_DIR / cause).glob(f"{case}.response.*")
        return found

    @property
    def next_request(self) -> Path:
        cause, case = self.case.split("/")
        return SHAPES_DIR / cause / f"{case}.next.json"


HABITS = (
    # --- stateless histories: every earlier function_call / function_call_output repeated ---
    Shape(
        "stateless_history/three_rounds",
        Follows(
            PYDANTIC_AI,
            "tests/cassettes/test_tool_search/test_openai_deferred_capability_runs_on_model_without_native_tool_search.yaml",
            "94a671c82f229533c5f6f34151f0cd2b19070485",
            "interaction 3: three runs of function_call + output in one stateless Responses input",
        ),
    ),
    Shape(
        "stateless_history/second_round",
        Follows(
            PYDANTIC_AI,
            "tests/models/cassettes/test_bedrock_mantle/test_reused_tool_call_ids[stream].yaml",
            "61c11f113383e9f6f768a118a6b835dd114cf326",
            "a streamed second round whose input repeats the first round's call and output",
        ),
    ),
    Shape(
        "stateless_history/chained",
        Follows(
            PYDANTIC_AI,
            "tests/models/cassettes/test_openai_responses/"
            "test_openai_previous_response_id_seed_auto_chains_through_retries.yaml",
            "78eb88c75f33cfa4dc7d27f883c9e6113280f4c6",
            "control, interaction 3: previous_response_id and only the new function_call_output, judged as today",
        ),
    ),
    # --- turns after the answer ---
    Shape(
        "turns_after_answer/mistral_file_ok",
        Follows(
            PYDANTIC_AI,
            "tests/models/cassettes/test_mistral/test_image_as_binary_content_tool_response.yaml",
            "38f4facaa7407d2b371298d4e091fbb0ff8ecb3b",
            "tool message, then an assistant 'OK' and a user message carrying the file",
        ),
    ),
    Shape(
        "turns_after_answer/search_tools_round",
        Follows(
            PYDANTIC_AI,
            "tests/cassettes/test_tool_search/test_openai_deferred_capability_runs_on_model_without_native_tool_search.yaml",
            "94a671c82f229533c5f6f34151f0cd2b19070485",
            "interaction 2: the answered call, then a synthetic search_tools call (auto_load_...) and its output",
        ),
        drift="call_fabricated",
    ),
    Shape(
        "turns_after_answer/anthropic_search_tools_round",
        Follows(
            PYDANTIC_AI,
            "tests/models/cassettes/test_anthropic/test_anthropic_deferred_capability_tool_callable_without_tool_search.yaml",
            "589b5d731ca4e13f21d55459f64d4d8409f80ea6",
            "interaction 2: tool_result, then a synthetic assistant search_tools tool_use and its tool_result",
        ),
        drift="call_fabricated",
    ),
    Shape(
        "turns_after_answer/gemini_file",
        Follows(
            PYDANTIC_AI,
            "tests/models/cassettes/test_multimodal_tool_returns/test_mixed_content_ordering[google_2_5].yaml",
            "3b474b2f9c723a917d9c48c726ec891b6fcd9037",
            "functionResponse content, then a user content with the file (inlineData)",
        ),
    ),
    # --- ids reused across responses ---
    Shape(
        "reused_ids/bedrock_prefixed",
        Follows(
            PYDANTIC_AI,
            "tests/models/cassettes/test_bedrock_mantle/test_reused_tool_call_ids[request].yaml",
            "61c11f113383e9f6f768a118a6b835dd114cf326",
            "call_0 in every response; the framework sends '<response id>:call_0' in the call and its output",
        ),
        drift="id_replaced",
    ),
    Shape(
        "reused_ids/bedrock_prefixed_first",
        Follows(
            PYDANTIC_AI,
            "tests/models/cassettes/test_bedrock_mantle/test_reused_tool_call_ids[stream].yaml",
            "61c11f113383e9f6f768a118a6b835dd114cf326",
            "the first round of the same loop, streamed",
        ),
        drift="id_replaced",
    ),
    Shape(
        "reused_ids/chat_call0_kept",
        Follows(
            "etf-otel",
            None,
            None,
            "no public Chat recording found; the call_0 numbering of the Bedrock recording above, kept as sent",
        ),
    ),
    Shape(
        "reused_ids/gemini_call_n",
        Follows(
            "brainlid/langchain",
            None,
            None,
            "no public recording of a reused Gemini id found; call_<n> ids as quoted from the live API in PR #620",
        ),
    ),
    # --- refused calls answered with an error ---
    Shape(
        "refusal_answered/anthropic_is_error",
        Follows(
            ANTHROPIC_SDK,
            "tests/lib/tools/__inline_snapshot__/test_runners/TestSyncRunTools/10e53c1d-51be-4c64-b5bf-99adb3fa4719.json",
            "c3017a227c67377b862644feb463c0d8a1e9ddc9",
            "the tool runner's tool_result with is_error: true; here the call is one the rules rejected (cut)",
        ),
        dispatchable=False,
        drift="refusal_answered",
    ),
    Shape(
        "refusal_answered/vertex_unexpected_tool_call",
        Follows(
            PYDANTIC_AI,
            "tests/models/cassettes/test_multimodal_tool_returns/"
            "test_multimodal_tool_return_matrix[direct-binary-audio-google_vertex].yaml",
            "b5aaa768cdc1d1975c39c225809f51951b87556d",
            "finishReason UNEXPECTED_TOOL_CALL; the framework gives the call an id and answers it with an error",
        ),
        dispatchable=False,
        drift="refusal_answered",
    ),
    # --- a complete body whose call has no arguments key ---
    Shape(
        "absent_arguments/gateway_body",
        Follows(
            PYDANTIC_AI,
            "tests/models/cassettes/test_openrouter/test_openrouter_tool_optional_parameters.yaml",
            "1a35af53d7105f06df9e056f21651942fa2aeb6d",
            "OpenRouter translating a Vertex Claude call whose parameters are all optional: function has no arguments",
        ),
    ),
)

MISTAKES = (
    Shape(
        "real_mistakes/item_id_as_call_id",
        Follows(
            PYDANTIC_AI,
            "tests/models/cassettes/test_openai_responses/test_openai_responses_stream.yaml",
            "bea16058f16b25c8651abcd8ff19b3113635711e",
            "the fc_ item id sent as call_id in the function_call item and in its output (the provider accepted it)",
        ),
        findings=((ORPHANED, None), (UNANSWERED, "call_M1capitalQ")),
        reason="unknown",
    ),
    Shape(
        "real_mistakes/item_id_in_output",
        Follows(
            "etf-otel",
            None,
            None,
            "no public recording (the provider refuses it: docs/cli.md, 'No tool call found for function call output')",
        ),
        findings=((ORPHANED, None), (UNANSWERED, "call_M1capitalQ")),
        reason="unknown",
    ),
    Shape(
        "real_mistakes/empty_id_replaced",
        Follows(
            PYDANTIC_AI,
            "tests/models/cassettes/test_openai/test_compatible_api_with_tool_calls_without_id.yaml",
            "b0d3ebdffec88b413b19c11c6f30c79a22d4f081",
            "Gemini's OpenAI-compatible endpoint sends id ''; the framework sends its own id (pyd_ai_...) back",
        ),
        dispatchable=False,
        findings=((ORPHANED, None),),
        reason="*",
    ),
    Shape(
        "real_mistakes/unknown_id",
        Follows("etf-otel", None, None, "no public recording (the provider refuses it); docs/protocols.md linkage"),
        findings=((ORPHANED, None), (UNANSWERED, "call_U1pick")),
        reason="unknown",
    ),
    Shape(
        "real_mistakes/concatenated_id",
        Follows(
            "etf-otel",
            None,
            None,
            "no public recording; the demo's id repeated on every fragment, joined by the openai SDK's accumulator",
        ),
        findings=((ORPHANED, None), (UNANSWERED, "call_C7")),
        reason="concatenated_ids",
    ),
)

SHAPES = HABITS + MISTAKES


def replay(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 2
    captured = capsys.readouterr()
    assert captured.err == "", captured.err
    return code, json.loads(captured.out)


def judge(shape: Shape, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code, document = replay(["replay", str(shape.response), "--json", "--followup", str(shape.next_request)], capsys)
    assert document["dispatchable"] is shape.dispatchable
    assert type(document["linkage"]) is list
    return code, document


def violations(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [finding for finding in document["linkage"] if finding.get("category") in LINKAGE_VIOLATIONS]


def drift_kinds(document: dict[str, Any]) -> list[str]:
    """The kinds of the document's ``drift`` entries (``{"kind", "id", "name"}``), in order."""
    return [entry["kind"] for entry in document.get("drift", [])]


def marked(shapes: tuple[Shape, ...], reason: Callable[[Shape], str | None]) -> list[Any]:
    """The shapes as parameters, each failing today marked strict xfail with ``reason(shape)``."""
    params = []
    for shape in shapes:
        why = reason(shape)
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        params.append(pytest.param(shape, id=shape.case, marks=marks))
    return params


# --- the fixtures themselves --------------------------------------------------------------------


def test_every_fixture_is_a_pair_named_in_the_table() -> None:
    files = {path.relative_to(SHAPES_DIR).as_posix() for path in SHAPES_DIR.rglob("*") if path.is_file()}
    named = {shape.response.relative_to(SHAPES_DIR).as_posix() for shape in SHAPES}
    named |= {shape.next_request.relative_to(SHAPES_DIR).as_posix() for shape in SHAPES}
    named |= {"absent_arguments/stream_no_arguments.response.jsonl"}
    assert files == named


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.case)
def test_every_case_names_what_it_follows(shape: Shape) -> None:
    follows = shape.follows
    assert follows.note
    assert (follows.path is None) is (follows.commit is None)
    if follows.commit is not None:
        assert len(follows.commit) == 40 and int(follows.commit, 16) >= 0


# --- framework habits: no linkage violation -------------------------------------------------------


@pytest.mark.parametrize("shape", marked(HABITS, lambda shape: shape.xfail))
def test_a_framework_habit_is_no_linkage_violation(shape: Shape, capsys: pytest.CaptureFixture[str]) -> None:
    code, document = judge(shape, capsys)
    assert violations(document) == []
    if shape.dispatchable:
        assert document["rejections"] == []
        assert code == 0
    else:
        # The rejection the stream caused stays a finding (recorded_rejection in the audit); only the
        # answer to the refused call is no violation of its own.
        assert document["rejections"] != []
        assert code == 1


DRIFTING = tuple(shape for shape in HABITS if shape.drift is not None)


@pytest.mark.parametrize("shape", marked(DRIFTING, lambda shape: shape.drift_xfail))
def test_a_framework_habit_is_recorded_as_its_drift_kind(shape: Shape, capsys: pytest.CaptureFixture[str]) -> None:
    _, document = judge(shape, capsys)
    assert set(drift_kinds(document)) == {shape.drift}


CLEAN = tuple(shape for shape in HABITS if shape.drift is None and shape.dispatchable)


@pytest.mark.parametrize("shape", marked(CLEAN, lambda shape: shape.xfail))
def test_a_habit_without_drift_reports_nothing_at_all(shape: Shape, capsys: pytest.CaptureFixture[str]) -> None:
    _, document = judge(shape, capsys)
    assert document["linkage"] == []
    assert drift_kinds(document) == []


def test_a_body_call_without_arguments_is_proposed_with_an_empty_object(capsys: pytest.CaptureFixture[str]) -> None:
    (shape,) = (shape for shape in HABITS if shape.case == "absent_arguments/gateway_body")
    code, document = replay(["replay", str(shape.response), "--json", "--show-arguments"], capsys)
    assert code == 0
    (call,) = document["calls"]
    assert (call["verdict"], call["categories"], call["fragments"]) == ("proposed", [], 0)
    assert json.loads(call["arguments"]) == {}


def test_a_stream_call_without_arguments_is_still_invalid(capsys: pytest.CaptureFixture[str]) -> None:
    """11.7: ``absent_arguments_in_body`` is for bodies only; a stream's missing arguments are unchanged."""
    path = SHAPES_DIR / "absent_arguments" / "stream_no_arguments.response.jsonl"
    code, document = replay(["replay", str(path), "--json"], capsys)
    assert code == 1
    assert document["stream"]["streamed"] is True
    (call,) = document["calls"]
    assert (call["verdict"], call["categories"]) == ("rejected", [ErrorCategory.INVALID_ARGUMENTS.value])


# --- real mistakes: still findings ----------------------------------------------------------------


@pytest.mark.parametrize("shape", marked(MISTAKES, lambda shape: shape.xfail))
def test_a_real_mistake_stays_a_finding(shape: Shape, capsys: pytest.CaptureFixture[str]) -> None:
    code, document = judge(shape, capsys)
    assert code == 1
    assert [(finding["category"], finding["id"]) for finding in violations(document)] == list(shape.findings)
    assert ORPHANED in {finding["category"] for finding in violations(document)}


@pytest.mark.parametrize("shape", marked(MISTAKES, lambda shape: ISSUE_36_REASON))
def test_a_real_mistake_says_why_its_result_is_orphaned(shape: Shape, capsys: pytest.CaptureFixture[str]) -> None:
    _, document = judge(shape, capsys)
    (orphaned,) = (f for f in document["linkage"] if f["category"] == ORPHANED)
    reason = orphaned.get("reason", orphaned.get("orphan_reason"))
    if shape.reason == "*":
        assert reason in ORPHAN_REASONS
    else:
        assert reason == shape.reason


# --- the request before it is sent: the provider's pairing rules (issue 37, 11.8) ---------------------------

PAIRING_OF_MISTAKES: dict[str, list[tuple[str, str | None, str, str | None]]] = {
    # each a (kind, position, reason, id) the provider refuses; a history that pairs its own ids consistently
    # (a concatenated id, an id made up for an empty one, an item id as call_id in both items) is accepted
    "real_mistakes/concatenated_id": [],
    "real_mistakes/empty_id_replaced": [],
    "real_mistakes/item_id_as_call_id": [],
    "real_mistakes/item_id_in_output": [
        ("call_without_result", "input[1]", "id_rewritten", "call_M1capitalQ"),
        ("result_without_call", "input[2]", "id_rewritten", None),
    ],
    "real_mistakes/unknown_id": [
        ("call_without_result", "messages[1]", "id_rewritten", "call_U1pick"),
        ("result_without_call", "messages[2]", "id_rewritten", None),
    ],
}


def pairing(document: dict[str, Any]) -> list[tuple[str, str | None, str, str | None]]:
    return [(problem["kind"], problem["position"], problem["reason"], problem["id"]) for problem in document["pairing"]]


@pytest.mark.parametrize("shape", HABITS, ids=lambda shape: shape.case)
def test_a_framework_habit_breaks_no_pairing_rule_of_its_provider(
    shape: Shape, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every habit is a request the provider accepted: predicting a refusal for one is a false alarm."""
    _, document = replay(["replay", str(shape.response), "--json", "--followup", str(shape.next_request)], capsys)
    assert pairing(document) == []


@pytest.mark.parametrize("shape", MISTAKES, ids=lambda shape: shape.case)
def test_a_real_mistake_breaks_the_pairing_rules_only_where_the_provider_would_refuse_it(
    shape: Shape, capsys: pytest.CaptureFixture[str]
) -> None:
    _, document = replay(["replay", str(shape.response), "--json", "--followup", str(shape.next_request)], capsys)
    assert pairing(document) == PAIRING_OF_MISTAKES[shape.case]
