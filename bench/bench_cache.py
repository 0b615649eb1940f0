"""Issue 16: what the low-water grid cut (spec §11) saves on a provider prompt cache.

A session simulator drives the real sidecar (default flags) with `PrepareModelCall` and profiles:
seeded tool-heavy sessions of several hundred model calls (a user row starts each turn; every call
of the tool loop is one PrepareModelCall; tool results range from a hundred characters to tens of
thousands), of two shapes: short turns (0-3 tool rounds per user turn, 2.3 calls a turn) and long
ones (0-8 rounds, 4.6 calls a turn). The minimal cut moves about once per turn at the budget, so
the shape decides how much a grid can save. Two runtime styles:

- `resend`: the runtime keeps its whole history and sends it on every call (the prepared history
  goes to the provider, the runtime's own copy keeps growing);
- `keep`: the runtime keeps what the trim returned (breadcrumb included) and appends to that.

Each prepared request is billed by a provider prefix-cache model: the longest run of leading rows
that are byte-identical to the previous request's is billed at the cache-read ratio, the rest at the
cache-write ratio (Anthropic 0.1x / 1.25x, OpenAI 0.5x / 1.0x of the input price). Printed per
style and low water: the input cost relative to the minimal cut (L = 1.0), the cache-hit share of
input tokens, the mean context as a share of the budget once the session reached it, and how often
the cut moved.

The grid also plays the `compact` runtime style on the same sessions (spec §15): it pins its first
turn and, whenever the preparation cuts, asks `PlanCompaction`, sends the summary request (billed
like any request, its prefix cached), applies the plan with a fixed-size answer (about 1,000
tokens) and prepares again. Printed beside dropping at the same low water: the input cost with the
summary requests, the user turns each model call represents (kept or summarized), whether the
first turn is in every request and how many requests would have exceeded the window.

`--part tools` (spec §13, §14) plays tool-heavy sessions (0-8 tool rounds per user turn, results of
300-5,000 tokens) through a resending runtime at budgets of 100,000 and 30,000 tokens, with
`keep_tool_context_turns` K off (larger than any session), 0, 2 and 4, at low water 1.0 and 0.7,
and bills each prepared request twice: by the prefix cache above, and by explicit cache breakpoints
(a write at each mark, a read of a prefix cached at a mark or up to 20 rows before it, 0.1x read,
1.25x write, the rows after the last mark 1x), the runtime marking either its system row and last
row or the `cache_breakpoints` the preparation returned. Costs are against the minimal cut without
collapse (K off, L = 1.0, system and last row marked). `--part single` plays one user turn of 100
tool calls (results of 500-3,000 tokens) at a budget of 30,000 with and without
`keep_running_turn_tool_results` = 3. Figures only, never pass/fail. `--quick` (or
`BENCH_QUICK=1`) runs short sessions.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator, Sequence

import grpc
from harness import PREPARE, SERVICE_DIR, turnkeeper_server
from harness.cache import (
    ANTHROPIC,
    BUDGET,
    COMPACT,
    COMPACTION_LOW_WATERS,
    KEEP_ALL,
    LOW_WATERS,
    OPENAI,
    SHAPES,
    SINGLE_TURN_BUDGET,
    SINGLE_TURN_KEEP,
    SINGLE_TURN_WINDOW,
    STYLES,
    TARGET_COMPACTION_COST,
    TARGET_CONTEXT,
    TARGET_COST,
    TARGET_LOW_WATER,
    TARGET_RETURNED_VS_LAST,
    TARGET_TOOL_BUDGET,
    TARGET_TOOL_COST,
    TARGET_TOOL_KEEP,
    TARGET_USER_TURNS,
    TOOL_BUDGETS,
    TOOL_KEEPS,
    TOOL_LOW_WATERS,
    WINDOW,
    Plan,
    Prepare,
    Pricing,
    Run,
    Session,
    ToolFigures,
    ToolSetting,
    coverage_figures,
    figures,
    generate_session,
    generate_single_turn,
    keep_label,
    parse_pricing,
    simulate,
    simulate_compaction,
    simulate_tools,
    tool_context_result_size,
    tool_figures,
)
from turnkeeper.server.contract.methods import method_path
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper_client import apply_compaction


def table(runs: dict[tuple[str, float], list[Run]], pricing: Pricing, shape: str) -> Iterator[str]:
    yield (
        f"== {shape} turns, {pricing.name} billing (cache read {pricing.read}x, "
        f"write {pricing.write}x), budget {BUDGET:,}"
    )
    yield (
        f"{'style':<7} {'low water':>9} {'input cost':>11} {'cache hits':>11} "
        f"{'mean context':>13} {'cut moves':>10} {'step':>7}"
    )
    yield (
        f"{'':<7} {'':>9} {'vs L=1.0':>11} {'of input':>11} {'of budget':>13} "
        f"{'/100 calls':>10} {'tokens':>7}"
    )
    for style in STYLES:
        base = figures(runs[(style, 1.0)], pricing).cost
        for low_water in LOW_WATERS:
            f = figures(runs[(style, low_water)], pricing)
            yield (
                f"{style:<7} {low_water:>9.1f} {f.cost / base:>10.2f}x {f.hit_share:>10.1%} "
                f"{f.mean_context:>12.1%} {f.moves_per_100:>10.1f} {f.step:>7,}"
            )
    if pricing != ANTHROPIC:
        return  # issue 16's targets were set on Anthropic's ratios
    for style in STYLES:
        base = figures(runs[(style, 1.0)], pricing).cost
        f = figures(runs[(style, TARGET_LOW_WATER)], pricing)
        ratio = f.cost / base
        met = ratio <= TARGET_COST and f.mean_context >= TARGET_CONTEXT
        yield (
            f"issue 16 target, {style}, L={TARGET_LOW_WATER}: cost <= {TARGET_COST:.2f}x with "
            f"mean context >= {TARGET_CONTEXT:.0%}: {ratio:.3f}x, {f.mean_context:.1%} "
            f"({'met' if met else 'not met'})"
        )


def compaction_table(
    runs: dict[tuple[str, float], list[Run]], pricing: Pricing, shape: str
) -> Iterator[str]:
    """Spec §15: the compact style beside dropping, at each low water."""
    yield (
        f"== compaction beside dropping (spec §15), {shape} turns, {pricing.name} billing, "
        f"budget {BUDGET:,}, window {WINDOW:,}"
    )
    yield (
        f"{'style':<7} {'low water':>9} {'input cost':>11} {'vs keep':>8} {'vs resend':>9} "
        f"{'turns held':>10} {'all turns':>10} {'first turn':>10} {'over':>6} {'summary':>8}"
    )
    yield (
        f"{'':<7} {'':>9} {'vs keep L=1':>11} {'same L':>8} {'same L':>9} {'of session':>10} "
        f"{'held':>10} {'held':>10} {'window':>6} {'requests':>8}"
    )
    base = figures(runs[("keep", 1.0)], pricing).cost
    for low_water in LOW_WATERS:
        for style in (*STYLES, COMPACT):
            cost = figures(runs[(style, low_water)], pricing).cost
            keep = figures(runs[("keep", low_water)], pricing).cost
            resend = figures(runs[("resend", low_water)], pricing).cost
            c = coverage_figures(runs[(style, low_water)])
            yield (
                f"{style:<7} {low_water:>9.1f} {cost / base:>10.2f}x {cost / keep:>7.2f}x "
                f"{cost / resend:>8.2f}x {c.represented:>10.1%} {c.fully_represented:>10.1%} "
                f"{c.first_turn:>10.1%} {c.over_window:>6} {c.summary_requests:>8}"
            )
    if pricing != ANTHROPIC:
        return
    over = sum(coverage_figures(r).over_window for r in runs.values())
    yield f"target: 0 requests over the window: {over} ({'met' if over == 0 else 'not met'})"
    for low_water in COMPACTION_LOW_WATERS:
        compact = runs[(COMPACT, low_water)]
        ratio = figures(compact, pricing).cost / figures(runs[("keep", low_water)], pricing).cost
        held = coverage_figures(compact).fully_represented
        met = ratio <= TARGET_COMPACTION_COST and held == 1.0
        yield (
            f"target, L={low_water}: compaction within {TARGET_COMPACTION_COST}x of dropping "
            f"(keep) with every turn represented: {ratio:.3f}x, {held:.1%} of calls hold every "
            f"turn ({'met' if met else 'not met'})"
        )
    first = min(coverage_figures(runs[(COMPACT, lw)]).first_turn for lw in LOW_WATERS)
    yield (
        f"target: the pinned first turn in 100% of the compact style's requests: {first:.1%} "
        f"({'met' if first == 1.0 else 'not met'})"
    )


def is_refusal(error: Exception) -> bool:
    """The pre-flight's refusal of a request that cannot fit (spec §3)."""
    return isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.FAILED_PRECONDITION


