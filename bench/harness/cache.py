"""The prompt-cache model of bench/bench_cache.py (issue 16): the billing model, the seeded session
generator and the session simulator, apart from any server (tests/unit/test_bench_cache.py tests
them)."""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from turnkeeper.core.rows import price, rows_of
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2, trim_pb2

from harness import text as harness_text

LOW_WATERS = (1.0, 0.9, 0.8, 0.7, 0.5)
STYLES = ("resend", "keep")
# Tool rounds per user turn, drawn uniformly from these.
SHAPES = {"short": (0, 0, 1, 1, 1, 2, 2, 3), "long": (0, 1, 2, 3, 3, 4, 4, 5, 6, 8)}
BUDGET = 60_000
WINDOW = 200_000
# The targets the cache simulation is read against: printed beside the figures, never a failure.
TARGET_LOW_WATER = 0.7
TARGET_COST = 0.40
TARGET_CONTEXT = 0.70


# ---- the billing model ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Pricing:
    """A provider's prompt-cache price ratios, relative to its plain input price."""

    name: str
    read: float
    """What a token served from the cache costs."""
    write: float
    """What every other input token costs (Anthropic charges a premium for writing the cache)."""


ANTHROPIC = Pricing("anthropic", read=0.1, write=1.25)
OPENAI = Pricing("openai", read=0.5, write=1.0)
PRICINGS = {p.name: p for p in (ANTHROPIC, OPENAI)}


@dataclass(frozen=True)
class RequestRow:
    """One row as the provider sees it: its exact bytes (what the cache matches) and its tokens."""

    key: bytes
    tokens: int


@dataclass(frozen=True)
class Bill:
    cached_tokens: int
    written_tokens: int
    cost: float
    """In plain-input-token units: cached x read + written x write."""

    @property
    def input_tokens(self) -> int:
        return self.cached_tokens + self.written_tokens


def shared_prefix(previous: Sequence[RequestRow], current: Sequence[RequestRow]) -> int:
    """How many leading rows of `current` are byte-identical to `previous`'s, in order."""
    n = 0
    for old, new in zip(previous, current, strict=False):
        if old.key != new.key:
            break
        n += 1
    return n


def bill(previous: Sequence[RequestRow], current: Sequence[RequestRow], pricing: Pricing) -> Bill:
    """The prefix shared with the previous request is read from the cache; everything after the
    first differing row is written again, even rows that reappear further on."""
    shared = shared_prefix(previous, current)
    cached = sum(row.tokens for row in current[:shared])
    written = sum(row.tokens for row in current[shared:])
    return Bill(cached, written, cached * pricing.read + written * pricing.write)


# ---- the session generator -----------------------------------------------------------------------

_WORDS = ("alpha", "beta", "gamma", "delta", "tool", "result", "value", "ok", "the", "a", "file")


def text(rng: random.Random, size: int) -> str:
    return harness_text(rng, size, _WORDS)


def result_size(rng: random.Random) -> int:
    """Tool results of varied sizes: mostly short, some pages, a few large dumps."""
    roll = rng.random()
    if roll < 0.55:
        return rng.randint(100, 1_000)
    if roll < 0.90:
        return rng.randint(1_000, 8_000)
    return rng.randint(8_000, 24_000)


@dataclass(frozen=True)
class Call:
    """One model call of the tool loop: the rows the runtime appends before it (the user row, or
    the tool results of the previous call), and the model's answer it appends after it."""

    before: tuple[h.ChatMessage, ...]
    answer: h.ChatMessage


@dataclass(frozen=True)
class Session:
    system: h.ChatMessage
    calls: tuple[Call, ...]


def generate_session(seed: int, calls: int, shape: str = "long") -> Session:
    """A seeded tool-heavy session of exactly `calls` model calls (the last turn may be cut short):
    each turn is a user row, a number of tool rounds drawn from `SHAPES[shape]` (an assistant row
    with 1-3 tool calls, answered by their results in order), and a closing assistant reply."""
    rounds = SHAPES[shape]
    rng = random.Random(seed)
    system = h.ChatMessage(role=h.ROLE_SYSTEM, content=text(rng, 6_000))
    out: list[Call] = []
    n = 0
    while len(out) < calls:
        before: tuple[h.ChatMessage, ...] = (
            h.ChatMessage(role=h.ROLE_USER, content=text(rng, rng.randint(80, 1_600))),
        )
        for _ in range(rng.choice(rounds)):
            tool_calls = []
            for _ in range(rng.choices((1, 2, 3), weights=(7, 2, 1))[0]):
                arguments = json.dumps({"query": text(rng, rng.randint(40, 240)), "n": n})
                tool_calls.append(h.ToolCall(id=f"call_{n}", name="search", arguments=arguments))
                n += 1
            answer = h.ChatMessage(
                role=h.ROLE_ASSISTANT, content=text(rng, rng.randint(0, 200)), tool_calls=tool_calls
            )
            out.append(Call(before, answer))
            before = tuple(
                h.ChatMessage(
                    role=h.ROLE_TOOL, tool_call_id=c.id, content=text(rng, result_size(rng))
                )
                for c in tool_calls
            )
        reply = h.ChatMessage(role=h.ROLE_ASSISTANT, content=text(rng, rng.randint(200, 1_500)))
        out.append(Call(before, reply))
    return Session(system, tuple(out[:calls]))


