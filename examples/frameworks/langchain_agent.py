"""LangChain / LangGraph with turnkeeper: one middleware in create_agent.

    TURNKEEPER_ADDRESS=127.0.0.1:50051 python examples/frameworks/langchain_agent.py

Runs the scripted six-turn session (session_script.py) with LangChain's GenericFakeChatModel,
scripted to call tools; the agent's checkpointer keeps the thread, whose id is the session.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from session_script import (
    QUESTIONS,
    SYSTEM_PROMPT,
    Recorder,
    answer,
    lookup_result,
    plan,
    profiles,
    steps_done,
    turn_of,
)
from turnkeeper_client import AsyncTurnkeeperClient, TurnkeeperClient
from turnkeeper_client.frameworks.langchain import TurnkeeperMiddleware


@tool
def lookup(query: str) -> str:
    """Looks a subject up in the records."""
    return lookup_result(query)


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, answering from the script instead of a fixed list."""

    recorder: Recorder

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        self.recorder.requests.append(list(messages))
        last_user = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        turn = turn_of(messages[last_user].text)
        calls = sum(len(getattr(m, "tool_calls", [])) for m in messages[last_user:])
        step = plan(turn, steps_done(turn, calls))
        if step is None:
            reply = AIMessage(content=answer(turn))
        else:
            reply = AIMessage(
                content="",
                tool_calls=[{"id": cid, "name": "lookup", "args": {"query": q}} for cid, q in step],
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _agent(client: TurnkeeperClient | AsyncTurnkeeperClient, recorder: Recorder) -> Any:
    return create_agent(
        ScriptedChatModel(messages=iter(()), recorder=recorder),
        tools=[lookup],
        system_prompt=SYSTEM_PROMPT,
        # The glue: one constructor, one argument.
        middleware=[TurnkeeperMiddleware(client, profiles())],
        checkpointer=InMemorySaver(),
    )


def run(address: str, session_id: str = "langchain-example") -> Recorder:
    recorder = Recorder()
    with TurnkeeperClient.connect(address) as tk:
        agent = _agent(tk, recorder)
        config = {"configurable": {"thread_id": session_id}}
        for question in QUESTIONS:
            state = agent.invoke({"messages": [HumanMessage(question)]}, config)
            print(question, "->", state["messages"][-1].text)
    return recorder


async def arun(address: str, session_id: str = "langchain-async-example") -> Recorder:
    recorder = Recorder()
    async with AsyncTurnkeeperClient.connect(address) as tk:
        agent = _agent(tk, recorder)
        config = {"configurable": {"thread_id": session_id}}
        for question in QUESTIONS:
            state = await agent.ainvoke({"messages": [HumanMessage(question)]}, config)
            print(question, "->", state["messages"][-1].text)
    return recorder


if __name__ == "__main__":
    address = os.environ.get("TURNKEEPER_ADDRESS", "127.0.0.1:50051")
    run(address)
    asyncio.run(arun(address))
