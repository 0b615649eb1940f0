"""examples/compaction_loop.py against a real server (spec §15): an agent loop that pins its task,
compacts whenever the preparation cuts and goes on far past its model's window.

Every request the scripted model and the scripted summarizer received is checked as a provider
would: within the route's context window (a summary request with its reserved output), no tool
exchange split, the pinned task in it; and each summary request carries the previous summary.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper_client import TurnkeeperClient

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "compaction_loop.py"


def load_example() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("compaction_loop", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


example = load_example()


@pytest.fixture(scope="module", params=["native", "python"])
def client(request: pytest.FixtureRequest) -> Iterator[TurnkeeperClient]:
    """A client of each engine's session server in turn: the whole session runs on both."""
    fixture = "live_server" if request.param == "native" else "python_engine_server"
    server = request.getfixturevalue(fixture)
    with TurnkeeperClient.connect(server.address) as connected:
        yield connected


@pytest.fixture(scope="module")
def session(client: TurnkeeperClient) -> Any:
    return example.run(client)


def estimate(client: TurnkeeperClient, messages: Sequence[h.ChatMessage]) -> int:
    history = h.History(chat=h.ChatHistory(messages=messages))
    return client.estimate_tokens(svc.EstimateTokensRequest(history=history)).total_tokens


def assert_no_exchange_split(messages: Sequence[h.ChatMessage]) -> None:
    """Chat Completions validity: each assistant's calls are answered by the tool rows right after
    it, and every tool row answers a call of that assistant."""
    k = 0
    while k < len(messages):
        message = messages[k]
        assert message.role != h.ROLE_TOOL, f"tool row {k} follows no call"
        k += 1
        calls = {call.id for call in message.tool_calls}
        answered = set()
        while k < len(messages) and messages[k].role == h.ROLE_TOOL:
            assert messages[k].tool_call_id in calls, f"tool row {k} answers no call before it"
            answered.add(messages[k].tool_call_id)
            k += 1
        assert answered == calls, f"calls {sorted(calls - answered)} have no result"


def holds_the_task(messages: Sequence[h.ChatMessage]) -> bool:
    return any(m.role == h.ROLE_USER and m.content == example.TASK for m in messages)


def test_the_session_runs_far_past_the_window_and_compacts_several_times(
    client: TurnkeeperClient, session: Any
) -> None:
    model, summarizer = session.model, session.summarizer
    assert len(summarizer.requests) >= 5
    assert session.refusals == []
    # The whole conversation, which no single request could hold, is well past the window.
    assert estimate(client, session.transcript) > 1.5 * example.WINDOW_TOKENS
    # Every turn got its answer: the model's last request asks the last question.
    last = [m for m in model.requests[-1] if example.is_turn_start(m)][-1]
    assert last.content == example.question(example.TURNS)


def test_no_request_exceeds_the_window(client: TurnkeeperClient, session: Any) -> None:
    for i, request in enumerate(session.model.requests):
        assert estimate(client, request) <= example.WINDOW_TOKENS, f"model request {i}"
    for i, request in enumerate(session.summarizer.requests):
        tokens = estimate(client, request) + example.SUMMARY_OUTPUT_TOKENS
        assert tokens <= example.WINDOW_TOKENS, f"summary request {i}"


def test_no_exchange_is_ever_split(session: Any) -> None:
    requests = [*session.model.requests, *session.summarizer.requests]
    assert sum(bool(m.tool_calls) for r in requests for m in r) > len(requests)  # tool-heavy
    for request in requests:
        assert_no_exchange_split(request)


def test_the_pinned_task_is_in_every_request(session: Any) -> None:
    for i, request in enumerate(session.model.requests):
        assert holds_the_task(request), f"model request {i}"
    for i, request in enumerate(session.summarizer.requests):
        assert holds_the_task(request), f"summary request {i}"


def test_each_summary_request_carries_the_previous_summary(session: Any) -> None:
    summarizer = session.summarizer
    assert not any(m.summary for m in summarizer.requests[0])
    for k in range(1, len(summarizer.requests)):
        summaries = [m for m in summarizer.requests[k] if m.summary]
        assert [m.content for m in summaries] == [summarizer.answers[k - 1]], f"request {k}"
    # So the last summary still names the first compaction's questions.
    assert summarizer.answers[-1].startswith(summarizer.answers[0])
    # Every model request after the first compaction carries the summary as it stood.
    compacted = [r for r in session.model.requests if any(m.summary for m in r)]
    assert compacted and all(
        next(m.content for m in r if m.summary) in summarizer.answers for r in compacted
    )
