"""The OpenAI Agents SDK with turnkeeper: one argument to RunConfig.

    TURNKEEPER_ADDRESS=127.0.0.1:50051 python examples/frameworks/openai_agents_filter.py

Runs the scripted six-turn session (session_script.py) with the SDK's own ScriptedModel.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from agents import Agent, RunConfig, Runner, TResponseInputItem, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from session_script import (
    QUESTIONS,
    SYSTEM_PROMPT,
    TURN_STEPS,
    Recorder,
    answer,
    lookup_result,
    plan,
    profiles,
    steps_done,
    turn_of,
)
from turnkeeper_client import AsyncTurnkeeperClient
from turnkeeper_client.frameworks.openai_agents import TurnkeeperInputFilter


@function_tool
def lookup(query: str) -> str:
    """Looks a subject up in the records."""
    return lookup_result(query)


def _scripted_model(recorder: Recorder) -> ScriptedModel:
    def respond(call: ModelCall) -> Any:
        items: list[dict[str, Any]] = list(call.input)
        recorder.requests.append(items)
        last_user = max(i for i, item in enumerate(items) if item.get("role") == "user")
        turn = turn_of(str(items[last_user]["content"]))
        calls = sum(1 for item in items[last_user:] if item.get("type") == "function_call")
        step = plan(turn, steps_done(turn, calls))
        if step is None:
            return [assistant_message(answer(turn), item_id=f"msg_{turn}")]
        return [function_call("lookup", {"query": query}, call_id=cid) for cid, query in step]

    model_calls = sum(len(steps) + 1 for steps in TURN_STEPS)
    return ScriptedModel([ModelStep.respond(respond) for _ in range(model_calls)])


async def run(address: str, session_id: str = "agents-example") -> Recorder:
    recorder = Recorder()
    agent = Agent(
        name="researcher",
        instructions=SYSTEM_PROMPT,
        model=_scripted_model(recorder),
        tools=[lookup],
    )
    async with AsyncTurnkeeperClient.connect(address) as tk:
        # The glue: one constructor, one RunConfig argument.
        run_config = RunConfig(
            call_model_input_filter=TurnkeeperInputFilter(tk, profiles(), session_id=session_id)
        )
        items: list[TResponseInputItem] = []
        for question in QUESTIONS:
            items.append({"role": "user", "content": question})
            result = await Runner.run(agent, items, run_config=run_config)
            items = result.to_input_list()
            print(question, "->", result.final_output)
    return recorder


if __name__ == "__main__":
    asyncio.run(run(os.environ.get("TURNKEEPER_ADDRESS", "127.0.0.1:50051")))