# ---- the simulation ------------------------------------------------------------------------------


def request_rows(messages: Sequence[h.ChatMessage]) -> list[RequestRow]:
    """The prepared rows as billed: exact bytes, tokens as the sidecar's estimate (spec §9)."""
    history = h.History(chat=h.ChatHistory(messages=messages))
    tokens = price(rows_of(history)).tokens
    return [
        RequestRow(m.SerializeToString(deterministic=True), t)
        for m, t in zip(messages, tokens, strict=True)
    ]


def profiles(low_water: float) -> profile_pb2.Profiles:
    return profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(
            max_context_tokens=BUDGET,
            history_trim_low_water=low_water,
            default_provider="provider",
        ),
        providers=[profile_pb2.ProviderProfile(alias="provider", context_window=WINDOW)],
    )


Prepare = Callable[[svc.PrepareModelCallRequest], svc.PrepareModelCallResponse]


@dataclass
class CallRecord:
    rows: list[RequestRow]
    used_tokens: int
    trimmed: bool
    moved: bool
    """The call trimmed and its request does not extend the previous one: the cut moved."""
    cut_step: int = 0
    """The grid step the sidecar reported for its token-budget trim (spec §11.2); 0: minimal."""


@dataclass
class Run:
    style: str
    low_water: float
    records: list[CallRecord] = field(default_factory=list)


def simulate(
    prepare: Prepare, session: Session, style: str, low_water: float, session_id: str
) -> Run:
    """Plays `session` through `prepare` as a runtime of `style` would."""
    if style not in STYLES:
        raise ValueError(f"unknown runtime style {style!r}")
    run = Run(style, low_water)
    history: list[h.ChatMessage] = [session.system]
    chosen = profiles(low_water)
    previous: list[RequestRow] = []
    for i, call in enumerate(session.calls):
        history.extend(call.before)
        response = prepare(
            svc.PrepareModelCallRequest(
                history=h.History(chat=h.ChatHistory(messages=history)),
                profiles=chosen,
                caller=trim_pb2.CallerContext(session_id=session_id, turn_id=str(i)),
            )
        )
        prepared = list(response.history.chat.messages)
        rows = request_rows(prepared)
        trimmed = len(response.trims) > 0
        extends = shared_prefix(previous, rows) == len(previous)
        step = max(
            (t.cut_step for t in response.trims if t.reason == trim_pb2.TRIM_REASON_TOKEN_BUDGET),
            default=0,
        )
        run.records.append(
            CallRecord(
                rows, response.context_meter.used_tokens, trimmed, trimmed and not extends, step
            )
        )
        previous = rows
        if style == "keep":
            history = prepared
        history.append(call.answer)
    return run


@dataclass(frozen=True)
class Figures:
    cost: float
    hit_share: float
    mean_context: float
    """Mean prepared tokens / budget over the calls from the session's first trim on."""
    moves_per_100: float
    step: int
    """The largest token-budget grid step the sidecar reported: shows the setting took effect."""


def figures(runs: Sequence[Run], pricing: Pricing) -> Figures:
    cost = 0.0
    cached = total = 0
    context: list[float] = []
    calls = moves = step = 0
    for run in runs:
        previous: list[RequestRow] = []
        at_ceiling = False
        for record in run.records:
            b = bill(previous, record.rows, pricing)
            cost += b.cost
            cached += b.cached_tokens
            total += b.input_tokens
            at_ceiling = at_ceiling or record.trimmed
            if at_ceiling:
                context.append(record.used_tokens / BUDGET)
            calls += 1
            moves += record.moved
            step = max(step, record.cut_step)
            previous = record.rows
    mean = sum(context) / len(context) if context else 0.0
    hits = cached / total if total else 0.0
    return Figures(cost, hits, mean, 100 * moves / max(1, calls), step)


def parse_pricing(spec: str) -> Pricing:
    """`name` of a preset, or `name=read,write` for other ratios."""
    if "=" not in spec:
        if spec not in PRICINGS:
            raise argparse.ArgumentTypeError(f"unknown pricing {spec!r}: {', '.join(PRICINGS)}")
        return PRICINGS[spec]
    name, _, ratios = spec.partition("=")
    try:
        read, write = (float(x) for x in ratios.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected name=read,write, got {spec!r}") from None
    return Pricing(name, read, write)
