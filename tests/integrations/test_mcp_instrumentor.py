"""The MCP instrumentation in-process: matching rules, the ``_meta`` values, uninstrumenting.

The cross-process behaviour is in ``test_mcp_processes``; here the pieces are driven directly,
with proposals made by a real :class:`~etf_otel.instrumentation.Instrumentation` from chunks.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import wrapt
from opentelemetry.trace import SpanContext, TraceFlags

from etf_otel import attributes as A
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.instrumentation import Instrumentation
from etf_otel.instrumentation import _open_calls as open_calls
from etf_otel.integrations.mcp._client import match_call, outgoing_meta, proposed_call
from etf_otel.integrations.mcp._instrumentor import MCPInstrumentor
from etf_otel.integrations.mcp._meta import format_proposal, parse_call_id, parse_proposal
from tests.conftest import Captured


def _chunks(calls: list[tuple[str, str, str]], *, conflict: bool = False) -> list[Any]:
    chunks: list[Any] = []
    for index, (call_id, name, arguments) in enumerate(calls):
        fragment = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}, "finish_reason": None}]})
        if conflict:
            again = {"index": index, "id": "other", "function": {"arguments": ""}}
            chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [again]}, "finish_reason": None}]})
    chunks += [{"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}, "[DONE]"]
    return chunks


@pytest.fixture
def tracked() -> Iterator[None]:
    """Tracking on, and no response left over in this thread's context from an earlier test."""
    open_calls.track()
    token = open_calls._LATEST.set(None)
    try:
        yield
    finally:
        open_calls._LATEST.reset(token)
        open_calls.untrack()


def _respond(etf: Instrumentation, calls: list[tuple[str, str, str]], **options: Any) -> None:
    for _ in etf.stream(_chunks(calls, **options)):
        pass


def test_matching_in_the_context_of_the_latest_response(captured: Captured, tracked: None) -> None:
    etf = captured.instrumentation()
    _respond(etf, [("call-a", "read", '{"page": 1, "x": [1, 2]}'), ("call-b", "read", '{"page": 2}')])
    unique = match_call("read", {"x": [1, 2], "page": 1})  # canonically equal: key order does not count
    assert (unique.kind, unique.call_id) == ("unique", "call-a")
    assert unique.record is not None and unique.record.span_context is not None
    assert match_call("read", {"page": 3}).kind == "unmatched"
    assert match_call("write", {"page": 2}).kind == "unmatched"
    assert match_call("read", {"page": 2.0}).kind == "unmatched"  # 2.0 is not 2 in canonical JSON
    with proposed_call("call-b"):
        assert (match_call("read", {"page": 9}).kind, match_call("read", None).call_id) == ("explicit", "call-b")
    assert match_call("read", {"page": 9}, {A.MCP_META_TOOL_CALL_ID: "call-q"}).call_id == "call-q"
    _respond(etf, [("call-c", "read", "{}"), ("call-d", "read", " { } ")])  # no arguments: the empty object
    assert match_call("read", None).kind == "ambiguous" and match_call("read", {}).call_id is None
    assert match_call("read", {"page": 1}).kind == "unmatched"  # the previous response is not open any more


def test_another_context_sees_no_proposal(captured: Captured, tracked: None) -> None:
    etf = captured.instrumentation()
    elsewhere = contextvars.copy_context()
    _respond(etf, [("call-a", "read", "{}")])
    assert elsewhere.run(match_call, "read", {}).kind == "unmatched"

    async def turn() -> str:
        _respond(etf, [("call-t", "read", "{}")])
        return match_call("read", {}).call_id or ""

    async def both() -> list[str]:
        return list(await asyncio.gather(turn(), turn()))

    assert asyncio.run(both()) == ["call-t", "call-t"]  # each task matches its own response


def test_guard_decisions(captured: Captured, tracked: None) -> None:
    etf = captured.instrumentation()
    assert match_call("read", {}, guard=True).refusal is ErrorCategory.ORPHANED_RESULT  # no response yet
    _respond(etf, [("call-a", "read", '{"page": 1}')])
    assert match_call("read", {"page": 1}, guard=True).refusal is None
    assert match_call("read", {"page": 2}, guard=True).refusal is ErrorCategory.ORPHANED_RESULT
    with proposed_call("call-a"):
        assert match_call("read", {"page": 1}, guard=True).refusal is None
        assert match_call("read", {"page": 2}, guard=True).refusal is ErrorCategory.DIVERGENT_ASSEMBLY
        assert match_call("write", {"page": 1}, guard=True).refusal is ErrorCategory.DIVERGENT_ASSEMBLY
    with proposed_call("call-zzz"):
        assert match_call("read", {"page": 1}, guard=True).refusal is ErrorCategory.ORPHANED_RESULT
    with proposed_call("bad\nid"):
        assert match_call("read", {"page": 1}, guard=True).refusal is ErrorCategory.MISSING_ID
    _respond(etf, [("call-r", "read", '{"page": 1}')], conflict=True)
    assert match_call("read", {"page": 1}, guard=True).refusal is ErrorCategory.ID_CONFLICT
    assert match_call("read", {"page": 1}).refusal is None  # observing only: never refused


