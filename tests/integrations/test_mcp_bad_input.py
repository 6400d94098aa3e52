"""Bad ``_meta`` reaches a real MCP server in its own process: the call goes on, the span says what it saw.

The agent passes ``meta`` to ``call_tool`` by hand (an application, or a peer, that gets our keys
wrong); nothing raises on either side, no rejected value is recorded, and a call id nobody
proposed is evidence for the audit, never a reason to trust the call.
"""

from __future__ import annotations

from typing import Any

from etf_otel import attributes as A
from tests.support.otlp_receiver import OtlpReceiver

from .mcp_servers.harness import run_agent
from .test_mcp_processes import READ_PAGE, _tool_calls

ID, PROPOSAL = A.MCP_META_TOOL_CALL_ID, A.MCP_META_PROPOSAL

CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({ID: 12345}, {A.ETF_MCP_META_REJECTED: ["call_id_not_string"]}),
    ({ID: ""}, {A.ETF_MCP_META_REJECTED: ["call_id_empty"]}),
    ({ID: "x" * 300}, {A.ETF_MCP_META_REJECTED: ["call_id_too_long"]}),
    ({ID: "call\n-a"}, {A.ETF_MCP_META_REJECTED: ["call_id_not_printable"]}),
    ({ID: ["call-a"]}, {A.ETF_MCP_META_REJECTED: ["call_id_not_string"]}),
    ({PROPOSAL: "00-zz-zz-01"}, {A.ETF_MCP_META_REJECTED: ["proposal_unparsed"]}),
    ({PROPOSAL: "00-" + "0" * 32 + "-" + "0" * 16 + "-01"}, {A.ETF_MCP_META_REJECTED: ["proposal_unparsed"]}),
    # Oversized _meta around a valid id: only our keys are read, the id is used.
    ({ID: "call-q", "padding": "p" * 200_000}, {A.GEN_AI_TOOL_CALL_ID: "call-q"}),
    # A well-formed id nobody proposed: recorded as what arrived, judged by the audit only.
    ({ID: "call-never"}, {A.GEN_AI_TOOL_CALL_ID: "call-never"}),
]


def test_bad_meta_never_stops_a_call() -> None:
    with OtlpReceiver() as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        calls = [{"server": "stdio", "name": "read_page", "arguments": {"page": 2}, "meta": meta} for meta, _ in CASES]
        outcomes = run_agent(endpoint, {"proposals": [READ_PAGE], "stdio": True, "calls": calls})
        servers = _tool_calls(receiver, "SERVER", len(CASES))
        clients = _tool_calls(receiver, "CLIENT", len(CASES))
    assert outcomes == [{"outcome": "ok", "text": "page 2: revenue grew"}] * len(CASES)
    assert len(servers) == len(CASES)
    for server, client, (meta, expected) in zip(servers, clients, CASES, strict=True):
        ours = {
            key: value
            for key, value in server.attributes.items()
            if key.startswith("etf.") or key.startswith("gen_ai.tool.call")
        }
        if A.GEN_AI_TOOL_CALL_ID in expected:
            expected = {**expected, A.ETF_TOOL_CALL_ID_SOURCE: A.TOOL_CALL_ID_SOURCE_MCP_META}
        assert ours == expected, meta
        assert not server.links and not server.events
        assert server.status_code != "ERROR"
        # The client sent the application's meta as it was and matched nothing to it: no id here is a
        # proposal of the agent, so its own span names none (the server's opt-in records a valid one).
        assert client.attributes[A.ETF_MCP_MATCH] == "unmatched", meta
        assert A.GEN_AI_TOOL_CALL_ID not in client.attributes, meta
