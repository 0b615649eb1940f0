"""An agent loop that condenses its history instead of forgetting it (spec §15).

A scripted model (deterministic, no network) works through a task in many user turns, calling a
lookup tool in each of them, until the session is far larger than the model's context window. The
runtime pins its first turn (the task), prepares every model call with `PrepareModelCall`, and
whenever the preparation reports a cut it asks `PlanCompaction` what to condense, sends the plan's
summary request to the scripted summarizer, applies the plan to its history with the answer
(`apply_compaction`) and prepares again. The summarizer builds on the previous summary (the
summary row the request carries), so each summary covers everything before it.

    TURNKEEPER_ADDRESS=127.0.0.1:50051 .venv/bin/python examples/compaction_loop.py
    .venv/bin/python tests/support/with_server.py --engine python -- \
        .venv/bin/python examples/compaction_loop.py

tests/service/test_compaction_example.py runs it against a real server and checks every request.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2, trim_pb2
from turnkeeper_client import TurnkeeperClient, apply_compaction

MODEL = "scripted-model"
WINDOW_TOKENS = 8_000
"""The model's context window: no request may exceed it, summary requests included."""
BUDGET_TOKENS = 4_000
"""The history budget the preparation trims to; compaction keeps the session under it."""
SUMMARY_OUTPUT_TOKENS = 600
"""What the summary request reserves for the summarizer's answer."""
SYSTEM_PROMPT = "You are a research assistant. Look things up before you answer."
TURNS = 32
TASK = f"Task: compile a report on the archive's subjects 1 to {TURNS}, citing each record."
# Tool-call steps per user turn, with the parallel calls of each step; the task turn is turn 0.
TURN_STEPS: list[list[int]] = [[1], *([[2, 1], [1], [3], [1, 2]] * (TURNS // 4))]
SESSION = "compaction-example"


def profiles() -> profile_pb2.Profiles:
    """A budget under the window, cut on the low-water grid so compaction comes in steps (spec
    §11); tool context is never collapsed (spec §13.1), so every turn carries its exchanges."""
    return profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(
            max_context_tokens=BUDGET_TOKENS,
            history_trim_low_water=0.7,
            keep_tool_context_turns=1_000,
            default_provider="scripted",
            default_model=MODEL,
        ),
        providers=[
            profile_pb2.ProviderProfile(alias="scripted", model=MODEL, context_window=WINDOW_TOKENS)
        ],
    )


def question(turn: int) -> str:
    return f"Question {turn}: what do the records say about subject {turn}?"


def turn_of(user_text: str) -> int:
    """The turn a user row asks (0 for the task), from its text."""
    if user_text.startswith("Question "):
        return int(user_text.split(":", 1)[0].removeprefix("Question "))
    return 0


def lookup(query: str) -> str:
    """The lookup tool: a record long enough that a few turns fill the budget."""
    return f"Record for {query}: " + "the archive lists dates, names and figures; " * 14


# ---- the scripted model and summarizer -----------------------------------------------------------


def is_turn_start(message: h.ChatMessage) -> bool:
    return message.role == h.ROLE_USER and not (message.summary or message.breadcrumb)


@dataclass
class ScriptedModel:
    """Decides from what it receives alone: the turn its last user row asks and the tool-call
    steps since that row. Records every request it is sent."""

    requests: list[list[h.ChatMessage]] = field(default_factory=list)

    def respond(self, request: Sequence[h.ChatMessage]) -> h.ChatMessage:
        self.requests.append(list(request))
        start = max(i for i, m in enumerate(request) if is_turn_start(m))
        turn = turn_of(request[start].content)
        done = sum(1 for m in request[start:] if m.tool_calls)
        steps = TURN_STEPS[turn]
        if done >= len(steps):
            return h.ChatMessage(role=h.ROLE_ASSISTANT, content=f"Answer {turn}: noted.")
        calls = [
            h.ToolCall(
                id=f"call_t{turn}_s{done}_{k}",
                name="lookup",
                arguments=f'{{"query": "subject {turn} part {done}.{k}"}}',
            )
            for k in range(steps[done])
        ]
        return h.ChatMessage(role=h.ROLE_ASSISTANT, tool_calls=calls)


@dataclass
class ScriptedSummarizer:
    """Answers a summary request with the previous summary (the request's summary row) followed
    by a line naming the questions it condenses. Records every request and answer."""

    requests: list[list[h.ChatMessage]] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)

    def summarize(self, request: Sequence[h.ChatMessage]) -> str:
        self.requests.append(list(request))
        previous = next((m.content for m in request if m.summary), "")
        # The last row is the instruction; the pinned task stays in the history, not condensed.
        questions = [turn_of(m.content) for m in request[:-1] if is_turn_start(m) and not m.pinned]
        line = f"Summary {len(self.answers) + 1}: answered questions {questions}."
        answer = f"{previous}\n{line}" if previous else line
        self.answers.append(answer)
        return answer


# ---- the runtime ---------------------------------------------------------------------------------


@dataclass
class Session:
    model: ScriptedModel = field(default_factory=ScriptedModel)
    summarizer: ScriptedSummarizer = field(default_factory=ScriptedSummarizer)
    refusals: list[svc.CompactionRefusal] = field(default_factory=list)
    history: list[h.ChatMessage] = field(default_factory=list)
    """The runtime's history, compacted."""
    transcript: list[h.ChatMessage] = field(default_factory=list)
    """Every row the session appended, never compacted: what no request could hold."""

    def append(self, *rows: h.ChatMessage) -> None:
        self.history.extend(rows)
        self.transcript.extend(rows)


def caller(step: int) -> trim_pb2.CallerContext:
    return trim_pb2.CallerContext(session_id=SESSION, turn_id=str(step))


def cut_turns(response: svc.PrepareModelCallResponse) -> bool:
    return any(t.dropped_turns > 0 for t in response.trims)


def prepare(client: TurnkeeperClient, session: Session, step: int) -> list[h.ChatMessage]:
    """The request for the next model call; when the preparation cuts, the history is compacted
    first and prepared again."""
    chosen = profiles()
    history = h.History(chat=h.ChatHistory(messages=session.history))
    request = svc.PrepareModelCallRequest(history=history, profiles=chosen, caller=caller(step))
    response = client.prepare_model_call(request)
    if cut_turns(response):
        planned = client.plan_compaction(
            svc.PlanCompactionRequest(
                history=history,
                profiles=chosen,
                caller=caller(step),
                summary_output_tokens=SUMMARY_OUTPUT_TOKENS,
            )
        )
        if planned.HasField("plan"):
            plan = planned.plan
            answer = session.summarizer.summarize(plan.summary_request.chat.messages)
            session.history = list(apply_compaction(history, plan, answer).chat.messages)
            request.history.CopyFrom(h.History(chat=h.ChatHistory(messages=session.history)))
            response = client.prepare_model_call(request)
        else:  # sent as the preparation cut it: the dropped turns are lost
            session.refusals.append(planned.refusal)
    return list(response.history.chat.messages)


def run(client: TurnkeeperClient) -> Session:
    """Plays the whole session; returns what the model and the summarizer received."""
    session = Session()
    session.append(h.ChatMessage(role=h.ROLE_SYSTEM, content=SYSTEM_PROMPT))
    step = 0
    for turn in range(TURNS + 1):
        if turn == 0:
            session.append(h.ChatMessage(role=h.ROLE_USER, content=TASK, pinned=True))
        else:
            session.append(h.ChatMessage(role=h.ROLE_USER, content=question(turn)))
        while True:
            reply = session.model.respond(prepare(client, session, step))
            step += 1
            session.append(reply)
            if not reply.tool_calls:
                break
            session.append(
                *(
                    h.ChatMessage(role=h.ROLE_TOOL, tool_call_id=c.id, content=lookup(c.arguments))
                    for c in reply.tool_calls
                )
            )
    return session


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--address",
        default=os.environ.get("TURNKEEPER_ADDRESS", "127.0.0.1:50051"),
        help="the sidecar's host:port (default: $TURNKEEPER_ADDRESS or 127.0.0.1:50051)",
    )
    args = parser.parse_args(argv)
    with TurnkeeperClient.connect(args.address) as client:
        session = run(client)
    print(
        f"{len(session.model.requests)} model calls, "
        f"{len(session.summarizer.requests)} compactions, "
        f"{len(session.refusals)} refused plans"
    )
    if session.summarizer.answers:
        print("the last summary:")
        print(session.summarizer.answers[-1])


if __name__ == "__main__":
    main()