ToolRuns = dict[ToolSetting, ToolFigures]


def tool_table(runs: ToolRuns, budget: int) -> Iterator[str]:
    base = runs[ToolSetting(budget, KEEP_ALL, 1.0)]
    yield (
        f"== tool context and cache breakpoints, budget {budget:,}: costs against the minimal cut "
        "without collapse (K off, L = 1.0, system and last row marked)"
    )
    yield (
        f"{'K':>3} {'low water':>9} {'prefix cache':>12} {'marks: system+last':>18} "
        f"{'returned':>9} {'returned/last':>13} {'user turns':>14} {'tokens sent':>11} "
        f"{'collapsed':>9} {'over budget':>11}"
    )
    for keep in TOOL_KEEPS:
        for low_water in TOOL_LOW_WATERS:
            f = runs[ToolSetting(budget, keep, low_water)]
            held = f"{f.user_turns:.1f} ({f.user_turns / max(base.user_turns, 1e-9):.1f}x)"
            yield (
                f"{keep_label(keep):>3} {low_water:>9.1f} "
                f"{f.prefix_cost / base.prefix_cost:>11.2f}x "
                f"{f.last_marks_cost / base.last_marks_cost:>17.2f}x "
                f"{f.returned_marks_cost / base.last_marks_cost:>8.2f}x "
                f"{f.returned_marks_cost / f.last_marks_cost:>12.2f}x {held:>14} "
                f"{f.tokens_sent:>11,.0f} {f.collapsed_turns:>9.1f} {f.over_budget:>11}"
            )
    if budget != TARGET_TOOL_BUDGET:
        return
    f = runs[ToolSetting(budget, TARGET_TOOL_KEEP, TARGET_LOW_WATER)]
    cost = f.returned_marks_cost / base.last_marks_cost
    turns = f.user_turns / max(base.user_turns, 1e-9)
    met = cost <= TARGET_TOOL_COST and turns >= TARGET_USER_TURNS
    yield (
        f"target, K={TARGET_TOOL_KEEP}, L={TARGET_LOW_WATER}, returned breakpoints, explicit-mark "
        f"billing: cost <= {TARGET_TOOL_COST:.2f}x with >= {TARGET_USER_TURNS}x the user turns: "
        f"{cost:.3f}x, {turns:.2f}x ({'met' if met else 'not met'})"
    )
    ratio = f.returned_marks_cost / f.last_marks_cost
    yield (
        f"target, returned breakpoints vs system+last row: <= {TARGET_RETURNED_VS_LAST:.2f}x: "
        f"{ratio:.3f}x ({'met' if ratio <= TARGET_RETURNED_VS_LAST else 'not met'})"
    )


