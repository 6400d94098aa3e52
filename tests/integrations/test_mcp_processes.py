"""MCP tool calls across OS processes: a real agent, real MCP servers over stdio and Streamable HTTP.

Each process runs under ``opentelemetry-instrument`` (zero-code on both sides: the launcher loads
etf-otel's ``etf_otel`` and ``etf_otel_mcp`` entry points; the peers' ``mcp`` ones are skipped, see
``mcp_servers/harness.py``) and exports to one OTLP receiver. The agent streams a response from a
local Chat Completions server with the real ``openai`` client, then calls the tools
(``tests/integrations/mcp_servers/``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from etf_otel import attributes as A
from etf_otel.cli._audit import run_audit
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan

from .mcp_servers.harness import http_server, run_agent, wait_for

READ_PAGE = ["call-a", "read_page", '{"page": 1}']
OUR_KEYS = {A.MCP_META_TOOL_CALL_ID, A.MCP_META_PROPOSAL}


def both_servers_plan(url: str) -> dict[str, Any]:
    """Two proposals, each called on its own server: read_page over stdio, meta_keys over HTTP at ``url``."""
    return {
        "proposals": [READ_PAGE, ["call-m", "meta_keys", "{}"]],
        "stdio": True,
        "http": url,
        "calls": [
            {"server": "stdio", "name": "read_page", "arguments": {"page": 1}},
            {"server": "http", "name": "meta_keys", "arguments": {}},
        ],
    }


def _tool_calls(receiver: OtlpReceiver, kind: str, expected: int = 0) -> list[ReceivedSpan]:
    """The ``tools/call`` spans of ``kind``, once ``expected`` of them arrived (the servers export late)."""

    def found() -> list[ReceivedSpan]:
        return [
            span
            for span in receiver.spans()
            if span.kind == kind and span.attributes.get(A.MCP_METHOD_NAME) == A.MCP_METHOD_TOOLS_CALL
        ]

    wait_for(lambda: len(found()) >= expected)
    return sorted(found(), key=lambda span: span.start_time_unix_nano)


def _proposal(receiver: OtlpReceiver, call_id: str) -> ReceivedSpan:
    (span,) = [
        span
        for span in receiver.spans()
        if span.name.startswith(A.SPAN_ASSEMBLE_TOOL_CALL) and span.attributes.get(A.GEN_AI_TOOL_CALL_ID) == call_id
    ]
    return span


def _audit(path: Path, capsys: Any) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = run_audit([str(path)], json_output=True, progress=False)
    return code, json.loads(capsys.readouterr().out)


def _kinds(report: dict[str, Any]) -> dict[str, int]:
    return {entry["kind"]: entry["count"] for entry in report["by_kind"]}


def test_one_trace_from_the_proposal_to_both_servers(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        with http_server(endpoint) as url:
            outcomes = run_agent(
                endpoint,
                both_servers_plan(url),
            )
        assert outcomes[0] == {"outcome": "ok", "text": "page 1: revenue grew"}
        # What crossed the boundary: the SDK's traceparent and our two keys, nothing else.
        assert set(outcomes[1]["text"].split()) == {"traceparent", *OUR_KEYS}
        clients = _tool_calls(receiver, "CLIENT", 2)
        servers = _tool_calls(receiver, "SERVER", 2)
        proposals = {call_id: _proposal(receiver, call_id) for call_id in ("call-a", "call-m")}
    assert [span.resource["service.name"] for span in servers] == ["tool-server-stdio", "tool-server-http"]
    assert len(clients) == 2
    for client, server, call_id in zip(clients, servers, ("call-a", "call-m"), strict=True):
        proposal = proposals[call_id]
        assert client.attributes[A.ETF_MCP_MATCH] == "unique"
        assert client.attributes[A.GEN_AI_TOOL_CALL_ID] == call_id
        assert A.GEN_AI_OPERATION_NAME not in client.attributes
        assert [(link.trace_id, link.span_id) for link in client.links] == [(proposal.trace_id, proposal.span_id)]
        # The server's span is the SDK's own, a child of the client's span, enriched, linked.
        assert server.name.startswith("tools/call ") and server.scope_name == "mcp-python-sdk"
        assert (server.trace_id, server.parent_span_id) == (client.trace_id, client.span_id)
        assert server.trace_id == proposal.trace_id
        assert server.attributes[A.GEN_AI_OPERATION_NAME] == A.OPERATION_EXECUTE_TOOL
        assert server.attributes[A.GEN_AI_TOOL_CALL_ID] == call_id
        assert server.attributes[A.ETF_TOOL_CALL_ID_SOURCE] == A.TOOL_CALL_ID_SOURCE_MCP_META
        assert server.attributes[A.GEN_AI_TOOL_TYPE] == A.TOOL_TYPE_FUNCTION
        assert [(link.trace_id, link.span_id) for link in server.links] == [(proposal.trace_id, proposal.span_id)]
        assert not server.events  # the server records no finding: it cannot judge linkage


def test_audit_finds_a_call_executed_by_two_servers(tmp_path: Path, capsys: Any) -> None:
    received = tmp_path / "received.jsonl"
    with OtlpReceiver(json_lines_path=received) as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        with http_server(endpoint) as url:
            call = {"name": "read_page", "arguments": {"page": 1}}
            run_agent(
                endpoint,
                {
                    "proposals": [READ_PAGE],
                    "stdio": True,
                    "http": url,
                    "calls": [{"server": "stdio", **call}, {"server": "http", **call}],
                    "answered": ["call-a"],
                },
            )
        servers = _tool_calls(receiver, "SERVER", 2)
    assert [span.attributes[A.GEN_AI_TOOL_CALL_ID] for span in servers] == ["call-a", "call-a"]
    code, report = _audit(received, capsys)
    assert code == 1
    assert _kinds(report) == {"duplicate_execution": 1}, report["by_kind"]


def test_audit_finds_orphaned_and_unanswered_calls(tmp_path: Path, capsys: Any) -> None:
    received = tmp_path / "received.jsonl"
    with OtlpReceiver(json_lines_path=received) as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        run_agent(
            endpoint,
            {
                "proposals": [READ_PAGE, ["call-b", "read_page", '{"page": 2}']],
                "stdio": True,
                "calls": [
                    {"server": "stdio", "name": "read_page", "arguments": {"page": 1}},
                    # An id nobody proposed, given explicitly: sent as it is, judged by the audit.
                    {"server": "stdio", "name": "read_page", "arguments": {"page": 9}, "explicit": "call-zzz"},
                ],
                "answered": ["call-a"],
            },
        )
        servers = _tool_calls(receiver, "SERVER", 2)
        clients = _tool_calls(receiver, "CLIENT", 2)
    assert [span.attributes.get(A.GEN_AI_TOOL_CALL_ID) for span in servers] == ["call-a", "call-zzz"]
    # The agent names only ids it assembled: the unproposed one is sent, not recorded on its own span.
    client_ids = [(span.attributes[A.ETF_MCP_MATCH], span.attributes.get(A.GEN_AI_TOOL_CALL_ID)) for span in clients]
    assert client_ids == [("unique", "call-a"), ("unmatched", None)]
    code, report = _audit(received, capsys)
    assert code == 1
    # the follow-up answering call-a only is also a request its provider refuses (call-b without a result)
    expected = {"orphaned_execution": 1, "unanswered_call": 1, "request_pairing": 1}
    assert _kinds(report) == expected, report["by_kind"]
    findings = [finding for trace in report["traces_detail"] for finding in trace["findings"]]
    unanswered = [finding for finding in findings if finding["kind"] == "unanswered_call"]
    assert [finding["call_id"] for finding in unanswered] == ["call-b"]


def test_the_explicit_helper_names_the_call_where_matching_cannot(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        outcomes = run_agent(
            endpoint,
            {
                "proposals": [READ_PAGE, ["call-b", "read_page", '{"page": 1}']],  # the same call twice
                "stdio": True,
                "calls": [{"server": "stdio", "proposed": "call-b"}],
            },
        )
        (client,) = _tool_calls(receiver, "CLIENT", 1)
        (server,) = _tool_calls(receiver, "SERVER", 1)
        proposal = _proposal(receiver, "call-b")
    assert outcomes == [{"outcome": "ok", "text": "page 1: revenue grew"}]
    assert (client.attributes[A.ETF_MCP_MATCH], client.attributes[A.GEN_AI_TOOL_CALL_ID]) == ("explicit", "call-b")
    assert server.attributes[A.GEN_AI_TOOL_CALL_ID] == "call-b"
    assert [link.span_id for link in server.links] == [proposal.span_id]


def test_an_ambiguous_call_sends_no_id_and_says_so(tmp_path: Path, capsys: Any) -> None:
    received = tmp_path / "received.jsonl"
    with OtlpReceiver(json_lines_path=received) as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        outcomes = run_agent(
            endpoint,
            {
                # Two proposals, the same tool and the same JSON value written differently.
                "proposals": [READ_PAGE, ["call-b", "read_page", '{ "page" : 1 }']],
                "stdio": True,
                "calls": [{"server": "stdio", "name": "read_page", "arguments": {"page": 1}}],
            },
        )
        (client,) = _tool_calls(receiver, "CLIENT", 1)
        (server,) = _tool_calls(receiver, "SERVER", 1)
    assert outcomes == [{"outcome": "ok", "text": "page 1: revenue grew"}]
    assert client.attributes[A.ETF_MCP_MATCH] == "ambiguous"
    assert A.GEN_AI_TOOL_CALL_ID not in client.attributes and not client.links
    assert A.GEN_AI_TOOL_CALL_ID not in server.attributes and not server.links
    assert server.parent_span_id == client.span_id  # the SDK's context still crosses
    # The audit cannot pin the execution on either proposal: no id, so unjudged, never an orphan.
    code, report = _audit(received, capsys)
    kinds = {entry["kind"]: entry["count"] for entry in report["by_kind"]}
    assert code == 0 and kinds == {"unidentified_execution": 1, "unjudged": 2}, report["by_kind"]  # either proposal


def test_faults_pass_through_and_every_span_ends(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        outcomes = run_agent(
            endpoint,
            {
                "proposals": [["call-f", "fail", "{}"], ["call-s", "slow", '{"seconds": 5}'], ["call-d", "die", "{}"]],
                "stdio": True,
                "calls": [
                    {"server": "stdio", "name": "fail", "arguments": {}},
                    {"server": "stdio", "name": "slow", "arguments": {"seconds": 5}, "timeout": 0.5},
                    {"server": "stdio", "name": "die", "arguments": {}, "timeout": 20},
                ],
            },
        )
        clients = _tool_calls(receiver, "CLIENT", 3)
        servers = _tool_calls(receiver, "SERVER", 2)
    # What the application sees is the SDK's own: a tool error, its own timeout, a closed connection.
    assert [outcome["outcome"] for outcome in outcomes] == ["tool_error", "TimeoutError", "MCPError"]
    assert [span.attributes[A.GEN_AI_TOOL_CALL_ID] for span in clients] == ["call-f", "call-s", "call-d"]
    assert all(span.attributes[A.ETF_MCP_MATCH] == "unique" for span in clients)
    by_id = {span.attributes.get(A.GEN_AI_TOOL_CALL_ID): span for span in servers}
    assert by_id["call-f"].status_code == "ERROR" and by_id["call-f"].attributes[A.ERROR_TYPE] == "tool_error"
    assert "call-s" in by_id  # the cancelled execution ended too, with its id


def test_guard_refuses_on_the_client_and_nothing_reaches_the_server(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        outcomes = run_agent(
            endpoint,
            {
                "proposals": [READ_PAGE],
                "conflict": True,  # the id changes mid-stream: nothing in the response may run
                "stdio": True,
                "calls": [
                    {"server": "stdio", "name": "read_page", "arguments": {"page": 1}},
                    {"server": "stdio", "name": "meta_keys"},
                ],
            },
            OTEL_INSTRUMENTATION_ETF_GUARD="true",
        )
        wait_for(lambda: any(span.name == "agent turn" for span in receiver.spans()))
        refused = [span for span in receiver.spans() if span.attributes.get(A.ETF_GUARD_REFUSED)]
        server_calls = [span for span in receiver.spans() if span.kind == "SERVER" and "tools/call" in span.name]
    assert [outcome["outcome"] for outcome in outcomes] == ["GuardRefusedError", "GuardRefusedError"]
    assert "a tool call (tool 'read_page', index 0 of its response): id_conflict, " in outcomes[0]["text"]
    assert "a tool call (tool 'meta_keys'): orphaned_result, " in outcomes[1]["text"]
    assert [span.attributes[A.ERROR_TYPE] for span in refused] == ["id_conflict", "orphaned_result"]
    assert server_calls == []


# ``etf_otel_mcp``: the launcher skips our entry point; ``etf_otel``: ours is loaded and every
# wrapper stands aside. (``mcp``, the peers, stays disabled as in every run here: see harness.py.)
@pytest.mark.parametrize("disabled", ["etf_otel_mcp,mcp", "etf_otel,mcp"])
def test_nothing_crosses_when_disabled(tmp_path: Path, disabled: str) -> None:
    with OtlpReceiver() as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        outcomes = run_agent(
            endpoint,
            {
                "proposals": [["call-m", "meta_keys", "{}"]],
                "stdio": True,
                "calls": [{"server": "stdio", "name": "meta_keys"}],
            },
            OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=disabled,
        )
        (client,) = _tool_calls(receiver, "CLIENT", 1)
        (server,) = _tool_calls(receiver, "SERVER", 1)
    assert outcomes == [{"outcome": "ok", "text": "traceparent"}]  # the SDK's context, none of our keys
    assert not any(key.startswith("etf.") or key == A.GEN_AI_TOOL_CALL_ID for key in client.attributes)
    assert not any(key.startswith("etf.") or key == A.GEN_AI_TOOL_CALL_ID for key in server.attributes)


def test_a_server_without_the_sdk_span_gets_one_execution_span_of_ours(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        with http_server(endpoint, TOOLS_SERVER_NO_SDK_SPAN="1") as url:
            outcomes = run_agent(
                endpoint,
                {
                    "proposals": [READ_PAGE, ["call-f", "fail", "{}"]],
                    "http": url,
                    "calls": [
                        {"server": "http", "name": "read_page", "arguments": {"page": 1}},
                        {"server": "http", "name": "fail", "arguments": {}},
                    ],
                },
            )
        clients = _tool_calls(receiver, "CLIENT", 2)
        servers = _tool_calls(receiver, "SERVER", 2)
        proposal = _proposal(receiver, "call-a")
        server_spans = [span for span in receiver.spans() if span.resource["service.name"] == "tool-server-http"]
    assert [outcome["outcome"] for outcome in outcomes] == ["ok", "tool_error"]
    assert [span.name for span in server_spans if "initialize" not in span.name] == [
        "execute_tool read_page",
        "execute_tool fail",
    ]
    ours, failed = servers
    assert ours.scope_name == A.INSTRUMENTATION_NAME
    assert (ours.trace_id, ours.parent_span_id) == (clients[0].trace_id, clients[0].span_id)
    assert ours.attributes[A.GEN_AI_OPERATION_NAME] == A.OPERATION_EXECUTE_TOOL
    assert ours.attributes[A.GEN_AI_TOOL_CALL_ID] == "call-a"
    assert [link.span_id for link in ours.links] == [proposal.span_id]
    assert (failed.status_code, failed.attributes[A.ERROR_TYPE]) == ("ERROR", "tool_error")
