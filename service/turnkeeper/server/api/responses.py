"""What an RPC answers and publishes: its `Reply`, the token counts a trim reports (from the
reported usage it was calibrated by, when given), and the response and event messages filled from
a trim's plan and a prepared call's meter.

The messages are filled in place, in the response that sends them: a field is set only when it is
not its default (which proto3 does not write anyway), so a call builds no message twice and sets
only what it sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from turnkeeper.core.calibration import CalibratedTrim, ReportedUsage
from turnkeeper.core.meter import context_meter, input_cost, input_tokens
from turnkeeper.core.recovery import Recovery
from turnkeeper.core.trimming import TrimPlan
from turnkeeper.server.api.trim_limits import Resolved
from turnkeeper.v1 import events_pb2, resolution_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

MeterParts: TypeAlias = tuple[
    trim_pb2.CallerContext | None,
    resolution_pb2.Route,
    trim_pb2.ContextMeter | events_pb2.CompactionPlanned,
    trim_pb2.ToolContextCollapse | None,
    int,
]
"""What a meter update is made of (`meter_update`): a prepared call's meter, its collapse (§13.3)
when the projection collapsed anything and the pinned tokens it sends (§15.1), or a compaction
plan in place of the meter (§15.3). The update itself is built only when the feed wants one
(subscribers opted in): building it costs more than the rest of the meter's work in a call
(docs/benchmarks.md, "Figures behind the api/ comments")."""


# Built per call and never changed, but not frozen: a frozen dataclass's __init__ sets every
# field through object.__setattr__, which costs a call per field (docs/benchmarks.md).
@dataclass(slots=True)
class Reply:
    """A response's bytes and what to publish once it is sent."""

    body: bytes
    events: tuple[trim_pb2.HistoryTrimmed, ...] = ()
    meter: MeterParts | None = None


def meter_update(
    caller: trim_pb2.CallerContext | None,
    route: resolution_pb2.Route,
    meter: trim_pb2.ContextMeter | events_pb2.CompactionPlanned,
    collapse: trim_pb2.ToolContextCollapse | None = None,
    pinned_tokens: int = 0,
) -> events_pb2.MeterUpdate:
    """spec §10.5: a session's fill level for subscribers that opted in (dashboards), with what
    the call's projection collapsed (§13.3) and the estimate of the pinned turns it sends
    (§15.1); or, in place of the meter, a compaction plan (§15.3). Filled with copies: a
    constructor merges message arguments through their encoding,
    which costs more."""
    update = events_pb2.MeterUpdate()
    if caller is not None:
        update.caller.CopyFrom(caller)
    update.route.CopyFrom(route)
    if isinstance(meter, events_pb2.CompactionPlanned):
        update.compaction.CopyFrom(meter)
    else:
        update.meter.CopyFrom(meter)
    if collapse is not None:
        update.collapse.CopyFrom(collapse)
    if pinned_tokens:
        update.pinned_tokens = pinned_tokens
    return update


@dataclass(slots=True)  # not frozen, like Reply
class Counts:
    """The token counts a trim reports, and where they come from (§10.3)."""

    source: trim_pb2.CountSource.ValueType
    tokens_before: int
    tokens_after: int
    target_tokens: int
    calibration: trim_pb2.UsageCalibration | None = None

    @classmethod
    def estimated(cls, plan: TrimPlan) -> Counts:
        return cls(
            trim_pb2.COUNT_SOURCE_ESTIMATE,
            plan.tokens_before,
            plan.tokens_after,
            plan.target_tokens,
        )

    @classmethod
    def reported(cls, trim: CalibratedTrim, budget: int) -> Counts:
        if not trim.reported:
            return cls.estimated(trim.plan)
        return cls(
            trim_pb2.COUNT_SOURCE_PROVIDER_REPORTED,
            trim.tokens_before,
            trim.tokens_after,
            budget,
            trim.calibration,
        )


def reported_usage(usage: trim_pb2.ReportedUsage) -> ReportedUsage:
    """A request's reported usage (§10.3), as calibration reads it."""
    return ReportedUsage(
        reported=usage.reported_input_tokens,
        estimated=usage.estimated_input_tokens,
        tool_schema=usage.tool_schema_tokens,
    )


