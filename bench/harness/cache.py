"""The prompt-cache model of bench/bench_cache.py (issue 16): the billing models (a prefix cache, and
explicit cache breakpoints as spec §14 describes them), the seeded session generators and the
session simulators, apart from any server (tests/unit/test_bench_cache.py tests them)."""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from turnkeeper.core.rows import RowKind, classify_chat, price, rows_of
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
KEEP_ALL = 1_000_000
"""K larger than any session's turns: the projection collapses nothing (spec §13.1)."""
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
    """One row as the provider sees it: a digest of its exact bytes (what the cache matches) and
    its tokens."""

    key: bytes
    tokens: int


@dataclass(frozen=True)
class Bill:
    cached_tokens: int
    written_tokens: int
    cost: float
    """In plain-input-token units: cached x read + written x write (+ plain x 1)."""
    plain_tokens: int = 0
    """Tokens after the last cache breakpoint: neither read nor written, billed at the input price."""

    @property
    def input_tokens(self) -> int:
        return self.cached_tokens + self.written_tokens + self.plain_tokens


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


# ---- explicit cache breakpoints (spec §14) -------------------------------------------------------

LOOKBACK = 20
"""How many rows before a breakpoint the provider looks back for a prefix it cached."""
MARKINGS = ("system+last", "returned")
"""Where the runtime puts its breakpoints: on the last system row and the last row (a runtime that
knows nothing of the cut), or at the `cache_breakpoints` the preparation returned."""


def prefix_keys(rows: Sequence[RequestRow]) -> list[bytes]:
    """The identity of each prefix: entry i stands for rows 0..i, byte for byte."""
    keys: list[bytes] = []
    chained = b""
    for row in rows:
        chained = hashlib.blake2b(chained + row.key, digest_size=16).digest()
        keys.append(chained)
    return keys


def system_and_last(messages: Sequence[h.ChatMessage]) -> list[int]:
    """The marks of a runtime that knows nothing of the cut: its last leading system row, and its
    last row."""
    system = 0
    while system < len(messages) and messages[system].role == h.ROLE_SYSTEM:
        system += 1
    return sorted({system - 1, len(messages) - 1} - {-1})


@dataclass
class BreakpointCache:
    """One session's explicitly marked cache (Anthropic's `cache_control`): each request writes
    the prefix through each of its marks; a mark reads the longest prefix cached at it or at most
    `LOOKBACK` rows before it. The rows from the read prefix to the last mark are written, the rows
    after the last mark are billed plainly. Entries never expire within a session."""

    pricing: Pricing = ANTHROPIC
    written: set[bytes] = field(default_factory=set)

    def bill(self, rows: Sequence[RequestRow], marks: Sequence[int]) -> Bill:
        keys = prefix_keys(rows)
        kept = sorted({m for m in marks if 0 <= m < len(rows)})
        read_through = -1
        for mark in kept:
            for j in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                if keys[j] in self.written:
                    read_through = max(read_through, j)
                    break
        last = kept[-1] if kept else -1
        cached = sum(row.tokens for row in rows[: read_through + 1])
        written = sum(row.tokens for row in rows[read_through + 1 : last + 1])
        plain = sum(row.tokens for row in rows[last + 1 :])
        self.written.update(keys[m] for m in kept)
        cost = cached * self.pricing.read + written * self.pricing.write + plain
        return Bill(cached, written, cost, plain)


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


def tool_context_result_size(rng: random.Random) -> int:
    """The tool-context sessions' results: a few hundred to several thousand tokens (four
    characters a token)."""
    return 4 * rng.randint(300, 5_000)


def single_turn_result_size(rng: random.Random) -> int:
    """The single-turn case's results: 500-3,000 tokens."""
    return 4 * rng.randint(500, 3_000)


def generate_session(
    seed: int,
    calls: int,
    shape: str = "long",
    sizes: Callable[[random.Random], int] = result_size,
) -> Session:
    """A seeded tool-heavy session of exactly `calls` model calls (the last turn may be cut short):
    each turn is a user row, a number of tool rounds drawn from `SHAPES[shape]` (an assistant row
    with 1-3 tool calls, answered by their results in order, each of `sizes` characters), and a
    closing assistant reply."""
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
                h.ChatMessage(role=h.ROLE_TOOL, tool_call_id=c.id, content=text(rng, sizes(rng)))
                for c in tool_calls
            )
        reply = h.ChatMessage(role=h.ROLE_ASSISTANT, content=text(rng, rng.randint(200, 1_500)))
        out.append(Call(before, reply))
    return Session(system, tuple(out[:calls]))