def single_turn_table(runs: ToolRuns) -> Iterator[str]:
    yield (
        f"== one user turn of {next(iter(runs.values())).calls - 1} tool calls, budget "
        f"{SINGLE_TURN_BUDGET:,}, window {SINGLE_TURN_WINDOW:,}; cost in input-token units per call"
    )
    yield (
        f"{'style':<7} {'R':>5} {'low water':>9} {'over budget':>11} {'refused':>10} {'clearing':>10} "
        f"{'rewrites':>10} {'cleared':>11} {'tokens sent':>11} {'prefix cache':>12} "
        f"{'marks: system+last':>18} {'returned':>9}"
    )
    yield (
        f"{'':<7} {'':>5} {'':>9} {'prepared':>11} {'pre-flight':>10} {'/100 calls':>10} "
        f"{'/100 calls':>10} {'per request':>11}"
    )
    for setting, f in runs.items():
        per = 100 / max(1, f.calls)
        prepared = max(1, f.calls - f.refused)
        keep = "unset" if setting.keep_running_results is None else setting.keep_running_results
        yield (
            f"{setting.style:<7} {keep:>5} {setting.low_water:>9.1f} {f.over_budget:>11} {f.refused:>10} "
            f"{f.clearing_calls * per:>10.1f} {f.rewrites * per:>10.1f} "
            f"{f.results_cleared:>11.1f} {f.tokens_sent:>11,.0f} "
            f"{f.prefix_cost / prepared:>12,.0f} {f.last_marks_cost / prepared:>18,.0f} "
            f"{f.returned_marks_cost / prepared:>9,.0f}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", default=os.environ.get("BENCH_QUICK") == "1"
    )
    parser.add_argument("--sessions", type=int, help="seeded sessions per style and setting")
    parser.add_argument("--calls", type=int, help="model calls per session")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--shape", choices=[*SHAPES, "both"], default="both")
    parser.add_argument(
        "--pricing",
        type=parse_pricing,
        action="append",
        help="anthropic, openai, or name=read,write (repeatable; default: anthropic and openai)",
    )
    parser.add_argument(
        "--part",
        choices=("grid", "tools", "single", "all"),
        default="all",
        help="grid: the low-water cut (spec §11); tools: tool context and cache breakpoints "
        "(spec §13, §14); single: one long running turn (spec §13.4)",
    )
    parser.add_argument("--tool-calls", type=int, help="model calls per tool-context session")
    parser.add_argument("--engine", choices=("native", "python"), help="the sidecar's engine")
    args = parser.parse_args(argv)
    flags = ("--engine", args.engine) if args.engine else ()
    # The sidecar imports this checkout's service first, then whatever this shell's path adds
    # (a checkout's regenerated turnkeeper.v1 before the installed one).
    path = os.pathsep.join(p for p in (str(SERVICE_DIR), os.environ.get("PYTHONPATH", "")) if p)
    server = turnkeeper_server("turnkeeper", *flags, env={"PYTHONPATH": path})
    try:
        prepare: Prepare = server.channel.unary_unary(
            PREPARE,
            request_serializer=svc.PrepareModelCallRequest.SerializeToString,
            response_deserializer=svc.PrepareModelCallResponse.FromString,
        )
        plan: Plan = server.channel.unary_unary(
            method_path("PlanCompaction"),
            request_serializer=svc.PlanCompactionRequest.SerializeToString,
            response_deserializer=svc.PlanCompactionResponse.FromString,
        )
        if args.part in ("grid", "all"):
            grid(prepare, plan, args)
        if args.part in ("tools", "all"):
            tools(prepare, args)
        if args.part in ("single", "all"):
            single(prepare, args)
    except grpc.RpcError as error:
        raise SystemExit(f"PrepareModelCall failed: {error}") from None
    finally:
        server.stop()


