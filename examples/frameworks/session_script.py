"""The scripted agent session every framework example runs: six user turns against a small
budget, each turn calling a lookup tool, with parallel calls and one turn of twelve calls.

The scripted model decides from what it receives alone (the current turn is always kept whole):
it counts the tool-call steps since the last user message and either calls the next step's tools
or answers. It records every request so the examples' test can check each one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from turnkeeper.v1 import profile_pb2

BUDGET_TOKENS = 1_500
SYSTEM_PROMPT = "You are a research assistant. Look things up before you answer."
# Parallel calls per step, per user turn: the third turn makes twelve calls in four steps.
TURN_STEPS: list[list[int]] = [[1], [2], [3, 3, 3, 3], [2, 1], [1], [2]]
QUESTIONS = [f"Question {n}: what do the records say about subject {n}?" for n in range(1, 7)]
MODEL = "scripted-model"


KEEP_EVERY_TURNS_TOOLS = 100
"""A keep_tool_context_turns above the session's turn count: nothing is collapsed."""


def profiles() -> profile_pb2.Profiles:
    """The budget bounds the history; the model's window (larger) bounds the whole request.

    The session is scripted to outgrow its budget so every adapter's trim shows: every turn keeps
    its tool context (K above the turn count, spec §13.1), else collapsing the old turns' lookups
    alone would fit it."""
    return profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(
            max_context_tokens=BUDGET_TOKENS,
            default_provider="scripted",
            default_model=MODEL,
            keep_tool_context_turns=KEEP_EVERY_TURNS_TOOLS,
        ),
        providers=[
            profile_pb2.ProviderProfile(alias="scripted", model=MODEL, context_window=16_000)
        ],
    )


def lookup_result(query: str) -> str:
    """What the lookup tool returns: a record long enough that a few turns overflow the budget."""
    return f"Records for {query}: " + "the archive lists dates, names and figures; " * 6


def call_id(turn: int, step: int, index: int) -> str:
    return f"call_t{turn}_s{step}_{index}"


def plan(turn: int, steps_done: int) -> list[tuple[str, str]] | None:
    """The (call id, query) pairs of the next step of turn `turn` (1-based), or None to answer."""
    steps = TURN_STEPS[turn - 1]
    if steps_done >= len(steps):
        return None
    return [
        (call_id(turn, steps_done, k), f"subject {turn} part {steps_done}.{k}")
        for k in range(steps[steps_done])
    ]


def turn_of(question: str) -> int:
    """The turn a user message asks (1-based), from its text."""
    return int(question.split(":", 1)[0].removeprefix("Question "))


def answer(turn: int) -> str:
    return f"Answer {turn}: the records agree."


@dataclass
class Recorder:
    """Every request the scripted model received, as the framework handed it over."""

    requests: list[object] = field(default_factory=list)
    reported_tokens: list[int] = field(default_factory=list)


def steps_done(turn: int, calls_seen: int) -> int:
    """How many steps of turn `turn` the calls seen since its question complete."""
    done, total = 0, 0
    for count in TURN_STEPS[turn - 1]:
        if total + count > calls_seen:
            break
        total += count
        done += 1
    return done
