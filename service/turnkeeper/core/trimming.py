"""Whole-turn retention (spec §2, §5, §6, §9): plans over the row view, applied as index ranges.

A plan never re-estimates the kept suffix per candidate: the history is priced once and every
candidate cut is judged from running sums, so each operation is one O(n) pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import Protocol, TypeVar

from turnkeeper.core.rows import Pricing, Row, RowKind
from turnkeeper.core.saturation import saturate

T = TypeVar("T")

DEFAULT_BREADCRUMB_TEXT = "[earlier turns omitted to fit the context window]"
DEFAULT_TURN_LIMIT = 50
DEFAULT_ROW_LIMIT = 50
"""The channel sender cache's row cap when its limit is 0 or unset (§6, §9)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """The fixed prefix P and the turns of B (§9 Token-budget trim, §15.1)."""

    system_rows: int
    """The leading run of system rows."""
    head: int
    """The leading system rows plus the summary row of §15.2 when one follows them."""
    crumb: int | None
    """The index of the breadcrumb of the fixed prefix, if any (`fixed_prefix_breadcrumb`)."""
    prefix: int
    """len(P): one past that breadcrumb, else `head`."""
    boundaries: list[int]
    """Absolute indices of the turn boundaries in B, ascending."""
    pinned: list[bool]
    """Per turn of B: whether its boundary row is pinned (§15.1)."""
    rows: int
    """The number of rows of the history."""

    @property
    def has_breadcrumb(self) -> bool:
        return self.crumb is not None

    @property
    def turns(self) -> int:
        return len(self.boundaries)

    def turn_span(self, t: int) -> range:
        """The rows of turn `t` of B: rows of B before b0 belong to its first turn (§15.1)."""
        start = self.prefix if t == 0 else self.boundaries[t]
        stop = self.boundaries[t + 1] if t + 1 < len(self.boundaries) else self.rows
        return range(start, stop)


def fixed_prefix_breadcrumb(marks: Iterable[tuple[RowKind, bool]]) -> int | None:
    """Where the breadcrumb of the fixed prefix stands (§15.1), counted from the row after the
    leading system rows and the summary row (`marks` gives each row's kind and pin from there).

    It is the first breadcrumb when every row before it holds only whole pinned turns: either
    nothing stands before it, or at least one turn boundary does and every turn boundary before
    it is pinned (rows before the first of them belong to its turn). None when there is no such
    breadcrumb. Reads no further than the first breadcrumb or the first unpinned boundary.
    """
    seen_boundary = False
    for i, (kind, pinned) in enumerate(marks):
        if kind is RowKind.BREADCRUMB:
            return i if i == 0 or seen_boundary else None
        if kind is RowKind.USER:
            if not pinned:
                return None
            seen_boundary = True
    return None


def layout(rows: Sequence[Row]) -> Layout:
    system_rows = 0
    while system_rows < len(rows) and rows[system_rows].kind is RowKind.SYSTEM:
        system_rows += 1
    head = system_rows
    if head < len(rows) and rows[head].kind is RowKind.SUMMARY:
        head += 1
    offset = fixed_prefix_breadcrumb((row.kind, row.pinned) for row in islice(rows, head, None))
    crumb = None if offset is None else head + offset
    prefix = head if crumb is None else crumb + 1
    boundaries = [i for i in range(prefix, len(rows)) if rows[i].is_turn_boundary]
    pinned = [rows[b].pinned for b in boundaries]
    return Layout(system_rows, head, crumb, prefix, boundaries, pinned, len(rows))


@dataclass(frozen=True, slots=True)
class PinnedTurns:
    """The pinned turns of a history (§15.1), each a row range: those of the fixed prefix (the
    rows between `head` and its breadcrumb, split at their turn boundaries), then those of B."""

    spans: list[range]
    newest_pinned: bool
    """Whether the last span is the newest turn of the history."""


def pinned_turns(lay: Layout, rows: Sequence[Row]) -> PinnedTurns:
    spans: list[range] = []
    if lay.crumb is not None and lay.crumb > lay.head:
        starts = [i for i in range(lay.head, lay.crumb) if rows[i].is_turn_boundary]
        starts[0] = lay.head
        spans.extend(map(range, starts, [*starts[1:], lay.crumb]))
    spans.extend(lay.turn_span(t) for t in range(lay.turns) if lay.pinned[t])
    # With no turn in B, the newest turn of the history is the fixed prefix's last.
    return PinnedTurns(spans, lay.pinned[-1] if lay.turns else bool(spans))


def _span_cost(costs: Sequence[int], span: range) -> int:
    return sum(costs[span.start : span.stop])


