"""A framework's tool run recorded as an execution of the preserved call (etf_otel.integrations._tool_runs).

Proposals come from a real :class:`~etf_otel.instrumentation.Instrumentation` fed chunks; the runs
are what a framework hands its tool: its own id, name and arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Iterator

import pytest

from etf_otel import attributes as A
from etf_otel.errors import GuardRefusedError
from etf_otel.instrumentation import _open_calls as open_calls
from etf_otel.integrations._tool_runs import ToolRuns, find_proposal
from tests.conftest import Captured
from tests.integrations.test_mcp_instrumentor import _respond


@pytest.fixture(autouse=True)
def fresh_context() -> Iterator[None]:
    token = open_calls._LATEST.set(None)
    try:
        yield
    finally:
        open_calls._LATEST.reset(token)


def _divergence(span: object) -> list[object]:
    return [
        event.attributes.get(A.ETF_DIVERGENCE_KIND)
        for event in span.events  # type: ignore[attr-defined]
        if event.attributes is not None and A.ETF_DIVERGENCE_KIND in event.attributes
    ]


def _runs(captured: Captured, **config: object) -> ToolRuns:
    return ToolRuns(captured.instrumentation(**config))


def test_a_run_with_the_preserved_id_links_to_its_proposal(captured: Captured) -> None:
    runs = _runs(captured)
    etf = captured.instrumentation()
    _respond(etf, [("call-a", "get_weather", '{"city": "Paris"}')])
    assert runs.run("call-a", "get_weather", {"city": "Paris"}, lambda: "sunny") == "sunny"
    span = captured.span("execute_tool get_weather")
    proposal = captured.span("assemble_tool_call get_weather")
    assert span.attributes[A.GEN_AI_TOOL_CALL_ID] == "call-a"
    assert [link.context.span_id for link in span.links] == [proposal.context.span_id]
    assert _divergence(span) == []
    runs.close()


def test_a_run_under_another_id_is_the_preserved_call_and_says_how_it_differs(captured: Captured) -> None:
    runs = _runs(captured)
    etf = captured.instrumentation()
    _respond(etf, [("call-a", "get_weather", '{"city": "Paris"}'), ("call-b", "get_time", '{"tz": "UTC"}')])
    runs.run("call_X9", "get_time", '{"tz":"UTC"}', lambda: None)  # what the framework kept: the last id
    span = captured.span("execute_tool get_time")
    assert span.attributes[A.GEN_AI_TOOL_CALL_ID] == "call-b"  # the preserved id, never the framework's
    assert "call_X9" not in str(span.to_json())
    assert _divergence(span) == ["id_replaced"]
    assert find_proposal("call-bcall-b", "get_time", {"tz": "UTC"}).divergence[0].value == "id_concatenated"
    runs.close()


def test_a_run_whose_name_or_arguments_differ_by_the_same_id(captured: Captured) -> None:
    runs = _runs(captured)
    etf = captured.instrumentation()
    _respond(etf, [("call-a", "get_weather", '{"city": "Paris"}')])
    runs.run("call-a", "get_weatherget_weather", {"city": "Paris"}, lambda: None)
    runs.run("call-a", "get_weather", {}, lambda: None)
    first, second = captured.spans("execute_tool")
    assert _divergence(first) == ["name_concatenated"] and _divergence(second) == ["arguments_differ"]
    runs.close()


def test_a_run_from_another_thread_finds_its_proposal_by_id(captured: Captured) -> None:
    runs = _runs(captured)
    _respond(captured.instrumentation(), [("call-a", "read", "{}")])
    elsewhere = contextvars.Context()  # a tool node's context: it finalized no response
    thread = threading.Thread(target=elsewhere.run, args=(runs.run, "call-a", "read", {}, lambda: None))
    thread.start()
    thread.join()
    span = captured.span("execute_tool read")
    assert span.attributes[A.GEN_AI_TOOL_CALL_ID] == "call-a" and len(span.links) == 1
    runs.close()


def test_an_id_two_live_setups_proposed_is_the_latest_proposal(captured: Captured) -> None:
    runs = _runs(captured)
    earlier, later = captured.instrumentation(), captured.instrumentation()
    _respond(earlier, [("call-a", "read", '{"page": 1}')])  # an earlier setup, still alive, same id
    _respond(later, [("call-a", "read", '{"page": 2}')])
    elsewhere = contextvars.Context()  # a tool node's context: it finalized no response
    elsewhere.run(runs.run, "call-a", "read", {"page": 2}, lambda: None)
    span = captured.span("execute_tool read")
    newest = captured.spans("assemble_tool_call")[-1]
    assert [link.context.span_id for link in span.links] == [newest.context.span_id]
    assert _divergence(span) == []
    runs.close()


def test_a_run_in_another_context_is_compared_by_arguments_too(captured: Captured) -> None:
    runs = _runs(captured)
    _respond(captured.instrumentation(), [("call-a", "read", '{"page": 1}')])  # a setup that does not guard
    contextvars.Context().run(runs.run, "call-a", "read", {}, lambda: None)
    assert _divergence(captured.span("execute_tool read")) == ["arguments_differ"]
    runs.close()


def test_a_run_of_arguments_that_were_not_json_differs_from_them(captured: Captured) -> None:
    runs = _runs(captured)
    _respond(captured.instrumentation(), [("call-a", "read", '{"page":')])  # cut: never valid JSON
    runs.run("call-a", "read", {}, lambda: None)  # what a framework repaired it to
    assert _divergence(captured.span("execute_tool read")) == ["arguments_differ"]
    runs.close()


def test_an_unknown_run_records_no_id_and_no_link(captured: Captured) -> None:
    runs = _runs(captured)
    runs.run("call-zz", "read", {}, lambda: None)
    span = captured.span("execute_tool read")
    assert A.GEN_AI_TOOL_CALL_ID not in span.attributes and not span.links
    runs.close()


def test_guard_refuses_divergent_and_unknown_runs_before_they_run(captured: Captured) -> None:
    runs = _runs(captured, guard=True)
    _respond(captured.instrumentation(), [("call-a", "read", '{"page": 1}')])
    ran: list[str] = []
    with pytest.raises(GuardRefusedError) as refused:
        runs.run("call_X9", "read", {"page": 1}, lambda: ran.append("x"))
    assert refused.value.category.value == "divergent_assembly"
    assert "a tool call (tool 'read', index 0 of its response): divergent_assembly, " in str(refused.value)
    with pytest.raises(GuardRefusedError) as unknown:
        runs.run("call-q", "read", {"page": 2}, lambda: ran.append("q"))
    assert unknown.value.category.value == "orphaned_result"
    assert "a tool call (tool 'read'): orphaned_result, " in str(unknown.value)
    assert runs.run("call-a", "read", '{"page":1}', lambda: ran.append("a")) is None
    assert ran == ["a"]
    spans = captured.spans("execute_tool")
    assert [span.attributes.get(A.ETF_GUARD_REFUSED) for span in spans] == [True, True, None]
    runs.close()


def test_an_async_run_that_raises_is_recorded_failed_and_raises_unchanged(captured: Captured) -> None:
    runs = _runs(captured)
    _respond(captured.instrumentation(), [("call-a", "read", "{}")])

    async def tool() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        asyncio.run(runs.arun("call-a", "read", {}, tool))
    span = captured.span("execute_tool read")
    assert span.attributes[A.ERROR_TYPE] == "KeyError" and span.end_time is not None
    runs.close()


def test_a_run_under_another_id_and_a_repeated_name_is_found_by_its_arguments(captured: Captured) -> None:
    runs = _runs(captured)
    _respond(captured.instrumentation(), [("call-a", "get_weather", '{"city": "Paris"}'), ("call-b", "get_time", "{}")])
    runs.run("call_X9", "get_weatherget_weather", {"city": "Paris"}, lambda: None)
    span = captured.span("execute_tool get_weatherget_weather")
    assert span.attributes[A.GEN_AI_TOOL_CALL_ID] == "call-a" and len(span.links) == 1
    assert _divergence(span) == ["id_replaced", "name_concatenated"]
    assert {event.attributes.get(A.GEN_AI_TOOL_CALL_ID) for event in span.events} == {"call-a"}  # the audit names it
    runs.close()


def test_the_frameworks_own_span_is_enriched_and_left_for_it_to_end(captured: Captured) -> None:
    runs = _runs(captured)
    _respond(captured.instrumentation(), [("call-a", "read", '{"page": 1}')])
    theirs = captured.tracer_provider.get_tracer("framework").start_span(
        "execute_tool read", attributes={"gen_ai.operation.name": "execute_tool", A.GEN_AI_TOOL_CALL_ID: "call_X9"}
    )
    running = runs.start("call_X9", "read", {"page": 1}, span=theirs)
    running.end(None, "ok")
    assert theirs.is_recording()  # the framework ends its span
    theirs.end()
    (span,) = captured.spans("execute_tool")
    assert span.attributes[A.GEN_AI_TOOL_CALL_ID] == "call-a" and len(span.links) == 1
    assert _divergence(span) == ["id_replaced"]
    ((attributes, histogram),) = captured.points(A.METRIC_EXECUTE_TOOL_DURATION)
    assert attributes == {A.GEN_AI_TOOL_NAME: "read"} and histogram.count == 1  # type: ignore[union-attr]
    runs.close()


def test_conversations_proposed_the_same_id_each_run_links_to_its_own_proposal(captured: Captured) -> None:
    runs = _runs(captured)
    etf = captured.instrumentation()
    first, second = contextvars.Context(), contextvars.Context()
    first.run(_respond, etf, [("call-a", "read", '{"page": 1}')])
    second.run(_respond, etf, [("call-a", "read", '{"page": 1}')])  # the registry's record of call-a is now this one
    first.run(runs.run, "call-a", "read", {"page": 1}, lambda: None)
    second.run(runs.run, "call-a", "read", {"page": 1}, lambda: None)
    proposals = [span.context.span_id for span in captured.spans("assemble_tool_call")]
    executions = [[link.context.span_id for link in span.links] for span in captured.spans("execute_tool")]
    assert executions == [[proposals[0]], [proposals[1]]]
    runs.close()


def test_a_dispatch_the_framework_refuses_itself_is_left_to_it_by_the_guard(captured: Captured) -> None:
    runs = _runs(captured, guard=True)
    _respond(captured.instrumentation(), [("call-a", "read", '{"page": 1}')])
    running = runs.start("call-a", "readread", {"page": 1}, guarded=False)
    assert running.refusal is None
    running.end(KeyError("no tool named readread"))
    span = captured.span("execute_tool readread")
    assert A.ETF_GUARD_REFUSED not in span.attributes and _divergence(span) == ["name_concatenated"]
    runs.close()


def test_a_response_read_in_a_task_of_its_own_is_shared_with_the_context_that_started_it(captured: Captured) -> None:
    """pydantic-ai reads each model response in a task of its own and runs the tools in another."""
    runs = _runs(captured)
    etf = captured.instrumentation()

    async def the_tool_step_sees(shared: bool) -> list[str]:
        with open_calls.sharing_with_tasks() if shared else contextlib.nullcontext():
            await asyncio.create_task(_arespond(etf))  # the request step
            seen = await asyncio.create_task(_alatest())  # the tool step
        assert await _alatest() == []  # once the run is over, the context sees what it saw before
        return seen

    assert asyncio.run(the_tool_step_sees(shared=True)) == ["call-a"]
    assert asyncio.run(the_tool_step_sees(shared=False)) == []
    runs.close()


async def _arespond(etf: object) -> None:
    _respond(etf, [("call-a", "read", "{}")])  # type: ignore[arg-type]


async def _alatest() -> list[str]:
    latest = open_calls.latest()
    return [call.call_id for call in latest.calls] if latest is not None else []


def test_concurrent_conversations_with_the_same_ids_each_link_to_their_own_proposal(captured: Captured) -> None:
    """The registry keeps the latest call of an id; a run links to its own context's response."""
    runs = _runs(captured)
    etf = captured.instrumentation()

    def conversation(city: str) -> None:
        _respond(etf, [("call-a", "get_weather", f'{{"city": "{city}"}}')])
        runs.run("call-a", "get_weather", {"city": city}, lambda: None)

    first, second = contextvars.Context(), contextvars.Context()
    first.run(_respond, etf, [("call-a", "get_weather", '{"city": "Paris"}')])
    second.run(conversation, "Rome")  # registered last: the registry's record of call-a is Rome's
    first.run(runs.run, "call-a", "get_weather", {"city": "Paris"}, lambda: None)
    rome, paris = captured.spans("execute_tool")
    proposals = captured.spans("assemble_tool_call")
    assert [link.context.span_id for link in paris.links] == [proposals[0].context.span_id]
    assert [link.context.span_id for link in rome.links] == [proposals[1].context.span_id]
    assert _divergence(paris) == [] == _divergence(rome)
    runs.close()


def test_the_latest_response_by_content_wins_over_the_same_id_in_another_setup(captured: Captured) -> None:
    """A framework's id another setup proposed long ago is not this run's proposal."""
    runs = _runs(captured)
    elsewhere = contextvars.Context()
    elsewhere.run(_respond, captured.instrumentation(), [("call_X9", "get_weather", '{"city": "Rome"}')])
    _respond(captured.instrumentation(), [("call-a", "get_weather", '{"city": "Paris"}')])
    runs.run("call_X9", "get_weather", {"city": "Paris"}, lambda: None)
    span = captured.span("execute_tool get_weather")
    proposal = captured.spans("assemble_tool_call")[1]
    assert span.attributes[A.GEN_AI_TOOL_CALL_ID] == "call-a"
    assert [link.context.span_id for link in span.links] == [proposal.context.span_id]
    assert _divergence(span) == ["id_replaced"]
    runs.close()
