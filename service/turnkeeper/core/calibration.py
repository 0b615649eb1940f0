"""Calibration by provider-reported usage (spec §10.3 as amended by §16.2), in exact integer
arithmetic.

The calibration scales the history as it stands, not the request the provider counted: a runtime
that passes the previous call's usage has usually appended to its history since. Python integers
are unbounded, so every product below is exact for any 64-bit inputs; only the reported results
are saturated to the wire's uint64. The trim itself is the §9 token-budget trim (with §11, §12
and §16.1).
"""

from __future__ import annotations

from dataclasses import dataclass

from turnkeeper.core.saturation import saturate
from turnkeeper.core.trimming import BudgetPlanner, TrimPlan
from turnkeeper.v1 import trim_pb2


@dataclass(frozen=True, slots=True)
class ReportedUsage:
    """What the provider counted for the previous request, next to turnkeeper's estimate of it."""

    reported: int
    estimated: int
    tool_schema: int
    """The part of `estimated` spent on tool schemas."""


def calibrates(usage: ReportedUsage) -> bool:
    """Whether the counts relate the estimate to the provider's: both positive (§16.2 step 1)."""
    return usage.estimated != 0 and usage.reported != 0


def calibrated_target(budget: int, usage: ReportedUsage) -> int:
    """Step 2: the budget in estimate units, max(1, floor(budget x estimated / reported))."""
    return max(1, budget * usage.estimated // usage.reported)


def history_target(target: int, usage: ReportedUsage) -> int:
    """Step 3: what the history may use once the tool schemas are reserved, never below 1."""
    return max(1, target - usage.tool_schema)


def reported_tokens(estimate: int, usage: ReportedUsage) -> int:
    """Step 5: (estimate + tool_schema) x reported / estimated, rounded half away from zero.

    Every operand is non-negative, so half away from zero is "round a remainder of half up".
    """
    quotient, remainder = divmod((estimate + usage.tool_schema) * usage.reported, usage.estimated)
    return saturate(quotient + (1 if 2 * remainder >= usage.estimated else 0))


@dataclass(frozen=True, slots=True)
class CalibratedTrim:
    """A §16.2 trim: the plan over the estimate, and its counts in provider-reported units."""

    plan: TrimPlan
    tokens_before: int
    tokens_after: int
    calibration: trim_pb2.UsageCalibration | None
    """The estimate-space steps 2-4; None when step 1 stopped them."""
    reported: bool = True
    """False when the counts are the estimate's: a count of 0, where nothing relates the estimate
    to the provider's count."""


def plan_reported_usage(
    history: BudgetPlanner,
    budget: int,
    usage: ReportedUsage,
    breadcrumb_cost: int | None,
    low_water: float = 1.0,
    room: int | None = None,
) -> CalibratedTrim:
    """The §16.2 trim of `history` as it stands; its grid step (§11.1) comes from `budget`, not
    from the calibrated target, so it does not move with the provider's counts.

    `room` (§12, PrepareModelCall only) is what the prepared messages may use beside the rest of
    the request, in estimate units (None when below 1): the history target is at most it. It is
    ignored with a budget of 0 (proactive trimming off).
    """
    if budget == 0:
        unchanged = history.plan_token_budget(0, breadcrumb_cost)  # §9: budget 0 keeps all
        if not calibrates(usage):
            total = unchanged.tokens_before
            return CalibratedTrim(unchanged, total, total, None, reported=False)
        count = reported_tokens(unchanged.tokens_before, usage)
        return CalibratedTrim(unchanged, count, count, None)
    if not calibrates(usage):
        target = budget if room is None else min(budget, room)
        plan = history.plan_token_budget(target, breadcrumb_cost, low_water, step_budget=budget)
        return CalibratedTrim(plan, plan.tokens_before, plan.tokens_after, None, reported=False)
    # A history grown past the counted request, or a small reported count, can put the target
    # above 2^64; saturated it still exceeds any estimate, so the trim is the same.
    target = saturate(calibrated_target(budget, usage))
    scaled = history_target(target, usage)
    if room is not None:
        scaled = min(scaled, room)
    plan = history.plan_token_budget(scaled, breadcrumb_cost, low_water, step_budget=budget)
    calibration = trim_pb2.UsageCalibration(
        calibrated_target_tokens=target,
        history_target_tokens=scaled,
        kept_estimate_tokens=plan.tokens_after,
    )
    return CalibratedTrim(
        plan,
        reported_tokens(plan.tokens_before, usage),
        reported_tokens(plan.tokens_after, usage),
        calibration,
    )