# ---- the simulation ------------------------------------------------------------------------------


def user_turns(messages: Sequence[h.ChatMessage]) -> int:
    """The real user rows of a request: the user turns it holds (spec §0); the summary row of
    spec §15.2 is a user row but no turn."""
    return sum(classify_chat(m) is RowKind.USER and not m.summary for m in messages)


def first_user_row(session: Session) -> h.ChatMessage:
    return session.calls[0].before[0]


def request_rows(messages: Sequence[h.ChatMessage]) -> list[RequestRow]:
    """The prepared rows as billed: exact bytes, tokens as the sidecar's estimate (spec §9)."""
    history = h.History(chat=h.ChatHistory(messages=messages))
    tokens = price(rows_of(history)).tokens
    return [
        RequestRow(hashlib.blake2b(m.SerializeToString(deterministic=True)).digest(), t)
        for m, t in zip(messages, tokens, strict=True)
    ]


def profiles(low_water: float) -> profile_pb2.Profiles:
    """The grid runs' profiles: the cut alone, so tool context is never collapsed (spec §13.1's
    default would collapse it)."""
    return profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(
            max_context_tokens=BUDGET,
            history_trim_low_water=low_water,
            keep_tool_context_turns=KEEP_ALL,
            default_provider="provider",
        ),
        providers=[profile_pb2.ProviderProfile(alias="provider", context_window=WINDOW)],
    )


Prepare = Callable[[svc.PrepareModelCallRequest], svc.PrepareModelCallResponse]


@dataclass(frozen=True)
class Coverage:
    """What one request holds of its session (spec §15): the user turns it represents and whether
    its first turn is in it, against the turns the session has had so far."""

    represented_turns: int
    """User turns in the request, and the turns its summary row stands for."""
    session_turns: int
    first_turn: bool
    over_window: bool
    """Its estimate (with the reserved output of a summary request) exceeds the window."""


def coverage(
    messages: Sequence[h.ChatMessage],
    session_turns: int,
    summarized: int,
    first: h.ChatMessage,
    tokens: int,
) -> Coverage:
    """`summarized`: the turns the session's summary row stands for, when the request holds it."""
    has_summary = any(m.summary for m in messages)
    represented = user_turns(messages) + (summarized if has_summary else 0)
    first_kept = any(m.role == h.ROLE_USER and m.content == first.content for m in messages)
    return Coverage(represented, session_turns, first_kept, tokens > WINDOW)


