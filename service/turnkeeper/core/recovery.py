"""Overflow recovery that never grows the request (spec §5, §9 Reactive recovery, §10.1).

Recovery takes two thirds of a *baseline*: the history given (TrimHistory), or the history the
same PrepareModelCall would have prepared without recovery, which is what the provider rejected.

PrepareModelCall runs it as one token-budget trim of the turn-limited history to the recovery
target rather than as a second trim of the baseline. Both choose the same cut: estimates of
`P + crumb + B[bj:]` strictly fall as j grows (every row costs at least 4), the baseline cuts
at some jb (the smallest fitting j, or the §11 grid cut after it), and the recovery target is
below the baseline's estimate, so no j <= jb fits it; for j > jb both ask the same question of
the same rows (the crumb is reserved either way); and when nothing fits both keep only the
newest turn. Recovery itself always cuts minimally (§11.1 "Where it applies").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from turnkeeper.core.trimming import BudgetPlanner, TrimPlan, recovery_target
from turnkeeper.v1 import resolution_pb2, trim_pb2


@dataclass(frozen=True, slots=True)
class Recovery:
    plan: TrimPlan
    """The trim from the history given to the recovered history."""
    report: trim_pb2.RecoveryReport


def plan_recovery(
    history: BudgetPlanner,
    breadcrumb_cost: int | None,
    *,
    baseline: TrimPlan | None = None,
    budget_tokens: int = 0,
    route: resolution_pb2.Route | None = None,
) -> Recovery:
    """Recovery from `rows`; `baseline` is the trim of them the provider's rejected request had.

    Without a baseline, the rows themselves are the baseline (TrimHistory). A recovery that
    cannot make the request smaller returns the baseline (with the recovery target) and says
    why, with the system floor and whether it alone reaches the budget, and the fixed floor of
    §15.1. Pinned turns are kept like any trim keeps them, so `SINGLE_TURN` also stands for
    "only pinned turns and the newest turn are left": the cut at the target drops no more than
    the baseline did.
    """
    if baseline is None:
        baseline = history.plan_token_budget(0, breadcrumb_cost)  # §9: 0 keeps all
    baseline_tokens = baseline.tokens_after
    target = recovery_target(baseline_tokens)
    # A cut that would grow the history is kept here, so it is reported as no saving (§16.1).
    plan = history.plan_token_budget(target, breadcrumb_cost, allow_growth=True)
    blocker = trim_pb2.RECOVERY_BLOCKER_UNSPECIFIED
    if plan.dropped_turns <= baseline.dropped_turns:
        blocker = trim_pb2.RECOVERY_BLOCKER_SINGLE_TURN
    elif plan.tokens_after >= baseline_tokens:
        # Tiny turns: the breadcrumb costs more than what dropping them saves.
        blocker = trim_pb2.RECOVERY_BLOCKER_NO_SAVING
    if blocker != trim_pb2.RECOVERY_BLOCKER_UNSPECIFIED:
        plan = replace(baseline, target_tokens=target)
    floor = history.system_floor_tokens
    report = trim_pb2.RecoveryReport(
        trimmed=blocker == trim_pb2.RECOVERY_BLOCKER_UNSPECIFIED,
        blocker=blocker,
        baseline_tokens=baseline_tokens,
        target_tokens=target,
        tokens_after=plan.tokens_after,
        target_reached=plan.tokens_after <= target,
        kept_turns=plan.kept_turns,
        system_floor_tokens=floor,
        budget_tokens=budget_tokens,
        system_floor_reaches_budget=0 < budget_tokens <= floor,
        fixed_floor_tokens=history.fixed_floor_tokens,
    )
    if route is not None:
        report.route.CopyFrom(route)
    return Recovery(plan, report)


def cleared_recovery(recovery: Recovery, tokens_after: int) -> Recovery:
    """The recovery once the running turn's oldest tool results were cleared to its target
    (§13.4): it trimmed, whatever its cut could not do, and reports the cleared estimate."""
    report = trim_pb2.RecoveryReport()
    report.CopyFrom(recovery.report)
    report.trimmed = True
    report.blocker = trim_pb2.RECOVERY_BLOCKER_UNSPECIFIED
    report.tokens_after = tokens_after
    report.target_reached = tokens_after <= report.target_tokens
    return Recovery(recovery.plan, report)