def grid(prepare: Prepare, plan: Plan, args: argparse.Namespace) -> None:
    """Issue 16's tables: the low-water cut on a prefix cache; spec §15's compaction beside it."""
    sessions = args.sessions or (1 if args.quick else 2)
    calls = args.calls or (150 if args.quick else 400)
    pricings: list[Pricing] = args.pricing or [ANTHROPIC, OPENAI]
    shapes = list(SHAPES) if args.shape == "both" else [args.shape]
    generated = {
        shape: [generate_session(args.seed + k, calls, shape) for k in range(sessions)]
        for shape in shapes
    }
    start = time.perf_counter()
    runs: dict[str, dict[tuple[str, float], list[Run]]] = {}
    for shape in shapes:
        runs[shape] = {
            (style, low_water): [
                simulate(prepare, s, style, low_water, f"{shape}-{style}-{low_water}-{k}")
                for k, s in enumerate(generated[shape])
            ]
            for style in STYLES
            for low_water in LOW_WATERS
        }
        for low_water in LOW_WATERS:
            runs[shape][(COMPACT, low_water)] = [
                simulate_compaction(
                    prepare,
                    plan,
                    apply_compaction,
                    s,
                    low_water,
                    f"{shape}-{COMPACT}-{low_water}-{k}",
                    args.seed + k,
                )
                for k, s in enumerate(generated[shape])
            ]
    elapsed = time.perf_counter() - start
    settings = (len(STYLES) + 1) * len(LOW_WATERS)
    print(
        f"== cache-stable trimming (spec §11) and compaction (spec §15): {sessions} seeded "
        f"session(s) of {calls} calls per shape, {len(STYLES) + 1} styles x {len(LOW_WATERS)} "
        f"settings, {len(shapes) * sessions * calls * settings} model calls in {elapsed:.0f} s"
    )
    print(
        "input cost: the session's input bill against the minimal cut's; cache hits: input "
        "tokens read from the cache; mean context: prepared tokens / budget from the first trim "
        "on; cut moves: calls whose trim moved the cut; step: the grid step the sidecar reported"
    )
    for shape in shapes:
        for pricing in pricings:
            print()
            for line in table(runs[shape], pricing, shape):
                print(line)
            print()
            for line in compaction_table(runs[shape], pricing, shape):
                print(line)