@dataclass
class CallRecord:
    rows: list[RequestRow]
    used_tokens: int
    trimmed: bool
    moved: bool
    """The call trimmed and its request does not extend the previous one: the cut moved."""
    cut_step: int = 0
    """The grid step the sidecar reported for its token-budget trim (spec §11.2); 0: minimal."""
    coverage: Coverage | None = None
    """What the request holds of the session so far (spec §15)."""
    summary_request: bool = False
    """A compaction's summary request (spec §15.3), not a model call of the session."""


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
        turns = sum(user_turns(c.before) for c in session.calls[: i + 1])
        held = coverage(prepared, turns, 0, first_user_row(session), sum(r.tokens for r in rows))
        run.records.append(
            CallRecord(
                rows,
                response.context_meter.used_tokens,
                trimmed,
                trimmed and not extends,
                step,
                held,
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
            if record.summary_request:
                previous = record.rows  # billed above; no model call of the session
                continue
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


# ---- compaction (spec §15) -----------------------------------------------------------------------

COMPACT = "compact"
"""The runtime style that condenses instead of dropping: it pins its first turn, asks
PlanCompaction whenever the preparation cuts, sends the summary request, applies the plan with the
summarizer's answer and prepares again; it keeps its own (compacted) history."""
SUMMARY_CHARACTERS = 4_000
"""The scripted summarizer's answer: a fixed-size text (about a thousand tokens)."""
COMPACTION_LOW_WATERS = (0.9, 0.7, 0.5)
"""The grid's steps the compaction targets are read at (spec §11: a cut of several turns)."""
# The targets the compaction figures are read against: printed, never a failure.
TARGET_COMPACTION_COST = 1.2
"""Compaction's input cost, summary requests included, against dropping at the same step."""

Plan = Callable[[svc.PlanCompactionRequest], svc.PlanCompactionResponse]
ApplyPlan = Callable[[h.History, svc.CompactionPlan, str], h.History]
"""The client's apply function (`turnkeeper_client.apply_compaction`): the history the plan was
made for, the plan and the summarizer's answer in, the compacted history out (spec §15.3
step 4)."""


def pinned(message: h.ChatMessage) -> h.ChatMessage:
    out = h.ChatMessage()
    out.CopyFrom(message)
    out.pinned = True
    return out


def summarizer_answer(seed: int, compaction: int) -> str:
    """The scripted summarizer: a fixed-size text, different for every compaction (a summary
    replaces the previous one, so the cache cannot serve it)."""
    return text(random.Random(f"summary-{seed}-{compaction}"), SUMMARY_CHARACTERS)


def cut_turns(response: svc.PrepareModelCallResponse) -> bool:
    """Whether the preparation's trims dropped a turn (a clearing alone drops none)."""
    return any(t.dropped_turns > 0 for t in response.trims)


def simulate_compaction(
    prepare: Prepare,
    plan: Plan,
    apply_plan: ApplyPlan,
    session: Session,
    low_water: float,
    session_id: str,
    seed: int,
) -> Run:
    """Plays `session` as the `compact` runtime: every request it sends (the model's calls and
    the summary requests, in order) is recorded, so the bill includes the summaries."""
    run = Run(COMPACT, low_water)
    history: list[h.ChatMessage] = [session.system]
    chosen = profiles(low_water)
    first = pinned(first_user_row(session))
    summarized = turns = compactions = 0
    previous: list[RequestRow] = []

    def record(
        messages: Sequence[h.ChatMessage], tokens: int, trimmed: bool, step: int, summary: bool
    ) -> None:
        nonlocal previous
        rows = request_rows(messages)
        held = coverage(messages, turns, summarized, first, tokens)
        moved = trimmed and shared_prefix(previous, rows) < len(previous)
        run.records.append(CallRecord(rows, tokens, trimmed, moved, step, held, summary))
        previous = rows

    for i, call in enumerate(session.calls):
        before = [first if i == 0 and k == 0 else m for k, m in enumerate(call.before)]
        history.extend(before)
        turns += user_turns(before)
        caller = trim_pb2.CallerContext(session_id=session_id, turn_id=str(i))
        request = svc.PrepareModelCallRequest(
            history=h.History(chat=h.ChatHistory(messages=history)), profiles=chosen, caller=caller
        )
        response = prepare(request)
        if cut_turns(response):
            planned = plan(
                svc.PlanCompactionRequest(history=request.history, profiles=chosen, caller=caller)
            )
            if planned.HasField("plan"):
                summary = planned.plan
                reserved = summary.summary_request_tokens + summary.summary_output_tokens
                record(summary.summary_request.chat.messages, reserved, False, 0, True)
                compactions += 1
                answer = summarizer_answer(seed, compactions)
                history = list(apply_plan(request.history, summary, answer).chat.messages)
                summarized = turns - user_turns(history)
                request.history.CopyFrom(h.History(chat=h.ChatHistory(messages=history)))
                response = prepare(request)
        step = max(
            (t.cut_step for t in response.trims if t.reason == trim_pb2.TRIM_REASON_TOKEN_BUDGET),
            default=0,
        )
        prepared = response.history.chat.messages
        record(prepared, response.context_meter.used_tokens, cut_turns(response), step, False)
        history.append(call.answer)
    return run


@dataclass(frozen=True)
class CoverageFigures:
    requests: int
    summary_requests: int
    represented: float
    """Mean share of the session's turns so far a request represents (kept or summarized)."""
    fully_represented: float
    """Share of the requests that represent every turn so far."""
    first_turn: float
    """Share of the requests that hold the session's first turn."""
    over_window: int


def coverage_figures(runs: Sequence[Run]) -> CoverageFigures:
    """The turns represented are read over the model calls (a summary request ends with the
    turns it condenses); the first turn and the window over every request."""
    records = [r for run in runs for r in run.records]
    every = [r.coverage for r in records if r.coverage is not None]
    calls = [r.coverage for r in records if r.coverage is not None and not r.summary_request]
    n = max(1, len(calls))
    return CoverageFigures(
        len(records),
        sum(r.summary_request for r in records),
        sum(c.represented_turns / max(1, c.session_turns) for c in calls) / n,
        sum(c.represented_turns >= c.session_turns for c in calls) / n,
        sum(c.first_turn for c in every) / max(1, len(every)),
        sum(c.over_window for c in every),
    )


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


# ---- tool context and cache breakpoints (spec §13, §14) ------------------------------------------

TOOL_BUDGETS = (100_000, 30_000)
TOOL_KEEPS = (KEEP_ALL, 0, 2, 4)
TOOL_LOW_WATERS = (1.0, 0.7)
MIN_CACHEABLE = 1_024
"""The provider's shortest cacheable prefix (Anthropic's, for most models)."""
SINGLE_TURN_CALLS = 100
SINGLE_TURN_BUDGET = 30_000
SINGLE_TURN_WINDOW = 32_000
SINGLE_TURN_KEEP = 3
# The targets the tool-context figures are read against: printed, never a failure.
TARGET_TOOL_BUDGET = 100_000
TARGET_TOOL_KEEP = 2
TARGET_TOOL_COST = 0.45
TARGET_USER_TURNS = 3.5
TARGET_RETURNED_VS_LAST = 0.65


def keep_label(keep: int) -> str:
    return "off" if keep >= KEEP_ALL else str(keep)


@dataclass(frozen=True)
class ToolSetting:
    """One configuration of the sidecar for the tool-context runs."""

    budget: int
    keep_tool_context: int
    low_water: float
    keep_running_results: int | None = None
    """R of spec §13.4; None keeps the running turn whole."""
    window: int = WINDOW
    style: str = "resend"
    """`resend` sends the whole history on every call; `keep` keeps the prepared history and
    appends to it (only for one running turn, where the preparation collapses nothing, so the
    prepared history is the runtime's own with its cleared results)."""

    def profiles(self) -> profile_pb2.Profiles:
        return profile_pb2.Profiles(
            runtime=profile_pb2.RuntimeProfile(
                max_context_tokens=self.budget,
                history_trim_low_water=self.low_water,
                keep_tool_context_turns=self.keep_tool_context,
                keep_running_turn_tool_results=self.keep_running_results,
                default_provider="provider",
            ),
            providers=[
                profile_pb2.ProviderProfile(
                    alias="provider", context_window=self.window, min_cacheable_tokens=MIN_CACHEABLE
                )
            ],
        )


def generate_single_turn(seed: int, tool_calls: int = SINGLE_TURN_CALLS) -> Session:
    """One user turn of `tool_calls` model calls, each asking for one tool whose result (500-3,000
    tokens) the next call sends, and a closing reply after the last result."""
    rng = random.Random(seed)
    system = h.ChatMessage(role=h.ROLE_SYSTEM, content=text(rng, 6_000))
    before: tuple[h.ChatMessage, ...] = (
        h.ChatMessage(role=h.ROLE_USER, content=text(rng, rng.randint(200, 1_600))),
    )
    out: list[Call] = []
    for n in range(tool_calls):
        arguments = json.dumps({"query": text(rng, rng.randint(40, 240)), "n": n})
        call = h.ToolCall(id=f"call_{n}", name="search", arguments=arguments)
        answer = h.ChatMessage(
            role=h.ROLE_ASSISTANT, content=text(rng, rng.randint(0, 200)), tool_calls=[call]
        )
        out.append(Call(before, answer))
        before = (
            h.ChatMessage(
                role=h.ROLE_TOOL,
                tool_call_id=call.id,
                content=text(rng, single_turn_result_size(rng)),
            ),
        )
    reply = h.ChatMessage(role=h.ROLE_ASSISTANT, content=text(rng, rng.randint(200, 1_500)))
    out.append(Call(before, reply))
    return Session(system, tuple(out))


@dataclass
class ToolCallRecord:
    """One prepared call of a tool-context run; `rows` is empty when the pre-flight refused it."""

    rows: list[RequestRow]
    returned_marks: list[int]
    last_marks: list[int]
    user_turns: int
    collapsed_turns: int = 0
    results_cleared: int = 0

    @property
    def failed(self) -> bool:
        return not self.rows

    @property
    def tokens(self) -> int:
        return sum(row.tokens for row in self.rows)


@dataclass
class ToolRun:
    setting: ToolSetting
    records: list[ToolCallRecord] = field(default_factory=list)


def simulate_tools(
    prepare: Prepare,
    session: Session,
    setting: ToolSetting,
    session_id: str,
    is_refusal: Callable[[Exception], bool],
) -> ToolRun:
    """Plays `session` through `prepare` as a runtime of `setting.style`. A call the pre-flight
    refuses (`is_refusal`) is recorded without rows, and the session goes on as if the model had
    answered, so the refusals of a growing turn are all counted."""
    if setting.style not in STYLES:
        raise ValueError(f"unknown runtime style {setting.style!r}")
    run = ToolRun(setting)
    history: list[h.ChatMessage] = [session.system]
    chosen = setting.profiles()
    for i, call in enumerate(session.calls):
        history.extend(call.before)
        request = svc.PrepareModelCallRequest(
            history=h.History(chat=h.ChatHistory(messages=history)),
            profiles=chosen,
            caller=trim_pb2.CallerContext(session_id=session_id, turn_id=str(i)),
        )
        try:
            response = prepare(request)
        except Exception as error:
            if not is_refusal(error):
                raise
            run.records.append(ToolCallRecord([], [], [], 0))
        else:
            prepared = list(response.history.chat.messages)
            run.records.append(
                ToolCallRecord(
                    request_rows(prepared),
                    list(response.cache_breakpoints),
                    system_and_last(prepared),
                    user_turns(prepared),
                    response.collapse.collapsed_turns,
                    response.clearing.results_cleared,
                )
            )
            if setting.style == "keep":
                history = prepared
        history.append(call.answer)
    return run


@dataclass(frozen=True)
class ToolFigures:
    prefix_cost: float
    """The prefix-cache bill (Anthropic's ratios) of the prepared requests."""
    last_marks_cost: float
    """The explicit-breakpoint bill with marks on the system row and the last row."""
    returned_marks_cost: float
    """The explicit-breakpoint bill with marks at the returned `cache_breakpoints`."""
    user_turns: float
    """Mean user turns per prepared request."""
    tokens_sent: float
    """Mean estimated tokens per prepared request."""
    collapsed_turns: float
    """Mean turns collapsed per prepared request, as the sidecar reported."""
    calls: int
    over_budget: int
    """Prepared requests above the budget."""
    refused: int
    """Calls the pre-flight refused."""
    clearing_calls: int
    """Prepared calls that cleared tool results."""
    rewrites: int
    """Prepared requests that do not extend the one before (a cut moved, a turn collapsed, a
    result was cleared): a prefix cache serves only the rows before the change."""
    results_cleared: float
    """Mean results cleared per prepared request."""


def tool_figures(runs: Sequence[ToolRun]) -> ToolFigures:
    prefix = last = returned = 0.0
    turns = tokens = collapsed = 0
    calls = prepared = over = refused = clearing = rewrites = cleared = 0
    for run in runs:
        previous: list[RequestRow] = []
        last_cache = BreakpointCache(ANTHROPIC)
        returned_cache = BreakpointCache(ANTHROPIC)
        for record in run.records:
            calls += 1
            if record.failed:
                refused += 1
                continue
            prepared += 1
            prefix += bill(previous, record.rows, ANTHROPIC).cost
            last += last_cache.bill(record.rows, record.last_marks).cost
            returned += returned_cache.bill(record.rows, record.returned_marks).cost
            turns += record.user_turns
            tokens += record.tokens
            collapsed += record.collapsed_turns
            over += record.tokens > run.setting.budget
            clearing += record.results_cleared > 0
            rewrites += shared_prefix(previous, record.rows) < len(previous)
            cleared += record.results_cleared
            previous = record.rows
    n = max(1, prepared)
    return ToolFigures(
        prefix,
        last,
        returned,
        turns / n,
        tokens / n,
        collapsed / n,
        calls,
        over,
        refused,
        clearing,
        rewrites,
        cleared / n,
    )
