"""etf-otel's MCP instrumentation beside the ones users already install, in either order.

OpenInference's ``openinference-instrumentation-mcp`` wraps the transports and injects the trace
context into ``_meta`` again (no spans); OpenLLMetry's ``opentelemetry-instrumentation-mcp`` 0.62.4
fails half-way on ``mcp`` 2.x (it looks for names 2.x renamed) and stays partly installed. Each
process (agent, stdio server, Streamable HTTP server) instruments all three in the order given,
by hand; the zero-code runs of ``test_mcp_processes`` load the same three through their entry points.
"""

from __future__ import annotations

import pytest

from etf_otel import attributes as A
from tests.support.otlp_receiver import OtlpReceiver

from .mcp_servers.harness import http_server, run_agent
from .test_mcp_processes import OUR_KEYS, _proposal, _tool_calls, both_servers_plan


@pytest.mark.parametrize("order", ["etf,openinference,openllmetry", "openllmetry,openinference,etf"])
def test_no_double_injection_no_duplicate_span_no_lost_context(order: str) -> None:
    with OtlpReceiver() as receiver:
        endpoint = receiver.http_endpoint + "/v1/traces"
        with http_server(endpoint, ETF_TEST_ORDER=order) as url:
            outcomes = run_agent(
                endpoint,
                both_servers_plan(url),
                ETF_TEST_ORDER=order,
            )
        clients = _tool_calls(receiver, "CLIENT", 2)
        servers = _tool_calls(receiver, "SERVER", 2)
        proposals = [_proposal(receiver, "call-a"), _proposal(receiver, "call-m")]
        spans = receiver.spans()
    # The peers are really there: OpenInference wrapped both client transports, etf-otel call_tool.
    assert outcomes[0] == {"wrapped": ["call_tool", "stdio_client", "streamable_http_client"]}
    assert outcomes[1]["outcome"] == "ok"
    assert set(outcomes[2]["text"].split()) == {"traceparent", *OUR_KEYS}
    # Exactly the SDK's two spans per call, nobody else's execution span.
    assert len(clients) == 2 and len(servers) == 2
    executions = [span for span in spans if span.attributes.get(A.GEN_AI_OPERATION_NAME) == A.OPERATION_EXECUTE_TOOL]
    assert sorted(span.span_id for span in executions) == sorted(span.span_id for span in servers)
    for client, server, proposal in zip(clients, servers, proposals, strict=True):
        call_id = proposal.attributes[A.GEN_AI_TOOL_CALL_ID]
        assert client.attributes[A.GEN_AI_TOOL_CALL_ID] == server.attributes[A.GEN_AI_TOOL_CALL_ID] == call_id
        assert (server.trace_id, server.parent_span_id) == (client.trace_id, client.span_id)
        assert server.trace_id == proposal.trace_id
        assert [link.span_id for link in server.links] == [proposal.span_id]
        assert [link.span_id for link in client.links] == [proposal.span_id]
