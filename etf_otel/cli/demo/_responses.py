"""``etf-otel demo``: the OpenAI Responses part, through ``client.responses`` of the real ``openai`` client.

One valid call runs through the guarded host and its result is sent back (the linkage checks read
it), then the failures; ``get_final_response()`` is what the SDK alone hands the app.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from etf_otel.cli.demo._cases import DISPATCHED, READ, USER, Part, ProtocolCase, describe_call, hand_to_host, run_case
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing import responses as r

__all__ = ["run_responses"]


def _r_item(call_id: str, item_id: str, arguments: str = READ, status: str = "completed") -> dict[str, Any]:
    return r.function_call(call_id, "read_source", arguments, item_id, status)


def _r_call(call_id: str, item_id: str, *, done: bool = True) -> list[dict[str, Any]]:
    """One ``read_source`` call at output_index 0 as the API streams it: added, two deltas, both done events."""
    events = r.call(0, call_id, "read_source", [READ[:8], READ[8:]], item_id)
    return events if done else events[:3]


def _r_script(response_id: str, events: Sequence[dict[str, Any]], end: dict[str, Any]) -> Script:
    """``response.created``, the events, then ``end``; sequence numbers in order, ``event:`` lines."""
    return Script(events=r.stream(*events, end=end, id=response_id), named=True)


def _r_completed(response_id: str, *items: dict[str, Any]) -> dict[str, Any]:
    return r.completed(list(items), id=response_id)


def _r_stream(n: int, completed_call_id: str | None = None) -> Script:
    """Response ``resp_<n>``: call ``call_r<n>`` (item ``fc_r<n>``), listed in ``response.completed``."""
    call_id, item_id, response_id = f"call_r{n}", f"fc_r{n}", f"resp_{n}"
    final = _r_item(completed_call_id or call_id, item_id)
    return _r_script(response_id, _r_call(call_id, item_id), _r_completed(response_id, final))


def _r_cases() -> list[tuple[ProtocolCase, Script, str | None]]:
    """``(case, its stream, the field of the call the app answers with)``; ``None``: no answer."""
    cut = r.incomplete("max_output_tokens", [_r_item("call_r3", "fc_r3", status="incomplete")], "resp_3")
    incomplete = _r_script("resp_3", _r_call("call_r3", "fc_r3", done=False), cut)
    return [
        (ProtocolCase("valid call, result sent by call_id", DISPATCHED), _r_stream(1), "call_id"),
        (ProtocolCase("call_id changed in response.completed", "snapshot_mismatch"), _r_stream(2, "call_9"), None),
        (ProtocolCase("response.incomplete (max_output_tokens)", "incomplete_response"), incomplete, None),
        (ProtocolCase("result sent with the fc_ item id", "orphaned_result", may_run=True), _r_stream(4), "id"),
    ]


_R_TOOLS: Any = [
    {"type": "function", "name": "read_source", "strict": False,
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
]  # fmt: skip


def _r_case(client: Any, host: Any, server: LocalChatServer, answer_with: str | None, case: ProtocolCase) -> None:
    """One ``responses.stream(...)`` turn: the SDK's calls to the host, then their results in the next request."""
    history: list[Any] = [{"role": "user", "content": USER}]
    try:
        with client.responses.stream(model="etf-demo", input=history, tools=_R_TOOLS) as stream:
            for _ in stream:
                pass
            final = stream.get_final_response()
    except Exception as error:  # what the SDK alone raises at the app
        case.sdk = f"raises {type(error).__name__}: {error}"
        return
    calls = [item for item in final.output if item.type == "function_call"]
    case.sdk = "\n".join(describe_call(call.call_id, call.name, call.arguments) for call in calls) or "no call"
    results: list[Any] = []
    for call in calls:
        output = hand_to_host(case, host, call)
        if output is not None and answer_with is not None:
            call_id = getattr(call, answer_with)
            results.append({"type": "function_call_output", "call_id": call_id, "output": output})
            if call_id != call.call_id:
                case.sdk += f"\nresult sent for {call_id}, unchecked"
    if results:
        server.enqueue(_r_script(f"{final.id}_next", [], _r_completed(f"{final.id}_next")))
        for _ in client.responses.create(model="etf-demo", input=[*history, *final.output, *results], stream=True):
            pass


def run_responses(part: Part, client: Any, instrumentation: Any) -> list[ProtocolCase]:
    """The Responses cases through ``client.responses`` of the instrumented ``openai`` client."""
    host = instrumentation.host(part.host, guard=True)
    cases = []
    for case, script, answer_with in _r_cases():
        part.server.enqueue(script)
        cases.append(run_case(part, "responses", case, partial(_r_case, client, host, part.server, answer_with)))
    return cases
