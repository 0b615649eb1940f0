"""The scripted six-turn agent session (examples/frameworks) through every Python adapter,
against the real framework packages and a live server.

Each request the scripted model receives must be provider-valid (every call answered, the
results right after their calls), within the budget unless only the current turn is left, the
trims' events must carry the session, and the loop must finish.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, convert_to_openai_messages
from turnkeeper.v1 import history_service_pb2 as svc

from turnkeeper_client import (
    TurnkeeperClient,
    TurnkeeperError,
    from_openai,
    from_openai_responses,
)

from .conftest import REPO, Endpoints

EXAMPLES = REPO / "examples" / "frameworks"
sys.path.insert(0, str(EXAMPLES))
script: Any = importlib.import_module("session_script")
BREADCRUMB = "[earlier turns omitted to fit the context window]"


def example(name: str) -> Any:
    return importlib.import_module(name)


class Events:
    """Every TrimEvent published while the block runs (any session)."""

    def __init__(self, client: TurnkeeperClient) -> None:
        self.events: list[svc.TrimEventsResponse] = []
        self._watch = client.watch_trims().wait_subscribed()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for item in self._watch:
                if item.HasField("event"):
                    self.events.append(item)
        except TurnkeeperError:
            pass  # closing the watch cancels its stream

    def sessions(self, expected: int) -> list[str]:
        deadline = time.monotonic() + 10
        while len(self.events) < expected and time.monotonic() < deadline:
            time.sleep(0.05)
        self._watch.close()
        self._thread.join(timeout=10)
        return [item.event.trimmed.caller.session_id for item in self.events]


@pytest.fixture
def events(client: TurnkeeperClient) -> Iterator[Events]:
    yield Events(client)


def check_chat(messages: list[dict[str, Any]]) -> None:
    """Chat Completions validity: each assistant's calls are answered by the tool messages right
    after it, and every tool message answers a call of that assistant."""
    k = 0
    while k < len(messages):
        message = messages[k]
        assert message["role"] != "tool", f"tool message {k} follows no call: {messages}"
        calls = {call["id"] for call in message.get("tool_calls") or []}
        k += 1
        answered = set()
        while k < len(messages) and messages[k]["role"] == "tool":
            assert messages[k]["tool_call_id"] in calls, f"message {k} answers no call"
            answered.add(messages[k]["tool_call_id"])
            k += 1
        assert answered == calls, f"calls {calls - answered} unanswered before message {k}"


def check_responses(items: list[dict[str, Any]]) -> None:
    """Responses validity: each run of function_call items is followed by exactly its outputs."""
    k = 0
    while k < len(items):
        assert items[k].get("type") != "function_call_output", f"output {k} follows no call"
        calls = set()
        while k < len(items) and items[k].get("type") == "function_call":
            calls.add(items[k]["call_id"])
            k += 1
        answered = set()
        while k < len(items) and items[k].get("type") == "function_call_output":
            assert items[k]["call_id"] in calls, f"item {k} answers no call of its run"
            answered.add(items[k]["call_id"])
            k += 1
        assert answered == calls, f"calls {calls - answered} unanswered before item {k}"
        if not calls:
            k += 1


def questions_in(texts: list[str]) -> int:
    return sum(1 for text in texts if text.startswith("Question "))


def within_budget(client: TurnkeeperClient, history: Any, questions: int) -> bool:
    """The history fits the budget, or holds the current turn only (it is never cut)."""
    estimate = client.estimate_tokens(svc.EstimateTokensRequest(history=history)).total_tokens
    return estimate <= script.BUDGET_TOKENS or questions <= 1


def total_calls() -> int:
    return sum(sum(steps) for steps in script.TURN_STEPS)


def calls_answered(requests: list[Any], ids: Callable[[Any], set[str]]) -> set[str]:
    seen: set[str] = set()
    for request in requests:
        seen |= ids(request)
    return seen


def test_agents_sdk_loop(endpoints: Endpoints, client: TurnkeeperClient, events: Events) -> None:
    session = "agents-loop"
    recorder = asyncio.run(
        example("openai_agents_filter").run(endpoints.address, session, calibrate=False)
    )
    assert len(recorder.requests) == sum(len(steps) + 1 for steps in script.TURN_STEPS)
    for items in recorder.requests:
        check_responses(items)
        texts = [str(i.get("content")) for i in items if i.get("role") == "user"]
        assert within_budget(client, from_openai_responses(items), questions_in(texts))
    outputs = calls_answered(
        recorder.requests,
        lambda items: {i["call_id"] for i in items if i.get("type") == "function_call_output"},
    )
    assert len(outputs) == total_calls()  # every call's result reached the model
    assert any(BREADCRUMB in str(i.get("content")) for i in recorder.requests[-1])
    sessions = events.sessions(1)
    assert sessions and set(sessions) == {session}


def test_agents_sdk_calibrated_loop_keeps_the_model_count_in_budget(
    endpoints: Endpoints, client: TurnkeeperClient
) -> None:
    """With calibration on (the filter as the run's hooks), what the model counts stays within
    the budget, except while the current turn alone is over it (spec 16.2)."""
    recorder = asyncio.run(example("openai_agents_filter").run(endpoints.address, "agents-cal"))
    for items, reported in zip(recorder.requests, recorder.reported_tokens, strict=True):
        check_responses(items)
        questions = questions_in([str(i.get("content")) for i in items if i.get("role") == "user"])
        assert reported <= script.BUDGET_TOKENS or questions <= 1, (reported, questions)


def _langchain_checks(client: TurnkeeperClient, requests: list[list[BaseMessage]]) -> None:
    for messages in requests:
        chat = convert_to_openai_messages(messages)
        assert isinstance(chat, list)
        check_chat(chat)
        texts = [str(m.text) for m in messages if m.type == "human"]
        # The system prompt is the middleware's hook text: the budget bounds the rest.
        history = [m for m in chat if m["role"] != "system"]
        assert within_budget(client, from_openai(history), questions_in(texts))
    outputs = calls_answered(
        requests, lambda msgs: {m.tool_call_id for m in msgs if m.type == "tool"}
    )
    assert len(outputs) == total_calls()
    assert any(m.text == BREADCRUMB for m in requests[-1])


def test_langchain_loop(endpoints: Endpoints, client: TurnkeeperClient, events: Events) -> None:
    recorder = example("langchain_agent").run(endpoints.address, "langchain-loop")
    assert len(recorder.requests) == sum(len(steps) + 1 for steps in script.TURN_STEPS)
    _langchain_checks(client, recorder.requests)
    sessions = events.sessions(1)
    assert sessions and set(sessions) == {"langchain-loop"}


async def test_langchain_async_loop(endpoints: Endpoints, client: TurnkeeperClient) -> None:
    recorder = await example("langchain_agent").arun(endpoints.address, "langchain-async")
    _langchain_checks(client, recorder.requests)


def _litellm_checks(client: TurnkeeperClient, requests: list[list[dict[str, Any]]]) -> None:
    for messages in requests:
        check_chat(messages)
        texts = [str(m["content"]) for m in messages if m["role"] == "user"]
        assert within_budget(client, from_openai(messages), questions_in(texts))
    outputs = calls_answered(
        requests, lambda msgs: {m["tool_call_id"] for m in msgs if m["role"] == "tool"}
    )
    assert len(outputs) == total_calls()


def test_litellm_loop(endpoints: Endpoints, client: TurnkeeperClient, events: Events) -> None:
    recorder = example("litellm_completion").run(endpoints.address, "litellm-loop", calibrate=False)
    _litellm_checks(client, recorder.requests)
    sessions = events.sessions(1)
    assert sessions and set(sessions) == {"litellm-loop"}


def test_litellm_calibrated_loop_keeps_the_provider_count_in_budget(
    endpoints: Endpoints, client: TurnkeeperClient
) -> None:
    """With calibration on, what the provider counts stays within the budget, except while the
    current turn alone is over it (spec 16.2)."""
    recorder = example("litellm_completion").run(endpoints.address, "litellm-calibrated")
    _litellm_checks(client, recorder.requests)
    for messages, reported in zip(recorder.requests, recorder.reported_tokens, strict=True):
        questions = questions_in([str(m["content"]) for m in messages if m["role"] == "user"])
        assert reported <= script.BUDGET_TOKENS or questions <= 1, (reported, questions)
