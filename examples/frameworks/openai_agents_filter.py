"""The OpenAI Agents SDK with turnkeeper: one argument to RunConfig.

    TURNKEEPER_ADDRESS=127.0.0.1:50051 python examples/frameworks/openai_agents_filter.py

Runs the scripted six-turn session (session_script.py) with the SDK's own ScriptedModel, which
reports each request's input tokens (counted more coarsely than turnkeeper's estimate, as real
tokenizers differ); the filter, passed as the run's hooks too, calibrates by them.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    RunConfig,
    Runner,
    TResponseInputItem,
    Usage,
    function_tool,
)
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


def input_tokens(call: ModelCall) -> int:
    """The scripted model's count: a token per three characters of the items' JSON, the
    instructions and the tools' definitions (a provider counts those it is sent too), and four
    per item."""
    items: list[Any] = list(call.input)
    tools = [
        {"name": t.name, "description": t.description, "parameters": t.params_json_schema}
        for t in call.tools
        if isinstance(t, FunctionTool)
    ]
    chars = len(call.system_instructions or "") + len(json.dumps(tools))
    chars += sum(len(json.dumps(item, default=str)) for item in items)
    return math.ceil(chars / 3) + 4 * len(items)


def _scripted_model(recorder: Recorder) -> ScriptedModel:
    def respond(call: ModelCall) -> Any:
        items: list[dict[str, Any]] = list(call.input)
        recorder.requests.append(items)
        tokens = input_tokens(call)
        recorder.reported_tokens.append(tokens)
        last_user = max(i for i, item in enumerate(items) if item.get("role") == "user")
        turn = turn_of(str(items[last_user]["content"]))
        calls = sum(1 for item in items[last_user:] if item.get("type") == "function_call")
        step = plan(turn, steps_done(turn, calls))
        if step is None:
            output: list[Any] = [assistant_message(answer(turn), item_id=f"msg_{turn}")]
        else:
            output = [function_call("lookup", {"query": q}, call_id=cid) for cid, q in step]
        return ModelStep(output=output, usage=Usage(requests=1, input_tokens=tokens))

    model_calls = sum(len(steps) + 1 for steps in TURN_STEPS)
    return ScriptedModel([ModelStep.respond(respond) for _ in range(model_calls)])


async def run(
    address: str, session_id: str = "agents-example", *, calibrate: bool = True
) -> Recorder:
    recorder = Recorder()
    agent = Agent(
        name="researcher",
        instructions=SYSTEM_PROMPT,
        model=_scripted_model(recorder),
        tools=[lookup],
    )
    async with AsyncTurnkeeperClient.connect(address) as tk:
        # The glue: one constructor, the RunConfig argument, and the same filter as the run's
        # hooks so that each response's usage calibrates the next call.
        tk_filter = TurnkeeperInputFilter(
            tk, profiles(), session_id=session_id, calibrate=calibrate
        )
        run_config = RunConfig(call_model_input_filter=tk_filter)
        items: list[TResponseInputItem] = []
        for question in QUESTIONS:
            items.append({"role": "user", "content": question})
            result = await Runner.run(agent, items, run_config=run_config, hooks=tk_filter)
            items = result.to_input_list()
            print(question, "->", result.final_output)
    return recorder


if __name__ == "__main__":
    asyncio.run(run(os.environ.get("TURNKEEPER_ADDRESS", "127.0.0.1:50051")))