def fixed_floor(rows: Sequence[Row], costs: Sequence[int]) -> int:
    """§15.1's fixed floor: the leading system rows, the summary row and every pinned turn but
    the newest turn of the history."""
    lay = layout(rows)
    pins = pinned_turns(lay, rows)
    spans = pins.spans[:-1] if pins.newest_pinned else pins.spans
    return sum(costs[: lay.head]) + sum(_span_cost(costs, span) for span in spans)


def pinned_tokens(rows: Sequence[Row], costs: Sequence[int]) -> int:
    """The estimate of the pinned turns of the history (§15.1)."""
    spans = pinned_turns(layout(rows), rows).spans
    return sum(_span_cost(costs, span) for span in spans)


def _prefix_turns(lay: Layout, rows: Sequence[Row]) -> int:
    """The (pinned) turns of the fixed prefix."""
    if lay.crumb is None:
        return 0
    return sum(1 for i in range(lay.head, lay.crumb) if rows[i].is_turn_boundary)


# Not frozen, though nothing changes one once built: a frozen dataclass's __init__ sets each field
# through object.__setattr__, a cost every trim would pay for each plan it builds. The other
# per-call records (the pre-flight's Extras, the RPCs' replies) are plain for the same reason.
@dataclass(slots=True)
class TrimPlan:
    """What a trim does, in input indices; `drop` is empty when the history is unchanged.

    The output is the rows before `drop`, then the pinned turns inside it (`kept_in_drop`, §15.1:
    they move ahead of the breadcrumb), then the breadcrumb when `breadcrumb_at` is set (the input
    breadcrumb at `breadcrumb_from`, moved, or else a new one), then the rows after `drop`."""

    drop: range
    """From the first row the trim removes to one past the last."""
    breadcrumb_at: int | None
    """Output index of a breadcrumb the trim writes (new, or moved from `breadcrumb_from`)."""
    dropped_turns: int
    kept_turns: int
    tokens_before: int
    tokens_after: int
    target_tokens: int
    cut_step: int = 0
    """The low-water grid step (§11.1): tokens or turns; 0 for the minimal cut of §9."""
    cut_drop_target: int = 0
    """The drop (tokens or turns) the grid rounded the minimal cut up to; 0 with the minimal cut."""
    kept_in_drop: tuple[range, ...] = ()
    """The pinned turns inside `drop` that are kept, ascending input row ranges (§15.1)."""
    breadcrumb_from: int | None = None
    """The input index of the breadcrumb written at `breadcrumb_at` when it is moved, not new."""
    pinned_turns: int = 0
    """The pinned turns in the output (§15.1)."""
    pinned_tokens: int = 0
    """Their estimate, in tokens."""

    @property
    def trimmed(self) -> bool:
        return self.dropped_messages > 0

    @property
    def dropped_messages(self) -> int:
        kept = sum(len(turn) for turn in self.kept_in_drop)
        return len(self.drop) - kept - (self.breadcrumb_from is not None)


@dataclass(frozen=True, slots=True)
class _Body:
    """A priced history as the turn trims see it: its layout, the estimate of each turn of B and
    of the turns a trim never drops, all from one pass."""

    lay: Layout
    total: int
    turn_costs: list[int]
    """The estimate of each turn of B (`Layout.turn_span`)."""
    prefix_turns: int
    pinned_turns: int
    pinned_tokens: int

    @classmethod
    def of(cls, rows: Sequence[Row], costs: Sequence[int]) -> _Body:
        lay = layout(rows)
        turn_costs = [_span_cost(costs, lay.turn_span(t)) for t in range(lay.turns)]
        spans = pinned_turns(lay, rows).spans
        pinned_tokens = sum(_span_cost(costs, span) for span in spans)
        return cls(lay, sum(costs), turn_costs, _prefix_turns(lay, rows), len(spans), pinned_tokens)

    @property
    def all_turns(self) -> int:
        return self.prefix_turns + self.lay.turns

    def unchanged(self, target: int) -> TrimPlan:
        lay = self.lay
        return TrimPlan(
            drop=range(lay.prefix, lay.prefix),
            breadcrumb_at=None,
            dropped_turns=0,
            kept_turns=self.all_turns,
            tokens_before=self.total,
            tokens_after=self.total,
            target_tokens=target,
            pinned_turns=self.pinned_turns,
            pinned_tokens=self.pinned_tokens,
        )

    def cut(self, j: int, breadcrumb_cost: int | None, target: int) -> TrimPlan:
        """The trim whose cut is at turn `j` (§15.1): the fixed prefix's rows before its
        breadcrumb, `pinned(< j)`, the breadcrumb (kept or new), then `B[bj:]`. Unchanged when
        every turn before the cut is pinned.

        As a plan: `drop` runs to `bj` from the first row of the first unpinned turn, or from the
        fixed prefix's breadcrumb when a pinned turn of B before the cut must move ahead of it
        (`breadcrumb_from`); `kept_in_drop` is every pinned turn inside `drop`; a breadcrumb is
        written right after them (moved, or new when the path inserts one and P has none), else
        P's breadcrumb stays where it is (`breadcrumb_at` None)."""
        lay = self.lay
        dropped = [t for t in range(j) if not lay.pinned[t]]
        if not dropped:
            return self.unchanged(target)
        kept_before = [t for t in range(j) if lay.pinned[t]]
        moved_from = lay.crumb if kept_before else None
        start = lay.turn_span(dropped[0]).start if moved_from is None else moved_from
        kept_in_drop = tuple(
            lay.turn_span(t) for t in kept_before if lay.turn_span(t).start >= start
        )
        crumb = _new_breadcrumb_cost(lay, breadcrumb_cost)
        breadcrumb_at = None
        if moved_from is not None or crumb is not None:
            breadcrumb_at = start + sum(len(span) for span in kept_in_drop)
        return TrimPlan(
            drop=range(start, lay.boundaries[j]),
            breadcrumb_at=breadcrumb_at,
            dropped_turns=len(dropped),
            kept_turns=self.all_turns - len(dropped),
            tokens_before=self.total,
            tokens_after=self.total - sum(self.turn_costs[t] for t in dropped) + (crumb or 0),
            target_tokens=target,
            kept_in_drop=kept_in_drop,
            breadcrumb_from=moved_from,
            pinned_turns=self.pinned_turns,
            pinned_tokens=self.pinned_tokens,
        )

    def dropped_before(self, t: int) -> int:
        """The estimate of turn `t` of B when a cut past it drops it: 0 for a pinned turn."""
        return 0 if self.lay.pinned[t] else self.turn_costs[t]


