"""Whole-turn retention (spec §2, §5, §6, §9): plans over the row view, applied as index ranges.

A plan never re-estimates the kept suffix per candidate: the history is priced once and every
candidate cut is judged from running sums, so each operation is one O(n) pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
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
    """P and the turn boundaries of B (§9 Token-budget trim)."""

    system_rows: int
    """The leading run of system rows."""
    prefix: int
    """len(P): the leading system rows plus a breadcrumb right after them."""
    boundaries: list[int]
    """Absolute indices of the turn boundaries in B, ascending."""

    @property
    def has_breadcrumb(self) -> bool:
        return self.prefix > self.system_rows

    @property
    def turns(self) -> int:
        return len(self.boundaries)


def layout(rows: Sequence[Row]) -> Layout:
    system_rows = 0
    while system_rows < len(rows) and rows[system_rows].kind is RowKind.SYSTEM:
        system_rows += 1
    prefix = system_rows
    if prefix < len(rows) and rows[prefix].kind is RowKind.BREADCRUMB:
        prefix += 1
    boundaries = [i for i in range(prefix, len(rows)) if rows[i].is_turn_boundary]
    return Layout(system_rows, prefix, boundaries)


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


def _unchanged(lay: Layout, total: int, target: int) -> TrimPlan:
    return TrimPlan(range(lay.prefix, lay.prefix), None, 0, lay.turns, total, total, target)


def _new_breadcrumb_cost(lay: Layout, breadcrumb_cost: int | None) -> int | None:
    """The cost of the breadcrumb a trim would insert: none on paths without one, none to stack."""
    return None if lay.has_breadcrumb else breadcrumb_cost


def _drop_turns(
    lay: Layout, costs: Sequence[int], total: int, j: int, breadcrumb_cost: int | None, target: int
) -> TrimPlan:
    """Output P + crumb + B[bj:]: drops the j oldest turns; a new crumb follows the system rows."""
    end = lay.boundaries[j]
    dropped_cost = sum(costs[lay.prefix : end])
    crumb = _new_breadcrumb_cost(lay, breadcrumb_cost)
    return TrimPlan(
        drop=range(lay.prefix, end),
        breadcrumb_at=None if crumb is None else lay.system_rows,
        dropped_turns=j,
        kept_turns=lay.turns - j,
        tokens_before=total,
        tokens_after=total - dropped_cost + (crumb or 0),
        target_tokens=target,
    )


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
    lay = layout(rows)
    costs = pricing.tokens
    total = sum(costs)
    k = lay.turns
    if budget == 0 or total <= budget or k < 2:
        return _unchanged(lay, total, budget)
    insert_cost = _new_breadcrumb_cost(lay, breadcrumb_cost) or 0
    # kept(j) = total - D(j), D(j) = cost(B[:bj]); walk the boundaries with a running sum of B.
    dropped = 0
    pos = lay.prefix
    chosen = k - 1
    for j in range(1, k):
        end = lay.boundaries[j]
        dropped += sum(costs[pos:end])
        pos = end
        if total - dropped + insert_cost <= budget:
            chosen = j
            break
    step = grid_step(budget if step_budget is None else step_budget, low_water)
    if step == 0:
        plan = _drop_turns(lay, costs, total, chosen, breadcrumb_cost, budget)
    else:
        # The grid (§11.1): the smallest j >= j0 whose D(j) reaches ceil(D(j0) / S) x S, else
        # k-1. D(j) counts B from its start: rows before bj (j <= k-1) are outside the current turn.
        drop_target = round_up(dropped, step)
        while chosen < k - 1 and dropped < drop_target:
            chosen += 1
            end = lay.boundaries[chosen]
            dropped += sum(costs[pos:end])
            pos = end
        plan = _drop_turns(lay, costs, total, chosen, breadcrumb_cost, budget)
        plan = replace(plan, cut_step=step, cut_drop_target=saturate(drop_target))
    if plan.tokens_after > total and not allow_growth:
        return _unchanged(lay, total, budget)
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
    lay = layout(rows)
    total = pricing.total
    k = lay.turns
    if k <= limit or k <= 1:
        return _unchanged(lay, total, 0)
    keep = max(limit, 1)
    j0 = k - keep
    step = grid_step(keep, low_water)
    if step == 0:
        return _drop_turns(lay, pricing.tokens, total, j0, breadcrumb_cost, 0)
    drop_target = round_up(j0, step)
    plan = _drop_turns(lay, pricing.tokens, total, min(k - 1, drop_target), breadcrumb_cost, 0)
    return replace(plan, cut_step=step, cut_drop_target=drop_target)


def rows_to_keep(limit: int) -> int:
    """The row-count limit in effect: 0 means the default of 50 (§6, §9)."""
    return limit or DEFAULT_ROW_LIMIT


def plan_row_count(rows: Sequence[Row], pricing: Pricing, limit: int) -> TrimPlan:
    """The channel sender cache: leading system rows kept and not counted, newest N others kept.

    It counts rows, not turns, and 0 means the default of 50 (§6, §9).
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
    """The output history: everything outside `drop`, with the new breadcrumb where planned."""
    if not plan.trimmed:
        return list(items)
    out = list(items[: plan.drop.start])
    if plan.breadcrumb_at is not None:
        out.append(make_breadcrumb())
    out.extend(items[plan.drop.stop :])
    return out