def fill_outcome(outcome: svc.TrimOutcome, plan: TrimPlan, counts: Counts) -> None:
    """The outcome of a trim: `dropped_range` spans the drop, the pinned turns it keeps are
    `kept_in_dropped_range` and the counts are of what was really dropped (§15.1)."""
    drop = plan.drop
    if plan.trimmed:
        outcome.trimmed = True  # which sets the outcome in the response
        outcome.dropped_messages = plan.dropped_messages
        dropped = outcome.dropped_range
        dropped.start = drop.start
        dropped.end = drop.stop
        for kept in plan.kept_in_drop:
            outcome.kept_in_dropped_range.add(start=kept.start, end=kept.stop)
    else:
        outcome.SetInParent()  # sent even when every field is a default
    if plan.dropped_turns:
        outcome.dropped_turns = plan.dropped_turns
    if plan.kept_turns:
        outcome.kept_turns = plan.kept_turns
    _fill_counts(outcome, counts)
    if plan.cut_step:
        outcome.cut_step = plan.cut_step
    if plan.cut_drop_target:
        outcome.cut_drop_target = plan.cut_drop_target
    if plan.breadcrumb_at is not None:
        outcome.breadcrumb_index = plan.breadcrumb_at
    _fill_pinned(outcome, plan)


def _fill_pinned(message: svc.TrimOutcome | trim_pb2.HistoryTrimmed, plan: TrimPlan) -> None:
    """The pinned turns in the output and their tokens (§15.1), unchanged outputs included."""
    if plan.pinned_turns:
        message.pinned_turns = plan.pinned_turns
    if plan.pinned_tokens:
        message.pinned_tokens = plan.pinned_tokens


def _fill_counts(message: svc.TrimOutcome | trim_pb2.HistoryTrimmed, counts: Counts) -> None:
    if counts.tokens_before:
        message.tokens_before = counts.tokens_before
    if counts.tokens_after:
        message.tokens_after = counts.tokens_after
    if counts.target_tokens:
        message.target_tokens = counts.target_tokens
    if counts.source:
        message.count_source = counts.source
    if counts.calibration is not None:
        message.calibration.CopyFrom(counts.calibration)


def fill_history_trimmed(
    trimmed: trim_pb2.HistoryTrimmed,
    plan: TrimPlan,
    reason: trim_pb2.TrimReason.ValueType,
    counts: Counts,
    *,
    overflow_recovery: bool,
    budget_tokens: int,
    turn_limit: int,
    resolution: resolution_pb2.Resolution | None,
    caller: trim_pb2.CallerContext | None,
) -> None:
    """The §7 payload of a trim that dropped history: returned to the caller and published to
    every TrimEvents subscriber."""
    trimmed.reason = reason
    if overflow_recovery:
        trimmed.overflow_recovery = True
    trimmed.dropped_messages = plan.dropped_messages
    if plan.dropped_turns:
        trimmed.dropped_turns = plan.dropped_turns
    if plan.kept_turns:
        trimmed.kept_turns = plan.kept_turns
    _fill_counts(trimmed, counts)
    if budget_tokens:
        trimmed.budget_tokens = budget_tokens
    if turn_limit and reason == trim_pb2.TRIM_REASON_TURN_LIMIT:
        trimmed.turn_limit = turn_limit
    # A breadcrumb the trim moved ahead of pinned turns (§15.1) was inserted by an earlier trim.
    if plan.breadcrumb_at is not None and plan.breadcrumb_from is None:
        trimmed.breadcrumb_inserted = True
    if plan.cut_step:
        trimmed.cut_step = plan.cut_step
    if plan.cut_drop_target:
        trimmed.cut_drop_target = plan.cut_drop_target
    if resolution is not None:
        trimmed.capacity.CopyFrom(resolution.capacity)
        trimmed.route.CopyFrom(resolution.route)
    if caller is not None:
        trimmed.caller.CopyFrom(caller)
    _fill_pinned(trimmed, plan)


def fill_preparation(
    response: svc.PrepareModelCallResponse,
    resolution: resolution_pb2.Resolution,
    trims: list[trim_pb2.HistoryTrimmed],
    removals: list[trim_pb2.OrphanRemoval],
    report: trim_pb2.CapacityReport,
    tokens_before: int,
    recovery: Recovery | None,
) -> None:
    response.resolution.CopyFrom(resolution)
    # Only when there are some: an empty extend costs the repeated field's wrapper and the call.
    if trims:
        response.trims.extend(trims)
    if removals:
        response.orphans_removed.extend(removals)
    response.capacity_report.CopyFrom(report)
    if tokens_before:
        response.tokens_before = tokens_before
    if recovery is not None:
        response.recovery.CopyFrom(recovery.report)


def fill_meter(
    response: svc.PrepareModelCallResponse,
    report: trim_pb2.CapacityReport,
    request: svc.PrepareModelCallRequest,
    resolved: Resolved,
) -> trim_pb2.ContextMeter:
    """§10.5: the prepared request's fill level and input cost, set in the response; the meter is
    also every session's fill level for subscribers that opted in (`meter_update`)."""
    used = input_tokens(report)
    meter = context_meter(used, resolved.resolution)
    response.context_meter.CopyFrom(meter)
    prices = resolved.prices
    if prices is not None:
        response.input_cost.CopyFrom(
            input_cost(used, request.cached_input_tokens, prices, request.cache_write_tokens)
        )
    return meter