def test_an_explicit_id_from_a_worker_thread_is_the_proposal_its_setup_remembers(
    captured: Captured, tracked: None
) -> None:
    """A thread (or a fresh context) that finalized no response names the call: the instrumentor's own
    setup still knows the proposal, so the guard runs it and the call gets its link."""
    etf = captured.instrumentation(guard=True)
    _respond(etf, [("call-a", "read", '{"page": 1}')])
    matches: dict[str, Any] = {}

    def worker() -> None:
        with proposed_call("call-a"):
            matches["named"] = match_call("read", {"page": 1}, guard=True, telemetry=etf.telemetry)
            matches["changed"] = match_call("read", {"page": 2}, guard=True, telemetry=etf.telemetry)
        with proposed_call("call-zzz"):
            matches["unknown"] = match_call("read", {"page": 1}, guard=True, telemetry=etf.telemetry)
        with proposed_call("call-a"):
            matches["no setup"] = match_call("read", {"page": 1}, guard=True)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    named = matches["named"]
    assert (named.kind, named.call_id, named.refusal) == ("explicit", "call-a", None)
    assert named.record is not None and named.record.span_context is not None  # the link goes out
    assert matches["changed"].refusal is ErrorCategory.DIVERGENT_ASSEMBLY
    assert matches["unknown"].refusal is ErrorCategory.ORPHANED_RESULT
    assert matches["no setup"].refusal is ErrorCategory.ORPHANED_RESULT  # nothing to look it up in


def test_outgoing_meta_adds_our_keys_to_a_copy(captured: Captured, tracked: None) -> None:
    _respond(captured.instrumentation(), [("call-a", "read", "{}")])
    match = match_call("read", {})
    theirs = {"progressToken": 7}
    sent = outgoing_meta(match, theirs)
    assert theirs == {"progressToken": 7}
    assert isinstance(sent, dict) and sent[A.MCP_META_TOOL_CALL_ID] == "call-a"
    proposal = parse_proposal(sent[A.MCP_META_PROPOSAL])
    assert match.record is not None and match.record.span_context is not None and proposal is not None
    assert (proposal.trace_id, proposal.span_id) == (
        match.record.span_context.trace_id,
        match.record.span_context.span_id,
    )
    assert outgoing_meta(match_call("other", {}), theirs) is theirs
    assert outgoing_meta(match, "not a mapping") == "not a mapping"


def test_meta_values_parse_strictly() -> None:
    assert parse_call_id("call-a") == ("call-a", None)
    assert parse_call_id("x" * 256) == ("x" * 256, None)
    assert parse_call_id("x" * 257) == (None, "call_id_too_long")
    assert parse_call_id(None) == (None, "call_id_not_string")
    assert parse_call_id("a\x00b") == (None, "call_id_not_printable")
    context = SpanContext(0xABC, 0xDEF, is_remote=False, trace_flags=TraceFlags(1))
    text = format_proposal(context)
    assert text == f"00-{0xABC:032x}-{0xDEF:016x}-01"
    parsed = parse_proposal(text)
    assert parsed is not None and (parsed.trace_id, parsed.span_id) == (0xABC, 0xDEF)
    for bad in (None, 1, "", "00-xyz", text + "-" * 100, "ff-" + text[3:], text.replace("abc", "ABC")):
        assert parse_proposal(bad) is None, bad


def _targets() -> list[Any]:
    import mcp.client.session
    import mcp.server._otel
    import mcp.server.runner
    import mcp.shared.jsonrpc_dispatcher

    return [
        vars(mcp.client.session.ClientSession)["call_tool"],
        vars(mcp.shared.jsonrpc_dispatcher)["inject_trace_context"],
        vars(mcp.server._otel.OpenTelemetryMiddleware)["__call__"],
        vars(mcp.server.runner.ServerRunner)["_compose_server_middleware"],
    ]


def test_uninstrument_restores_the_sdk_even_under_another_wrapper(captured: Captured) -> None:
    import mcp.client.session

    before = _targets()
    instrumentor = MCPInstrumentor()
    instrumentor.instrument(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider)
    try:
        assert all(isinstance(target, wrapt.FunctionWrapper) for target in _targets())
        assert open_calls.tracking()

        def theirs(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            return wrapped(*args, **kwargs)

        wrapt.wrap_function_wrapper(mcp.client.session, "ClientSession.call_tool", theirs)
    finally:
        instrumentor.uninstrument()
    outer = vars(mcp.client.session.ClientSession)["call_tool"]
    assert outer._self_wrapper is theirs and outer.__wrapped__ is before[0]  # theirs kept, ours gone
    mcp.client.session.ClientSession.call_tool = before[0]
    assert _targets() == before
    assert not open_calls.tracking()


def test_the_sdk_is_wrapped_when_the_application_imports_it_not_before() -> None:
    """A process that never imports ``mcp`` does not pay for it; one that does gets it wrapped then."""
    script = """
import sys
from etf_otel.integrations.mcp._instrumentor import MCPInstrumentor
instrumentor = MCPInstrumentor()
instrumentor.instrument()
assert not any(name == "mcp" or name.startswith("mcp.") for name in sys.modules), "imported too early"
import wrapt
import mcp.client.session
assert isinstance(vars(mcp.client.session.ClientSession)["call_tool"], wrapt.FunctionWrapper)
instrumentor.uninstrument()
assert not isinstance(vars(mcp.client.session.ClientSession)["call_tool"], wrapt.FunctionWrapper)
instrumentor.instrument()
instrumentor.uninstrument()
import mcp.server.runner  # imported after uninstrument: the old hooks stand aside
assert not isinstance(vars(mcp.server.runner.ServerRunner)["_compose_server_middleware"], wrapt.FunctionWrapper)
print("ok")
"""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr[-3000:]
