"""LiteLLM with turnkeeper: `tk_llm.completion(...)` where the loop called `litellm.completion`.

    TURNKEEPER_ADDRESS=127.0.0.1:50051 python examples/frameworks/litellm_completion.py

Runs the scripted six-turn session (session_script.py) against a LiteLLM custom provider that
plays the model. It counts its prompt tokens more coarsely than turnkeeper's estimate, as real
tokenizers differ, and reports them as `usage.prompt_tokens`; the adapter calibrates by them.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

# The model cost map ships with LiteLLM; without this it is fetched over the network first.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from litellm import CustomLLM
from litellm.exceptions import ContextWindowExceededError
from litellm.types.utils import ModelResponse
from session_script import (
    MODEL,
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
from turnkeeper_client import TurnkeeperClient
from turnkeeper_client.frameworks.litellm import TurnkeeperLiteLLM

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Looks a subject up in the records.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]


def prompt_tokens(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> int:
    """The scripted provider's count: a token per three characters of the messages and of the
    tools' JSON (a provider counts the tool definitions it is sent too), and four per message."""
    chars = len(json.dumps(tools)) if tools else 0
    for message in messages:
        chars += len(str(message.get("content") or ""))
        for call in message.get("tool_calls") or []:
            chars += len(call["id"]) + len(call["function"]["name"] + call["function"]["arguments"])
        chars += len(str(message.get("tool_call_id") or ""))
    return math.ceil(chars / 3) + 4 * len(messages)


class ScriptedProvider(CustomLLM):
    """A LiteLLM custom provider that answers from the script; over `window` tokens it refuses
    the request as a provider does (ContextWindowExceededError)."""

    def __init__(self, recorder: Recorder, window: int = 1_000_000) -> None:
        super().__init__()
        self.recorder = recorder
        self.window = window

    def completion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        messages: list[dict[str, Any]] = [dict(m) for m in kwargs["messages"]]
        self.recorder.requests.append(messages)
        tokens = prompt_tokens(messages, (kwargs.get("optional_params") or {}).get("tools"))
        if tokens > self.window:
            raise ContextWindowExceededError(
                message=f"This model's maximum context length is {self.window} tokens; "
                f"the messages resulted in {tokens} tokens.",
                model=MODEL,
                llm_provider="scripted",
            )
        self.recorder.reported_tokens.append(tokens)
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        turn = turn_of(str(messages[last_user]["content"]))
        calls = sum(len(m.get("tool_calls") or []) for m in messages[last_user:])
        step = plan(turn, steps_done(turn, calls))
        message: dict[str, Any] = {"role": "assistant", "content": answer(turn)}
        if step is not None:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps({"query": q})},
                    }
                    for cid, q in step
                ],
            }
        return ModelResponse(
            model=MODEL,
            choices=[{"index": 0, "message": message, "finish_reason": "stop"}],
            usage={"prompt_tokens": tokens, "completion_tokens": 8, "total_tokens": tokens + 8},
        )

    async def acompletion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return self.completion(*args, **kwargs)


def install(provider: ScriptedProvider) -> None:
    litellm.custom_provider_map = [{"provider": "scripted", "custom_handler": provider}]


def run(address: str, session_id: str = "litellm-example", *, calibrate: bool = True) -> Recorder:
    recorder = Recorder()
    install(ScriptedProvider(recorder))
    messages: list[Any] = [{"role": "system", "content": SYSTEM_PROMPT}]
    with TurnkeeperClient.connect(address) as tk:
        # The glue: one constructor; each call passes the session.
        tk_llm = TurnkeeperLiteLLM(tk, profiles(), calibrate=calibrate)
        for question in QUESTIONS:
            messages.append({"role": "user", "content": question})
            while True:
                response = tk_llm.completion(
                    model=f"scripted/{MODEL}", messages=messages, tools=TOOLS, session_id=session_id
                )
                reply = response.choices[0].message
                messages.append(reply)
                if not reply.tool_calls:
                    break
                for call in reply.tool_calls:
                    query = json.loads(call.function.arguments)["query"]
                    messages.append(
                        {"role": "tool", "tool_call_id": call.id, "content": lookup_result(query)}
                    )
            print(question, "->", reply.content)
    return recorder


if __name__ == "__main__":
    run(os.environ.get("TURNKEEPER_ADDRESS", "127.0.0.1:50051"))
