"""pydantic-ai's ``BedrockConverseModel`` and LangChain's ``ChatBedrockConverse``: real loops, zero code, clean.

Each framework runs its own loop over Amazon Bedrock Converse (a real ``boto3`` client against the
scripted server's ``/converse-stream`` and ``/converse`` endpoints) for three tool rounds, two parallel
calls in the first two, before the text answer, with every etf-otel instrumentor installed from its
entry point and no line of glue: ``etf_otel_bedrock`` records the model calls, the framework's own
instrumentor (``etf_otel_pydantic_ai``, ``etf_otel_langchain``) its tool runs. Judged as the other
frameworks' loops (``test_multi_round.World.assert_clean``): no violation live, the counter at 0,
``etf-otel audit`` of the export at exit 0 with no finding, each follow-up settling its round.

Both frameworks read ``contentBlockIndex`` (pydantic-ai keys its parts by it, LangChain makes it the
tool-call chunk's index, BEDROCK.md 9.3), and both send every result of a turn in one user message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic_ai import Agent, RunContext

from etf_otel.testing._scripted import ANSWER
from tests.integrations.frameworks.test_multi_round import (
    ETF_OTEL,
    STATELESS,
    World,
    clock,
    guard,
    only,
    served,
    stack,
    weather,
    world,
)

FIXTURES = (served, stack, guard, world)
"""The loop world of the other frameworks' tests: its fixtures, used here by name."""

boto3 = pytest.importorskip("boto3")
botocore_config = pytest.importorskip("botocore.config")
pydantic_bedrock = pytest.importorskip("pydantic_ai.models.bedrock")
pydantic_bedrock_provider = pytest.importorskip("pydantic_ai.providers.bedrock")
langchain_aws = pytest.importorskip("langchain_aws")

MODEL_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
PROMPT = "Weather and time, three places?"


@pytest.fixture(autouse=True)
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No profile, no bearer token (botocore would refuse the plain-HTTP endpoint)."""
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    yield


def bedrock_client(world: World) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=world.server.root_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore_config.Config(retries={"total_max_attempts": 1}),
    )


# --- pydantic-ai --------------------------------------------------------------------------------------------------


def pydantic_agent(world: World) -> Any:
    def get_weather(ctx: RunContext[None], city: str) -> str:
        world.note(ctx.tool_call_id, "get_weather", city)
        return weather(city)

    def get_time(ctx: RunContext[None], tz: str) -> str:
        world.note(ctx.tool_call_id, "get_time", tz)
        return clock(tz)

    provider = pydantic_bedrock_provider.BedrockProvider(bedrock_client=bedrock_client(world))
    return Agent(pydantic_bedrock.BedrockConverseModel(MODEL_ID, provider=provider), tools=[get_weather, get_time])


@only(ETF_OTEL)
@pytest.mark.parametrize("method", ["run", "run_stream"])
def test_pydantic_ai_bedrock_converse_three_rounds_judge_nothing_wrong(world: World, method: str) -> None:
    """``run`` calls ``converse``, ``run_stream`` ``converse_stream`` (boto3 in a worker thread, both)."""
    world.model()
    agent = pydantic_agent(world)

    async def go() -> str:
        if method == "run":
            return str((await agent.run(PROMPT)).output)
        async with agent.run_stream(PROMPT) as streamed:
            return str(await streamed.get_output())

    assert asyncio.run(go()) == ANSWER
    assert world.sent() == STATELESS
    world.assert_clean()


# --- LangChain / LangGraph ----------------------------------------------------------------------------------------


def graph(world: World, streaming: bool) -> Any:
    """The ReAct loop: a model node over ``ChatBedrockConverse``, a ``ToolNode``, and back until no call is left."""

    @tool
    def get_weather(city: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """The weather in a city."""
        world.note(call_id, "get_weather", city)
        return weather(city)

    @tool
    def get_time(tz: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """The time in a time zone."""
        world.note(call_id, "get_time", tz)
        return clock(tz)

    tools = [get_weather, get_time]
    client = bedrock_client(world)
    chat = langchain_aws.ChatBedrockConverse(model=MODEL_ID, client=client, disable_streaming=not streaming)
    model = chat.bind_tools(tools)

    def call(state: MessagesState) -> dict[str, Any]:
        if streaming:
            chunks = list(model.stream(state["messages"]))
            message = chunks[0]
            for chunk in chunks[1:]:
                message = message + chunk
            return {"messages": [message]}
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", RunnableLambda(call))
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder.compile()


@only(ETF_OTEL)
@pytest.mark.parametrize("streaming", [False, True], ids=["converse", "converse_stream"])
def test_langchain_chat_bedrock_converse_three_rounds_judge_nothing_wrong(world: World, streaming: bool) -> None:
    world.model()
    messages = graph(world, streaming).invoke({"messages": [("user", PROMPT)]})["messages"]
    assert messages[-1].content in (ANSWER, [{"type": "text", "text": ANSWER, "index": 0}])
    assert world.sent() == STATELESS
    paths = {request.path.rsplit("/", 1)[-1] for request in world.requests()}
    assert paths == ({"converse-stream"} if streaming else {"converse"})
    world.assert_clean()