def play(prepare: Prepare, sessions: Sequence[Session], setting: ToolSetting) -> ToolFigures:
    name = f"{setting.budget}-{setting.keep_tool_context}-{setting.low_water}"
    return tool_figures(
        [
            simulate_tools(prepare, s, setting, f"{name}-{k}", is_refusal)
            for k, s in enumerate(sessions)
        ]
    )


def tools(prepare: Prepare, args: argparse.Namespace) -> None:
    """Spec §13 and §14: tool context collapsed, cut and cache-marked."""
    count = args.sessions or (1 if args.quick else 2)
    calls = args.tool_calls or (120 if args.quick else 300)
    sessions = [
        generate_session(args.seed + k, calls, "long", tool_context_result_size)
        for k in range(count)
    ]
    start = time.perf_counter()
    runs: ToolRuns = {}
    for budget in TOOL_BUDGETS:
        for keep in TOOL_KEEPS:
            for low_water in TOOL_LOW_WATERS:
                setting = ToolSetting(budget, keep, low_water)
                runs[setting] = play(prepare, sessions, setting)
    elapsed = time.perf_counter() - start
    print()
    print(
        f"== tool context (spec §13) and cache breakpoints (spec §14): {count} seeded session(s) "
        f"of {calls} calls (0-8 tool rounds per user turn, results of 300-5,000 tokens), a "
        f"resending runtime, {len(runs) * count * calls} PrepareModelCalls in {elapsed:.0f} s"
    )
    print(
        "prefix cache: the longest row-identical prefix with the previous request read at 0.1x, "
        "the rest 1.25x; marks: explicit breakpoints (write at each mark, read a prefix cached "
        "at a mark or up to 20 rows before one at 0.1x, write 1.25x, after the last mark 1x); "
        "user turns and tokens sent: per prepared request; collapsed: turns collapsed per request"
    )
    for budget in TOOL_BUDGETS:
        print()
        for line in tool_table(runs, budget):
            print(line)


def single(prepare: Prepare, args: argparse.Namespace) -> None:
    """Spec §13.4: a running turn that alone exceeds the budget."""
    sessions = [generate_single_turn(args.seed + k) for k in range(args.sessions or 1)]
    settings = [
        ToolSetting(SINGLE_TURN_BUDGET, 2, low_water, keep, SINGLE_TURN_WINDOW, style)
        for style in STYLES
        for keep in (None, SINGLE_TURN_KEEP)
        for low_water in TOOL_LOW_WATERS
    ]
    start = time.perf_counter()
    runs: ToolRuns = {setting: play(prepare, sessions, setting) for setting in settings}
    elapsed = time.perf_counter() - start
    print()
    print(
        f"== a running turn alone over the budget (spec §13.4): {len(sessions)} session(s), "
        f"{len(settings)} settings, in {elapsed:.0f} s; over budget: prepared requests above "
        "the budget; refused: calls the pre-flight refused; clearing: calls whose "
        "preparation cleared tool results; rewrites: requests that do not extend the one before "
        "(a prefix cache serves only the rows before the change); cleared: results cleared in a "
        "request (a resending runtime's are cleared again on every call)"
    )
    for line in single_turn_table(runs):
        print(line)


if __name__ == "__main__":
    main()
