"""Calibration by provider-reported usage (spec §10.3), in exact integer arithmetic.

Python integers are unbounded, so every product below is exact for any 64-bit inputs; only the
reported result is saturated to the wire's uint64. The trim itself is the §9 token-budget trim.
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


def applies(budget: int, usage: ReportedUsage) -> bool:
    """Step 1: no trim when the budget is 0, the reported count fits it, or the estimate is 0."""
    return budget != 0 and usage.reported > budget and usage.estimated != 0


def calibrated_target(budget: int, usage: ReportedUsage) -> int:
    """Step 2: the budget in estimate units, max(1, floor(budget x estimated / reported))."""
    return max(1, budget * usage.estimated // usage.reported)


def history_target(target: int, usage: ReportedUsage) -> int:
    """Step 3: what the history may use once the tool schemas are reserved, never below 1."""
    return max(1, target - usage.tool_schema)


def reported_tokens_after(kept: int, usage: ReportedUsage) -> int:
    """Step 5: (kept + tool_schema) x reported / estimated, rounded half away from zero.

    Every operand is non-negative, so half away from zero is "round a remainder of half up".
    """
    quotient, remainder = divmod((kept + usage.tool_schema) * usage.reported, usage.estimated)
    return saturate(quotient + (1 if 2 * remainder >= usage.estimated else 0))


@dataclass(frozen=True, slots=True)
class CalibratedTrim:
    """A §10.3 trim: the plan over the estimate, and its counts in provider-reported units."""

    plan: TrimPlan
    tokens_before: int
    tokens_after: int
    calibration: trim_pb2.UsageCalibration | None
    """The estimate-space steps 2-4; None when step 1 decided there is nothing to trim."""
    reported: bool = True
    """False when the counts are the estimate's: a §12 room trim with `estimated = 0`, where
    nothing relates the estimate to the provider's count."""


def plan_reported_usage(
    history: BudgetPlanner,
    budget: int,
    usage: ReportedUsage,
    breadcrumb_cost: int | None,
    low_water: float = 1.0,
    room: int | None = None,
) -> CalibratedTrim:
    """The §10.3 trim; its grid step (§11.1) comes from `budget`, not from the calibrated
    target, so it does not move with the provider's counts.

    `room` (§12, PrepareModelCall only) is what the prepared messages may use beside the rest of
    the request, in estimate units: step 1's "no trim" also needs the estimate to fit it, and the
    history target is at most it. It is ignored with a budget of 0 (proactive trimming off).
    """
    if room is not None and budget == 0:
        room = None
    if not applies(budget, usage):
        if room is None or history.total_tokens <= room:
            unchanged = history.plan_token_budget(0, breadcrumb_cost)  # §9: budget 0 keeps all
            return CalibratedTrim(unchanged, usage.reported, usage.reported, None)
        plan = history.plan_token_budget(room, breadcrumb_cost, low_water, step_budget=budget)
        if usage.estimated == 0:
            return CalibratedTrim(plan, plan.tokens_before, plan.tokens_after, None, reported=False)
        # Steps 2-3 did not run (step 1 stopped them); the room alone set the target.
        calibration = trim_pb2.UsageCalibration(
            history_target_tokens=room, kept_estimate_tokens=plan.tokens_after
        )
        return CalibratedTrim(
            plan, usage.reported, reported_tokens_after(plan.tokens_after, usage), calibration
        )
    target = calibrated_target(budget, usage)
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
        plan, usage.reported, reported_tokens_after(plan.tokens_after, usage), calibration
    )
