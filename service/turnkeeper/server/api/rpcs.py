"""The unary RPCs as synchronous functions from a read request to the response bytes.

They run in the engine worker pool, never on the event loop, and publish nothing: what a call
publishes comes back in its `Reply` for the loop to publish. The history work goes through a
`HistoryView`, so the same code serves both engines. Every response that carries a history has it
as field 1, and protobuf writes fields in number order, so `view.history_field(tail)` (the history,
then the rest of the response serialized) is byte-identical to serializing the whole response.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeAlias

from turnkeeper.core.budget import tool_result_cap
from turnkeeper.core.calibration import plan_reported_usage
from turnkeeper.core.overflow import OverflowClassifier, PhraseOrigin
from turnkeeper.core.preflight import Extras, room
from turnkeeper.core.recovery import Recovery, cleared_recovery, plan_recovery
from turnkeeper.core.toolcap import cap_tool_result
from turnkeeper.core.trimming import TrimPlan, minimal_cut
from turnkeeper.server.api.capacity_gate import preflight, request_extras
from turnkeeper.server.api.prepared_rows import (
    cache_breakpoints,
    dropped_input_rows,
    prepared_index,
)
from turnkeeper.server.api.responses import (
    Counts,
    Reply,
    fill_history_trimmed,
    fill_meter,
    fill_outcome,
    fill_preparation,
    reported_usage,
)
from turnkeeper.server.api.trim_limits import (
    Resolved,
    TrimLimits,
    explicit_trim_limits,
    valid_resolution,
)
from turnkeeper.server.api.trim_telemetry import (
    MODE_NAMES,
    MODE_REASONS,
    record_clearing,
    record_trim,
)
from turnkeeper.server.contract import validation
from turnkeeper.server.contract.errors import Violations, raise_if_any
from turnkeeper.server.engine.protocol import HistorySource, HistoryView, Projection
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import resolution_pb2, trim_pb2

log = logging.getLogger("turnkeeper.trim")


def valid_view(source: HistorySource, extra: Violations | None = None) -> HistoryView:
    """The history view, once the history and the rest of the request (`extra`) passed
    validation."""
    if isinstance(source, Violations):
        violations = Violations()
        violations += source
        if extra is not None:
            violations += extra
        raise_if_any(violations)
        raise AssertionError("a history without a view has violations")  # pragma: no cover
    if extra is not None and extra.total:
        raise_if_any(extra)
    return source


def estimate_tokens(request: svc.EstimateTokensRequest, source: HistorySource) -> Reply:
    view = valid_view(source)
    # Fields 1, 2, then 3 and 4: the per-row estimates come encoded from the engine.
    head = svc.EstimateTokensResponse(total_tokens=view.total_tokens).SerializeToString()
    tail = svc.EstimateTokensResponse(
        turns=view.turns, image_tokens=view.image_tokens
    ).SerializeToString()
    return Reply(head + view.estimates_field() + tail)


def resolve_budget(request: svc.ResolveBudgetRequest) -> Reply:
    resolved = valid_resolution(request.profiles)
    if resolved is None:
        validation.check_resolve_budget(request)
        raise AssertionError("profiles without a resolution break a rule")  # pragma: no cover
    return Reply(svc.ResolveBudgetResponse(resolution=resolved.resolution).SerializeToString())


ModeTrim: TypeAlias = tuple[TrimPlan, Counts, Recovery | None]
"""What a TrimHistory mode plans: the trim, the counts it reports, and the recovery report of
overflow recovery."""
ModePlanner: TypeAlias = Callable[
    [svc.TrimHistoryRequest, HistoryView, TrimLimits, int | None], ModeTrim
]
"""A mode's planner, given the request, its history, its limits and the breadcrumb's cost (None
on paths that insert none)."""


def _budget_tokens(limits: TrimLimits) -> int:
    # Validation guarantees a budget with explicit limits where one is needed.
    return limits.budget_tokens or 0


def _plan_token_budget(
    request: svc.TrimHistoryRequest, view: HistoryView, limits: TrimLimits, crumb: int | None
) -> ModeTrim:
    plan = view.plan_token_budget(_budget_tokens(limits), crumb, limits.low_water)
    return plan, Counts.estimated(plan), None


def _plan_overflow_recovery(
    request: svc.TrimHistoryRequest, view: HistoryView, limits: TrimLimits, crumb: int | None
) -> ModeTrim:
    route = limits.resolution.route if limits.resolution is not None else None
    recovery = plan_recovery(view, crumb, budget_tokens=_budget_tokens(limits), route=route)
    return recovery.plan, Counts.estimated(recovery.plan), recovery


def _plan_reported_usage(
    request: svc.TrimHistoryRequest, view: HistoryView, limits: TrimLimits, crumb: int | None
) -> ModeTrim:
    budget = _budget_tokens(limits)
    usage = reported_usage(request.reported_usage)
    calibrated = plan_reported_usage(view, budget, usage, crumb, limits.low_water)
    return calibrated.plan, Counts.reported(calibrated, budget), None


def _plan_turn_count(
    request: svc.TrimHistoryRequest, view: HistoryView, limits: TrimLimits, crumb: int | None
) -> ModeTrim:
    plan = view.plan_turn_count(limits.turn_limit, crumb, limits.low_water)
    return plan, Counts.estimated(plan), None


def _plan_row_count(
    request: svc.TrimHistoryRequest, view: HistoryView, limits: TrimLimits, crumb: int | None
) -> ModeTrim:
    plan = view.plan_row_count(limits.row_limit)
    return plan, Counts.estimated(plan), None


# Each TrimMode's planner.
_MODE_PLANNERS: dict[trim_pb2.TrimMode.ValueType, ModePlanner] = {
    trim_pb2.TRIM_MODE_TOKEN_BUDGET: _plan_token_budget,
    trim_pb2.TRIM_MODE_OVERFLOW_RECOVERY: _plan_overflow_recovery,
    trim_pb2.TRIM_MODE_REPORTED_USAGE: _plan_reported_usage,
    trim_pb2.TRIM_MODE_TURN_COUNT: _plan_turn_count,
    trim_pb2.TRIM_MODE_ROW_COUNT: _plan_row_count,
}


def trim_history(request: svc.TrimHistoryRequest, source: HistorySource) -> Reply:
    """One trim in the request's mode: its limits, the mode's plan, the trimmed history, the
    outcome, and the §7 event of a trim that dropped history."""
    view, limits = _resolve_trim(request, source)
    mode = request.mode
    path = request.caller_path or trim_pb2.CALLER_PATH_AGENT
    # Only the structured agent path shows trimming to the model and to subscribers (§7).
    emits = path == trim_pb2.CALLER_PATH_AGENT
    crumb = limits.breadcrumb_cost if emits else None
    # The modes outside the table are the row cap (validation admits no other).
    planner = _MODE_PLANNERS.get(mode, _plan_row_count)
    plan, counts, recovery = planner(request, view, limits, crumb)
    output = view.apply(plan, limits.breadcrumb_text)
    record_trim(path, MODE_NAMES[mode], MODE_REASONS.get(mode, "unknown"), plan)
    response = svc.TrimHistoryResponse()
    fill_outcome(response.outcome, plan, counts)
    if limits.resolution is not None:
        response.resolution.CopyFrom(limits.resolution)
    if recovery is not None:
        response.recovery.CopyFrom(recovery.report)
    events: tuple[trim_pb2.HistoryTrimmed, ...] = ()
    if emits and plan.drop:
        events = _trim_event(response, request, plan, counts, limits)
    return Reply(output.history_field(response.SerializeToString()), events)


def _resolve_trim(
    request: svc.TrimHistoryRequest, source: HistorySource
) -> tuple[HistoryView, TrimLimits]:
    """The history view and the limits to trim it by, once the request passed validation.
    Explicit limits resolve nothing; profiles (the request's, or none) are resolved."""
    limits: TrimLimits | None
    if request.WhichOneof("limits") == "explicit_limits":
        resolved, limits = None, explicit_trim_limits(request.explicit_limits)
    else:
        resolved = valid_resolution(request.profiles)
        limits = None if resolved is None else resolved.limits
    if (
        limits is not None
        and validation.plain_trim_request(
            request.mode,
            request.caller_path,
            budget_given=limits.budget_tokens is not None,
            reported_usage=request.HasField("reported_usage"),
        )
        and validation.caller_fits(request)
    ):
        return valid_view(source), limits
    violations = validation.trim_request_violations(request, resolved is not None)
    view = valid_view(source, violations)
    assert limits is not None, "profiles without a resolution break a rule"
    return view, limits


def _trim_event(
    response: svc.TrimHistoryResponse,
    request: svc.TrimHistoryRequest,
    plan: TrimPlan,
    counts: Counts,
    limits: TrimLimits,
) -> tuple[trim_pb2.HistoryTrimmed, ...]:
    """The §7 event of a trim that dropped history, filled in the response: it is published as it
    is (nothing changes the response once it is encoded), and the feed then retains this small
    response with it, which costs no more memory than a payload apart."""
    mode = request.mode
    reason = (
        trim_pb2.TRIM_REASON_TURN_LIMIT
        if mode == trim_pb2.TRIM_MODE_TURN_COUNT
        else trim_pb2.TRIM_REASON_TOKEN_BUDGET
    )
    trimmed = response.history_trimmed
    fill_history_trimmed(
        trimmed,
        plan,
        reason,
        counts,
        overflow_recovery=mode == trim_pb2.TRIM_MODE_OVERFLOW_RECOVERY,
        budget_tokens=_budget_tokens(limits),
        turn_limit=limits.turn_limit,
        resolution=limits.resolution,
        caller=request.caller if request.HasField("caller") else None,
    )
    return (trimmed,)


TrimStep: TypeAlias = tuple[TrimPlan, trim_pb2.TrimReason.ValueType, Counts]
"""One trim of a preparation: what it drops, why, and the counts it reports."""


@dataclass(slots=True)  # not frozen, like responses.Reply
class Clearing:
    """What a §13.4 clearing did to the history it was given."""

    tokens_before: int
    tokens_after: int
    target_tokens: int
    results_cleared: int
    overflow_recovery: bool

    def report(self) -> trim_pb2.ToolResultClearing:
        return trim_pb2.ToolResultClearing(
            results_cleared=self.results_cleared,
            saved_tokens=self.tokens_before - self.tokens_after,
        )


@dataclass(slots=True)  # not frozen, like responses.Reply
class Fitted:
    """The prepared history and how it was fitted: the budget trim (or the recovery that took its
    place), the clearing, and the recovery report when recovery was asked."""

    prepared: HistoryView
    trim: TrimStep
    clearing: Clearing | None
    recovery: Recovery | None
    recovered_cut: bool = False
    """Whether `trim` is the recovery's cut (a recovery that only cleared keeps the budget trim)."""


def prepare_model_call(request: svc.PrepareModelCallRequest, source: HistorySource) -> Reply:
    """The preparation of one provider request, in the spec's order (§13.2): resolve, sweep,
    turn limit, projection, budget trim (or overflow recovery), breadcrumb, clearing (§13.4),
    pre-flight, meter."""
    view, resolved = _resolve_preparation(request, source)
    resolution, limits = resolved.resolution, resolved.limits
    tokens_before = view.total_tokens
    swept, removals = view.sweep()  # §10.2
    turn_trim, limited = apply_turn_limit(swept, resolution, limits)
    # §13.1 on the turn-limited history: everything after it (the budget trim, calibration,
    # recovery, the clearing, the pre-flight, the meter) measures the request as it is sent.
    projected, projection = limited.project(resolution.keep_tool_context_turns)
    collapse = _collapse(limited, projected, projection)
    extras = request_extras(request)
    fitted = _fit(request, projected, resolution, limits, extras)
    prepared = fitted.prepared
    # Nothing is sent when it does not fit, so nothing is published: the runtime must change it.
    report = preflight(prepared, extras, resolution)
    caller = request.caller if request.HasField("caller") else None
    trims = _visible_trims(
        (turn_trim, fitted.trim), fitted.recovered_cut, resolution, caller, collapse
    )
    if fitted.clearing is not None:
        trims.append(_clearing_event(fitted.clearing, prepared, resolution, caller, collapse))
    response = svc.PrepareModelCallResponse()
    fill_preparation(response, resolution, trims, removals, report, tokens_before, fitted.recovery)
    if collapse is not None:
        response.collapse.CopyFrom(collapse)
    if fitted.clearing is not None:
        response.clearing.CopyFrom(fitted.clearing.report())
    budget_plan = fitted.trim[0]
    response.cache_breakpoints.extend(
        _breakpoints(prepared, projection, budget_plan, extras, resolution)
    )
    if turn_trim[0].drop or budget_plan.drop:
        response.dropped_input_rows.extend(
            dropped_input_rows(
                removed_rows(removals),
                turn_trim[0].drop,
                turn_trim[0].breadcrumb_at is not None,
                projection.collapsed,
                budget_plan.drop,
            )
        )
    meter = fill_meter(response, report, request, resolved)
    return Reply(
        prepared.history_field(response.SerializeToString()),
        tuple(trims),
        (caller, resolution.route, meter, collapse),
    )


def _collapse(
    limited: HistoryView, projected: HistoryView, projection: Projection
) -> trim_pb2.ToolContextCollapse | None:
    """§13.3: what the projection left out; None when it collapsed nothing. A summary can cost
    more than the short exchange it stands for, so the saving is 0 when the projection estimates
    no less than the history it was given (docs/semantics.md)."""
    if not projection.collapsed:
        return None
    return trim_pb2.ToolContextCollapse(
        collapsed_turns=len(projection.collapsed),
        rows_left_out=projection.rows_left_out,
        saved_tokens=max(limited.total_tokens - projected.total_tokens, 0),
    )


def removed_rows(removals: list[trim_pb2.OrphanRemoval]) -> list[int]:
    """The request indices of the rows the sweep removed, ascending."""
    return sorted({removal.message_index for removal in removals if removal.row_removed})


def _breakpoints(
    prepared: HistoryView,
    projection: Projection,
    budget_plan: TrimPlan,
    extras: Extras,
    resolution: resolution_pb2.Resolution,
) -> list[int]:
    """§14: the last leading system row, the last row of the newest collapsed turn still sent,
    the last row; priced with the tool schemas as the pre-flight prices them."""
    newest_collapsed = None
    if projection.collapsed:
        newest_collapsed = prepared_index(
            projection.collapsed[-1].output_stop - 1,
            budget_plan.drop,
            budget_plan.breadcrumb_at is not None,
        )
    minimum = (
        resolution.min_cacheable_tokens if resolution.HasField("min_cacheable_tokens") else None
    )
    return cache_breakpoints(
        (prepared.system_rows - 1, newest_collapsed, prepared.rows - 1),
        prepared.tokens_through,
        extras.schema_tokens,
        minimum,
    )


def _resolve_preparation(
    request: svc.PrepareModelCallRequest, source: HistorySource
) -> tuple[HistoryView, Resolved]:
    """The history view and what the profiles resolve to, once the request passed validation."""
    resolved = valid_resolution(request.profiles)
    view = valid_view(source, validation.prepare_request_violations(request, resolved is not None))
    assert resolved is not None, "profiles without a resolution break a rule"
    return view, resolved


def apply_turn_limit(
    swept: HistoryView, resolution: resolution_pb2.Resolution, limits: TrimLimits
) -> tuple[TrimStep, HistoryView]:
    """§6 on the swept history, with its §11 cut; returns the trim and the history it leaves.
    Shared with PlanCompaction (§15.3), which condenses what it drops."""
    limited = swept.plan_turn_count(
        resolution.max_history_turns, limits.breadcrumb_cost, resolution.history_trim_low_water
    )
    step = (limited, trim_pb2.TRIM_REASON_TURN_LIMIT, Counts.estimated(limited))
    return step, swept.apply(limited, limits.breadcrumb_text)


def _fit(
    request: svc.PrepareModelCallRequest,
    projected: HistoryView,
    resolution: resolution_pb2.Resolution,
    limits: TrimLimits,
    extras: Extras,
) -> Fitted:
    """The budget trim of the projection and its §13.4 clearing, or, when recovery is asked and
    can trim or clear, the §10.1 recovery in their place."""
    baseline = budget_trim(request, projected, resolution, limits, extras)
    plan = baseline[0]
    prepared = projected.apply(plan, limits.breadcrumb_text)
    keep_newest = _keep_newest_results(resolution)
    clearing: Clearing | None = None
    if resolution.budget_tokens:
        target, fraction = plan.target_tokens, resolution.history_trim_low_water
        # floor(target x L) in doubles, as the §11.1 step; the target itself for the minimal cut.
        stop = target if minimal_cut(fraction) else math.floor(target * fraction)
        prepared, clearing = _clear(prepared, keep_newest, target, stop, False)
    if not request.overflow_recovery:
        return Fitted(prepared, baseline, clearing, None)
    # 2/3 of what this call would have sent without recovery (§10.1), its own clearing included,
    # as one trim of the projection (core.recovery shows it drops what the two trims would).
    recovery = plan_recovery(
        projected,
        limits.breadcrumb_cost,
        baseline=replace(plan, tokens_after=prepared.total_tokens),
        budget_tokens=resolution.budget_tokens,
        route=resolution.route,
    )
    target = recovery.report.target_tokens
    if recovery.report.trimmed:
        plan = recovery.plan
        step = (plan, trim_pb2.TRIM_REASON_TOKEN_BUDGET, Counts.estimated(plan))
        recovered = projected.apply(plan, limits.breadcrumb_text)
        recovered, cleared = _clear(recovered, keep_newest, target, target, True)
        if cleared is not None:
            recovery = cleared_recovery(recovery, recovered.total_tokens)
        return Fitted(recovered, step, cleared, recovery, recovered_cut=True)
    if recovery.report.blocker != trim_pb2.RECOVERY_BLOCKER_SINGLE_TURN:
        return Fitted(prepared, baseline, clearing, recovery)
    # One turn left: what recovery may still do is clear more of it, to its own target.
    recovered, cleared = _clear(prepared, keep_newest, target, target, True)
    if cleared is None:
        return Fitted(prepared, baseline, clearing, recovery)
    if clearing is not None:  # one clearing reported, from the trimmed history on
        cleared.tokens_before = clearing.tokens_before
        cleared.results_cleared += clearing.results_cleared
    return Fitted(recovered, baseline, cleared, cleared_recovery(recovery, recovered.total_tokens))


def _keep_newest_results(resolution: resolution_pb2.Resolution) -> int | None:
    """R (§13.4) when set, else None: the running turn is kept whole."""
    if resolution.HasField("keep_running_turn_tool_results"):
        return resolution.keep_running_turn_tool_results
    return None


def _clear(
    prepared: HistoryView,
    keep_newest: int | None,
    target: int,
    stop: int,
    overflow_recovery: bool,
) -> tuple[HistoryView, Clearing | None]:
    """§13.4 on a history with only its newest turn left: when R is set and the estimate exceeds
    `target`, the running turn's oldest results cleared down to `stop`; None when none was."""
    if keep_newest is None:
        return prepared, None
    before = prepared.total_tokens
    if before <= target or prepared.turns > 1:
        return prepared, None
    cleared, count = prepared.clear_tool_results(keep_newest, stop)
    if not count:
        return prepared, None
    return cleared, Clearing(before, cleared.total_tokens, target, count, overflow_recovery)


PreparationRequest: TypeAlias = svc.PrepareModelCallRequest | svc.PlanCompactionRequest
"""A request that asks for a preparation's steps: PlanCompaction takes what PrepareModelCall
takes, under the same field names (§15.3)."""


def budget_trim(
    request: PreparationRequest,
    limited: HistoryView,
    resolution: resolution_pb2.Resolution,
    limits: TrimLimits,
    extras: Extras,
) -> TrimStep:
    """§9's token-budget trim, calibrated by reported usage when given (§10.3, §16.2). §12: it
    leaves room for what the pre-flight adds; its §11 step is the budget's. Shared with
    PlanCompaction (§15.3), which condenses what it drops."""
    budget, fraction = resolution.budget_tokens, resolution.history_trim_low_water
    space = room(resolution.capacity, extras) if budget else None
    crumb = limits.breadcrumb_cost
    if request.HasField("reported_usage"):
        usage = reported_usage(request.reported_usage)
        calibrated = plan_reported_usage(limited, budget, usage, crumb, fraction, space)
        return (
            calibrated.plan,
            trim_pb2.TRIM_REASON_TOKEN_BUDGET,
            Counts.reported(calibrated, budget),
        )
    target = budget if space is None else min(budget, space)
    plan = limited.plan_token_budget(target, crumb, fraction, step_budget=budget)
    return plan, trim_pb2.TRIM_REASON_TOKEN_BUDGET, Counts.estimated(plan)


def _visible_trims(
    steps: tuple[TrimStep, ...],
    recovered_cut: bool,
    resolution: resolution_pb2.Resolution,
    caller: trim_pb2.CallerContext | None,
    collapse: trim_pb2.ToolContextCollapse | None,
) -> list[trim_pb2.HistoryTrimmed]:
    """§7: one event per trim that dropped history, logged and counted, with the collapse of the
    same preparation (§13.3). Published apart from the response: what the feed retains must not
    hold the response's other fields (its orphan removals may be many)."""
    trims: list[trim_pb2.HistoryTrimmed] = []
    for plan, reason, counts in steps:
        if not plan.drop:
            continue
        trimmed = trim_pb2.HistoryTrimmed()
        trims.append(trimmed)
        fill_history_trimmed(
            trimmed,
            plan,
            reason,
            counts,
            overflow_recovery=recovered_cut and reason == trim_pb2.TRIM_REASON_TOKEN_BUDGET,
            budget_tokens=resolution.budget_tokens,
            turn_limit=resolution.max_history_turns,
            resolution=resolution,
            caller=caller,
        )
        if collapse is not None:
            trimmed.collapse.CopyFrom(collapse)
        label = "turn_limit" if reason == trim_pb2.TRIM_REASON_TURN_LIMIT else "token_budget"
        record_trim(trim_pb2.CALLER_PATH_AGENT, "PREPARE_MODEL_CALL", label, plan)
    return trims


def _clearing_event(
    clearing: Clearing,
    prepared: HistoryView,
    resolution: resolution_pb2.Resolution,
    caller: trim_pb2.CallerContext | None,
    collapse: trim_pb2.ToolContextCollapse | None,
) -> trim_pb2.HistoryTrimmed:
    """§13.4: the clearing's own event, reason tool results cleared; no row is dropped."""
    trimmed = trim_pb2.HistoryTrimmed(
        reason=trim_pb2.TRIM_REASON_TOOL_RESULTS_CLEARED,
        overflow_recovery=clearing.overflow_recovery,
        kept_turns=prepared.turns,
        tokens_before=clearing.tokens_before,
        tokens_after=clearing.tokens_after,
        target_tokens=clearing.target_tokens,
        budget_tokens=resolution.budget_tokens,
        count_source=trim_pb2.COUNT_SOURCE_ESTIMATE,
    )
    trimmed.clearing.CopyFrom(clearing.report())
    trimmed.capacity.CopyFrom(resolution.capacity)
    trimmed.route.CopyFrom(resolution.route)
    if caller is not None:
        trimmed.caller.CopyFrom(caller)
    if collapse is not None:
        trimmed.collapse.CopyFrom(collapse)
    record_clearing(
        clearing.results_cleared, clearing.tokens_before, clearing.tokens_after, prepared.turns
    )
    return trimmed


def check_capacity_rpc(request: svc.CheckCapacityRequest, source: HistorySource) -> Reply:
    resolved = valid_resolution(request.profiles)
    if resolved is None:
        valid_view(source, validation.profiles_violations(request.profiles, "profiles"))
        raise AssertionError("profiles without a resolution break a rule")  # pragma: no cover
    view = valid_view(source)
    resolution = resolved.resolution
    report = preflight(view, request_extras(request), resolution)
    response = svc.CheckCapacityResponse(report=report, resolution=resolution)
    return Reply(response.SerializeToString())


def sweep_orphans(request: svc.SweepOrphansRequest, source: HistorySource) -> Reply:
    swept, removals = valid_view(source).sweep()
    response = svc.SweepOrphansResponse(removals=removals)
    return Reply(swept.history_field(response.SerializeToString()))


def cap_tool_results(request: svc.CapToolResultsRequest) -> Reply:
    validation.check_cap_tool_results(request)
    cap = (
        tool_result_cap(request.profiles.runtime)
        if request.HasField("profiles")
        else request.max_tool_result_chars
    )
    results = []
    for content in request.contents:
        capped, cut = cap_tool_result(content, cap)
        results.append(trim_pb2.CappedToolResult(content=capped, truncated_chars=cut))
    response = svc.CapToolResultsResponse(results=results, max_tool_result_chars=cap)
    return Reply(response.SerializeToString())


def classify_provider_error(
    request: svc.ClassifyProviderErrorRequest, classifier: OverflowClassifier
) -> Reply:
    validation.check_classify_provider_error(request)
    match = classifier.classify(request.message, request.provider)
    status = request.http_status if request.HasField("http_status") else None
    log.debug(
        "classified provider error provider=%r http_status=%s overflow=%s phrase=%r",
        request.provider,
        status,
        match is not None,
        match.phrase if match else "",
    )
    if match is None:
        response = svc.ClassifyProviderErrorResponse(overflow=False)
    else:
        source = (
            svc.PHRASE_SOURCE_BUILT_IN
            if match.origin is PhraseOrigin.BUILT_IN
            else svc.PHRASE_SOURCE_OPERATOR
        )
        response = svc.ClassifyProviderErrorResponse(
            overflow=True, matched_phrase=match.phrase, phrase_source=source
        )
    return Reply(response.SerializeToString())