def _new_breadcrumb_cost(lay: Layout, breadcrumb_cost: int | None) -> int | None:
    """The cost of the breadcrumb a trim would insert: none on paths without one, none to stack."""
    return None if lay.has_breadcrumb else breadcrumb_cost


def minimal_cut(low_water: float) -> bool:
    """Whether the fraction in effect asks for the minimal cut of §9: 1.0, or anything outside
    (0.0, 1.0) (the resolution already maps ignored values to 1.0; this guards the engine)."""
    return not 0.0 < low_water < 1.0


def grid_step(amount: int, low_water: float) -> int:
    """The §11.1 step `max(1, amount - min(amount, floor(amount x L)))`, 0 for the minimal cut.

    `amount` is the budget (tokens) or `max(limit, 1)` (turns). The product is taken in IEEE-754
    doubles, like the ratio budget (§3.3): Python rounds the integer to the nearest double (ties
    to even) first, as Rust's `as f64` does; `min` compares the exact integers.
    """
    if minimal_cut(low_water):
        return 0
    return max(1, amount - min(amount, math.floor(amount * low_water)))


def round_up(value: int, step: int) -> int:
    """`ceil(value / step) x step`, exact."""
    return -(-value // step) * step


def plan_token_budget(
    rows: Sequence[Row],
    pricing: Pricing,
    budget: int,
    breadcrumb_cost: int | None,
    low_water: float = 1.0,
    step_budget: int | None = None,
    allow_growth: bool = False,
) -> TrimPlan:
    """Drops the fewest oldest whole turns so the output, breadcrumb included, fits the budget;
    with a low water below 1, as many more as reach the next multiple of the grid step (§11.1).

    Unchanged when the budget is 0 (disabled), the estimate already fits, or fewer than two turns
    exist. When no cut fits, only the newest turn is kept: the budget is a target, not a hard cap.
    A trim whose output would estimate more than its input (turns cheaper than the breadcrumb)
    leaves the history unchanged (§16.1), unless `allow_growth`: overflow recovery judges that
    case itself and reports it as no saving (§10.1).
    `breadcrumb_cost` is the estimate of the breadcrumb this path inserts; None where there is none.
    `step_budget` is the budget the grid step is computed from when it is not the target (the
    reported-usage trim, §10.3 step 4; the room of §12).
    """
    body = _Body.of(rows, pricing.tokens)
    total = body.total
    k = body.lay.turns
    if budget == 0 or total <= budget or k < 2:
        return body.unchanged(budget)
    insert_cost = _new_breadcrumb_cost(body.lay, breadcrumb_cost) or 0
    # The output of cut j estimates total - D(j) + crumb, D(j) the unpinned turns of B before j
    # (§15.1): walk the boundaries with a running D.
    dropped = 0
    chosen = k - 1
    for j in range(1, k):
        dropped += body.dropped_before(j - 1)
        if total - dropped + insert_cost <= budget:
            chosen = j
            break
    step = grid_step(budget if step_budget is None else step_budget, low_water)
    if step == 0:
        plan = body.cut(chosen, breadcrumb_cost, budget)
    else:
        # The grid (§11.1): the smallest j >= j0 whose D(j) reaches ceil(D(j0) / S) x S, else
        # k-1. D(j) counts B from its start: rows before bj (j <= k-1) are outside the current turn.
        drop_target = round_up(dropped, step)
        while chosen < k - 1 and dropped < drop_target:
            dropped += body.dropped_before(chosen)
            chosen += 1
        plan = body.cut(chosen, breadcrumb_cost, budget)
        if plan.trimmed:
            plan = replace(plan, cut_step=step, cut_drop_target=saturate(drop_target))
    if plan.tokens_after > total and not allow_growth:
        return body.unchanged(budget)
    return plan


class BudgetPlanner(Protocol):
    """A priced history as the budget-driven trims (§10.1 recovery, §10.3 calibration) see it;
    both engines' history views are one."""

    @property
    def total_tokens(self) -> int: ...

    @property
    def system_floor_tokens(self) -> int:
        """The estimate of the leading system rows, which no trim drops."""
        ...

    @property
    def fixed_floor_tokens(self) -> int:
        """§15.1's fixed floor (`fixed_floor`), which no recovery removes."""
        ...

    def plan_token_budget(
        self,
        budget: int,
        breadcrumb_cost: int | None,
        low_water: float = 1.0,
        step_budget: int | None = None,
        allow_growth: bool = False,
    ) -> TrimPlan: ...


def recovery_target(total: int) -> int:
    """Reactive overflow recovery trims to two thirds of the current estimate (§5, §9)."""
    return 2 * total // 3


def plan_turn_count(
    rows: Sequence[Row],
    pricing: Pricing,
    limit: int,
    breadcrumb_cost: int | None,
    low_water: float = 1.0,
) -> TrimPlan:
    """Keeps the newest max(limit, 1) turns: an explicit 0 still keeps the running turn (§2, §6);
    with a low water below 1 the cut is rounded up to a multiple of the turn step (§11.1)."""
    body = _Body.of(rows, pricing.tokens)
    k = body.lay.turns
    if k <= limit or k <= 1:
        return body.unchanged(0)
    keep = max(limit, 1)
    j0 = k - keep
    step = grid_step(keep, low_water)
    if step == 0:
        return body.cut(j0, breadcrumb_cost, 0)
    drop_target = round_up(j0, step)
    plan = body.cut(min(k - 1, drop_target), breadcrumb_cost, 0)
    if not plan.trimmed:
        return plan
    return replace(plan, cut_step=step, cut_drop_target=drop_target)


def rows_to_keep(limit: int) -> int:
    """The row-count limit in effect: 0 means the default of 50 (§6, §9)."""
    return limit or DEFAULT_ROW_LIMIT


def plan_row_count(rows: Sequence[Row], pricing: Pricing, limit: int) -> TrimPlan:
    """The channel sender cache: leading system rows kept and not counted, newest N others kept.

    It counts rows, not turns, and 0 means the default of 50 (§6, §9); it ignores pins and the
    summary row (§15.1), so its plans report no pinned turns.
    """
    lay = layout(rows)
    total = pricing.total
    keep = rows_to_keep(limit)
    others = len(rows) - lay.system_rows
    if others <= keep:
        return TrimPlan(
            range(lay.system_rows, lay.system_rows), None, 0, lay.turns, total, total, 0
        )
    drop = range(lay.system_rows, lay.system_rows + others - keep)
    kept_turns = sum(1 for i in range(drop.stop, len(rows)) if rows[i].is_turn_boundary)
    return TrimPlan(
        drop=drop,
        breadcrumb_at=None,
        dropped_turns=0,
        kept_turns=kept_turns,
        tokens_before=total,
        tokens_after=total - sum(pricing.tokens[drop.start : drop.stop]),
        target_tokens=0,
    )


def apply_plan(items: Sequence[T], plan: TrimPlan, make_breadcrumb: Callable[[], T]) -> list[T]:
    """The output history (`TrimPlan`): the rows before `drop`, the pinned turns kept inside it,
    the breadcrumb where planned (moved from `breadcrumb_from`, else new), the rows after it."""
    if not plan.trimmed:
        return list(items)
    out = list(items[: plan.drop.start])
    for span in plan.kept_in_drop:
        out.extend(items[span.start : span.stop])
    if plan.breadcrumb_at is not None:
        moved = plan.breadcrumb_from
        out.append(make_breadcrumb() if moved is None else items[moved])
    out.extend(items[plan.drop.stop :])
    return out
