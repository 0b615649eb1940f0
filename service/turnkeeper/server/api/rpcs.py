"""The unary RPCs as synchronous functions from a read request to the response bytes.

They run in the engine worker pool, never on the event loop, and publish nothing: what a call
publishes comes back in its `Reply` for the loop to publish. The history work goes through a
`HistoryView`, so the same code serves both engines. Every response that carries a history has it
as field 1, and protobuf writes fields in number order, so `view.history_field(tail)` (the history,
then the rest of the response serialized) is byte-identical to serializing the whole response.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import grpc
from google.rpc import error_details_pb2

from turnkeeper.core.budget import low_water, resolve, tool_result_cap
from turnkeeper.core.calibration import CalibratedTrim, ReportedUsage, plan_reported_usage
from turnkeeper.core.meter import context_meter, input_cost, input_tokens, route_prices
from turnkeeper.core.overflow import OverflowClassifier, PhraseOrigin
from turnkeeper.core.preflight import Extras, check_capacity, room
from turnkeeper.core.recovery import Recovery, plan_recovery
from turnkeeper.core.toolcap import cap_tool_result
from turnkeeper.core.trimming import (
    DEFAULT_BREADCRUMB_TEXT,
    DEFAULT_ROW_LIMIT,
    DEFAULT_TURN_LIMIT,
    TrimPlan,
)
from turnkeeper.core.working import breadcrumb_cost
from turnkeeper.server.contract import validation
from turnkeeper.server.contract.errors import RequestError, Violations, raise_if_any
from turnkeeper.server.engine.protocol import HistorySource, HistoryView
from turnkeeper.server.telemetry import metrics, tracing
from turnkeeper.server.telemetry.log_handler import log_line
from turnkeeper.v1 import errors_pb2, events_pb2, profile_pb2, resolution_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

log = logging.getLogger("turnkeeper.trim")


MeterParts: TypeAlias = tuple[
    trim_pb2.CallerContext | None, resolution_pb2.Route, trim_pb2.ContextMeter
]
"""What a prepared call's meter update is made of (`meter_update`): the update itself is built
only when the feed wants one (subscribers opted in): building it costs more than the rest of
the meter's work in a call (docs/benchmarks.md, "Figures behind the api/ comments")."""


# Built per call and never changed, but not frozen: a frozen dataclass's __init__ sets every
# field through object.__setattr__, which costs a call per field (docs/benchmarks.md).
@dataclass(slots=True)
class Reply:
    """A response's bytes and what to publish once it is sent."""

    body: bytes
    events: tuple[trim_pb2.HistoryTrimmed, ...] = ()
    meter: MeterParts | None = None


def meter_update(
    caller: trim_pb2.CallerContext | None, route: resolution_pb2.Route, meter: trim_pb2.ContextMeter
) -> events_pb2.MeterUpdate:
    """spec §10.5: a session's fill level for subscribers that opted in (dashboards). Filled with
    copies: a constructor merges message arguments through their encoding, which costs more."""
    update = events_pb2.MeterUpdate()
    if caller is not None:
        update.caller.CopyFrom(caller)
    update.route.CopyFrom(route)
    update.meter.CopyFrom(meter)
    return update


def _valid_view(source: HistorySource, extra: Violations | None = None) -> HistoryView:
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


@dataclass(frozen=True, slots=True)  # shared by the calls that sent the same limits
class TrimLimits:
    """The limits one TrimHistory call works with, from explicit limits or resolved profiles."""

    budget_tokens: int | None
    turn_limit: int
    row_limit: int
    breadcrumb_text: str
    breadcrumb_cost: int
    """The price of `breadcrumb_text` as a row (on paths that insert one)."""
    low_water: float
    """The §11 fraction in effect (1.0: the minimal cut)."""
    resolution: resolution_pb2.Resolution | None


def _explicit_limits(explicit: svc.ExplicitLimits) -> TrimLimits:
    has_limit = explicit.HasField("max_history_messages")
    text = explicit.breadcrumb_text or DEFAULT_BREADCRUMB_TEXT
    return TrimLimits(
        budget_tokens=explicit.budget_tokens if explicit.HasField("budget_tokens") else None,
        turn_limit=explicit.max_history_messages if has_limit else DEFAULT_TURN_LIMIT,
        row_limit=explicit.max_history_messages if has_limit else DEFAULT_ROW_LIMIT,
        breadcrumb_text=text,
        breadcrumb_cost=breadcrumb_cost(text),
        low_water=low_water(
            explicit.history_trim_low_water if explicit.HasField("history_trim_low_water") else None
        )[0],
        resolution=None,
    )


def _profile_limits(
    profiles: profile_pb2.Profiles, resolution: resolution_pb2.Resolution
) -> TrimLimits:
    runtime = profiles.runtime
    text = runtime.breadcrumb_text or DEFAULT_BREADCRUMB_TEXT
    return TrimLimits(
        budget_tokens=resolution.budget_tokens,
        turn_limit=resolution.max_history_turns,
        row_limit=runtime.max_history_messages,
        breadcrumb_text=text,
        breadcrumb_cost=breadcrumb_cost(text),
        low_water=resolution.history_trim_low_water,
        resolution=resolution,
    )


# Profiles and explicit limits this size or smaller are resolved once per distinct encoding (a
# runtime sends the same ones with every call); at most this many of each are kept.
_CACHED_PROFILE_BYTES = 16 * 1024
_CACHED_PROFILES = 256


@dataclass(slots=True)  # not frozen, like Reply
class Resolved:
    """What valid profiles resolve to: the resolution, the prices of its route's model, and the
    limits they give (TrimHistory's; PrepareModelCall's breadcrumb)."""

    resolution: resolution_pb2.Resolution
    prices: profile_pb2.ModelPrices | None
    limits: TrimLimits


@functools.lru_cache(maxsize=_CACHED_PROFILES)
def _resolved_encoding(encoded: bytes) -> Resolved | None:
    return _checked_resolution(profile_pb2.Profiles.FromString(encoded))


def _checked_resolution(profiles: profile_pb2.Profiles) -> Resolved | None:
    if validation.profiles_violations(profiles, "profiles").total:
        return None
    resolution = resolve(profiles)
    return Resolved(
        resolution,
        route_prices(profiles, resolution.route),
        _profile_limits(profiles, resolution),
    )


def _valid_resolution(profiles: profile_pb2.Profiles) -> Resolved | None:
    """What `profiles` resolve to when they break no profile rule, else None (validation then
    names what they break). It is a function of the profiles alone, so small ones are resolved
    once per encoding; the messages are shared by the calls that sent them and never changed
    (responses copy them)."""
    encoded = profiles.SerializeToString()
    if len(encoded) > _CACHED_PROFILE_BYTES:
        return _checked_resolution(profiles)
    return _resolved_encoding(encoded)


@functools.lru_cache(maxsize=_CACHED_PROFILES)
def _explicit_limits_encoding(encoded: bytes) -> TrimLimits:
    return _explicit_limits(svc.ExplicitLimits.FromString(encoded))


def _limits(explicit: svc.ExplicitLimits) -> TrimLimits:
    """The limits `explicit` gives: a function of them alone, so small ones are read once per
    encoding (like profiles, see `_valid_resolution`)."""
    encoded = explicit.SerializeToString()
    if len(encoded) > _CACHED_PROFILE_BYTES:
        return _explicit_limits(explicit)
    return _explicit_limits_encoding(encoded)


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


def _usage(usage: trim_pb2.ReportedUsage) -> ReportedUsage:
    return ReportedUsage(
        reported=usage.reported_input_tokens,
        estimated=usage.estimated_input_tokens,
        tool_schema=usage.tool_schema_tokens,
    )


# The messages below are filled in place, in the response that sends them: a field is set only
# when it is not its default (which proto3 does not write anyway), so a call builds no message
# twice and sets only what it sends.


def _fill_outcome(outcome: svc.TrimOutcome, plan: TrimPlan, counts: Counts) -> None:
    drop = plan.drop
    if drop:
        outcome.trimmed = True  # which sets the outcome in the response
        outcome.dropped_messages = len(drop)
        dropped = outcome.dropped_range
        dropped.start = drop.start
        dropped.end = drop.stop
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


def _fill_history_trimmed(
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
    trimmed.dropped_messages = len(plan.drop)
    if plan.dropped_turns:
        trimmed.dropped_turns = plan.dropped_turns
    if plan.kept_turns:
        trimmed.kept_turns = plan.kept_turns
    _fill_counts(trimmed, counts)
    if budget_tokens:
        trimmed.budget_tokens = budget_tokens
    if turn_limit and reason == trim_pb2.TRIM_REASON_TURN_LIMIT:
        trimmed.turn_limit = turn_limit
    if plan.breadcrumb_at is not None:
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


# Enum names by value: `Name` is a Python call that costs more than the rest of a log line's args.
_MODE_NAMES = {mode: trim_pb2.TrimMode.Name(mode) for mode in trim_pb2.TrimMode.values()}
_PATH_NAMES = {path: trim_pb2.CallerPath.Name(path) for path in trim_pb2.CallerPath.values()}
# Metric and log label of each TrimMode's reason; row caps have no TrimReason of their own.
_MODE_REASONS = {
    trim_pb2.TRIM_MODE_TOKEN_BUDGET: "token_budget",
    trim_pb2.TRIM_MODE_OVERFLOW_RECOVERY: "token_budget",
    trim_pb2.TRIM_MODE_TURN_COUNT: "turn_limit",
    trim_pb2.TRIM_MODE_ROW_COUNT: "row_limit",
    trim_pb2.TRIM_MODE_REPORTED_USAGE: "token_budget",
}


def _record_trim(
    path: trim_pb2.CallerPath.ValueType, mode: str, reason: str, plan: TrimPlan
) -> None:
    """Logs and counts a trim that dropped history (sizes and counts only)."""
    dropped_messages = len(plan.drop)
    if dropped_messages:
        metrics.observe_trim(
            path,
            reason,
            dropped_turns=plan.dropped_turns,
            dropped_messages=dropped_messages,
            tokens_before=plan.tokens_before,
            tokens_after=plan.tokens_after,
        )
        if tracing.recording():  # the attributes are built only for a span
            tracing.annotate(
                {
                    f"turnkeeper.trim.{reason}.dropped_turns": plan.dropped_turns,
                    f"turnkeeper.trim.{reason}.dropped_messages": dropped_messages,
                    f"turnkeeper.trim.{reason}.tokens_before": plan.tokens_before,
                    f"turnkeeper.trim.{reason}.tokens_after": plan.tokens_after,
                }
            )
        log_line(
            log,
            logging.INFO,
            "trimmed path=%s mode=%s reason=%s dropped_messages=%d dropped_turns=%d "
            "kept_turns=%d tokens_before=%d tokens_after=%d",
            _PATH_NAMES[path],
            mode,
            reason,
            dropped_messages,
            plan.dropped_turns,
            plan.kept_turns,
            plan.tokens_before,
            plan.tokens_after,
        )


def _extras(request: svc.PrepareModelCallRequest | svc.CheckCapacityRequest) -> Extras:
    return Extras.of(request.hook_texts, request.tool_schemas, request.reserved_output_tokens)


def _preflight(
    view: HistoryView, extras: Extras, resolution: resolution_pb2.Resolution
) -> trim_pb2.CapacityReport:
    """The capacity pre-flight of a prepared request (§3, §9 Capacity); raises unless it fits."""
    report = check_capacity(view.total_tokens, view.image_tokens, extras, resolution.capacity)
    if not report.fits:
        raise _capacity_exceeded(report, resolution.route)
    return report


def _capacity_exceeded(
    report: trim_pb2.CapacityReport, route: resolution_pb2.Route
) -> RequestError:
    # An unknown capacity is never shown as a number: the safety fallback is not the model's
    # capacity (§3 Route, §10.5).
    capacity = report.capacity
    limit = (
        f"the model's context window is {capacity.model_context_window}"
        if capacity.known
        else "the model's context window is unknown and the request exceeds turnkeeper's "
        "safety limit for an unknown window"
    )
    description = (
        f"the prepared request needs {report.total_tokens} tokens but {limit} (messages "
        f"{report.message_tokens}, hooks {report.hook_tokens}, tool schemas "
        f"{report.tool_schema_tokens}, reserved output {report.reserved_output_tokens})"
    )
    metadata = {
        "total_tokens": str(report.total_tokens),
        "capacity_known": str(capacity.known).lower(),
    }
    if capacity.known:
        metadata["capacity_tokens"] = str(capacity.model_context_window)
    failure = error_details_pb2.PreconditionFailure(
        violations=[
            error_details_pb2.PreconditionFailure.Violation(
                type="CONTEXT_WINDOW",
                subject=f"{route.provider}/{route.model}",
                description=description,
            )
        ]
    )
    return RequestError(
        grpc.StatusCode.FAILED_PRECONDITION,
        errors_pb2.ERROR_REASON_CONTEXT_WINDOW_EXCEEDED,
        description,
        details=[failure, report],
        metadata=metadata,
    )


def estimate_tokens(request: svc.EstimateTokensRequest, source: HistorySource) -> Reply:
    view = _valid_view(source)
    # Fields 1, 2, then 3 and 4: the per-row estimates come encoded from the engine.
    head = svc.EstimateTokensResponse(total_tokens=view.total_tokens).SerializeToString()
    tail = svc.EstimateTokensResponse(
        turns=view.turns, image_tokens=view.image_tokens
    ).SerializeToString()
    return Reply(head + view.estimates_field() + tail)


def resolve_budget(request: svc.ResolveBudgetRequest) -> Reply:
    resolved = _valid_resolution(request.profiles)
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
    usage = _usage(request.reported_usage)
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
    mode, path = request.mode, request.caller_path
    # Explicit limits resolve nothing; profiles (the request's, or none) are resolved.
    limits: TrimLimits | None
    if request.WhichOneof("limits") == "explicit_limits":
        resolved, limits = None, _limits(request.explicit_limits)
    else:
        resolved = _valid_resolution(request.profiles)
        limits = None if resolved is None else resolved.limits
    if (
        limits is not None
        and validation.plain_trim_request(
            mode,
            path,
            budget_given=limits.budget_tokens is not None,
            reported_usage=request.HasField("reported_usage"),
        )
        and validation.caller_fits(request)
    ):
        view = _valid_view(source)
    else:
        violations = validation.trim_request_violations(request, resolved is not None)
        view = _valid_view(source, violations)
        assert limits is not None, "profiles without a resolution break a rule"
    path = path or trim_pb2.CALLER_PATH_AGENT
    # Only the structured agent path shows trimming to the model and to subscribers (§7).
    emits = path == trim_pb2.CALLER_PATH_AGENT
    crumb = limits.breadcrumb_cost if emits else None
    # The modes outside the table are the row cap (validation admits no other).
    planner = _MODE_PLANNERS.get(mode, _plan_row_count)
    plan, counts, recovery = planner(request, view, limits, crumb)
    reason = (
        trim_pb2.TRIM_REASON_TURN_LIMIT
        if mode == trim_pb2.TRIM_MODE_TURN_COUNT
        else trim_pb2.TRIM_REASON_TOKEN_BUDGET
    )
    output = view.apply(plan, limits.breadcrumb_text)
    _record_trim(path, _MODE_NAMES[mode], _MODE_REASONS.get(mode, "unknown"), plan)

    response = svc.TrimHistoryResponse()
    _fill_outcome(response.outcome, plan, counts)
    if limits.resolution is not None:
        response.resolution.CopyFrom(limits.resolution)
    if recovery is not None:
        response.recovery.CopyFrom(recovery.report)
    events: tuple[trim_pb2.HistoryTrimmed, ...] = ()
    if emits and plan.drop:
        # Published as it is (nothing changes the response once it is encoded). The feed then
        # retains this small response with it, which costs no more memory than a payload apart.
        trimmed = response.history_trimmed
        _fill_history_trimmed(
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
        events = (trimmed,)
    return Reply(output.history_field(response.SerializeToString()), events)


TrimStep: TypeAlias = tuple[TrimPlan, trim_pb2.TrimReason.ValueType, Counts]
"""One trim of a preparation: what it drops, why, and the counts it reports."""


def prepare_model_call(request: svc.PrepareModelCallRequest, source: HistorySource) -> Reply:
    """The preparation of one provider request, in the spec's order (§13.2): resolve, sweep,
    turn limit, projection, budget trim (or overflow recovery), breadcrumb, pre-flight, meter."""
    view, resolved = _resolve_preparation(request, source)
    resolution, limits = resolved.resolution, resolved.limits
    tokens_before = view.total_tokens
    swept, removals = view.sweep()  # §10.2
    turn_trim, limited = _apply_turn_limit(swept, resolution, limits)
    # Spec §13's projection of old tool output goes here, on the turn-limited history: everything
    # after it (the budget trim, calibration, recovery, the pre-flight, the meter) then measures
    # the request as it will be sent.
    extras = _extras(request)
    budget_trim, recovery = _trim_to_budget_or_recover(request, limited, resolution, limits, extras)
    prepared = _place_breadcrumb(limited, budget_trim, limits)
    # Nothing is sent when it does not fit, so nothing is published: the runtime must change it.
    report = _preflight(prepared, extras, resolution)
    caller = request.caller if request.HasField("caller") else None
    trims = _visible_trims((turn_trim, budget_trim), recovery, resolution, caller)
    response = svc.PrepareModelCallResponse()
    _fill_preparation(response, resolution, trims, removals, report, tokens_before, recovery)
    meter = _meter(response, report, request, resolved)
    return Reply(
        prepared.history_field(response.SerializeToString()),
        tuple(trims),
        (caller, resolution.route, meter),
    )


def _resolve_preparation(
    request: svc.PrepareModelCallRequest, source: HistorySource
) -> tuple[HistoryView, Resolved]:
    """The history view and what the profiles resolve to, once the request passed validation."""
    resolved = _valid_resolution(request.profiles)
    view = _valid_view(source, validation.prepare_request_violations(request, resolved is not None))
    assert resolved is not None, "profiles without a resolution break a rule"
    return view, resolved


def _apply_turn_limit(
    swept: HistoryView, resolution: resolution_pb2.Resolution, limits: TrimLimits
) -> tuple[TrimStep, HistoryView]:
    """§6 on the swept history, with its §11 cut; returns the trim and the history it leaves."""
    limited = swept.plan_turn_count(
        resolution.max_history_turns, limits.breadcrumb_cost, resolution.history_trim_low_water
    )
    step = (limited, trim_pb2.TRIM_REASON_TURN_LIMIT, Counts.estimated(limited))
    return step, swept.apply(limited, limits.breadcrumb_text)


def _trim_to_budget_or_recover(
    request: svc.PrepareModelCallRequest,
    limited: HistoryView,
    resolution: resolution_pb2.Resolution,
    limits: TrimLimits,
    extras: Extras,
) -> tuple[TrimStep, Recovery | None]:
    """The budget trim of the turn-limited history, or, when recovery is asked and can trim, the
    §10.1 recovery in its place; also returns the recovery, asked or not."""
    baseline = _budget_trim(request, limited, resolution, limits, extras)
    if not request.overflow_recovery:
        return baseline, None
    # 2/3 of what this call would have sent without recovery (§10.1), as one trim of the
    # turn-limited history (core.recovery shows it drops what the two trims would).
    recovery = plan_recovery(
        limited,
        limits.breadcrumb_cost,
        baseline=baseline[0],
        budget_tokens=resolution.budget_tokens,
        route=resolution.route,
    )
    if not recovery.report.trimmed:
        return baseline, recovery  # none possible: the baseline is what is sent
    plan = recovery.plan
    return (plan, trim_pb2.TRIM_REASON_TOKEN_BUDGET, Counts.estimated(plan)), recovery


def _budget_trim(
    request: svc.PrepareModelCallRequest,
    limited: HistoryView,
    resolution: resolution_pb2.Resolution,
    limits: TrimLimits,
    extras: Extras,
) -> TrimStep:
    """§9's token-budget trim, calibrated by reported usage when given (§10.3, §16.2). §12: it
    leaves room for what the pre-flight adds; its §11 step is the budget's."""
    budget, fraction = resolution.budget_tokens, resolution.history_trim_low_water
    space = room(resolution.capacity, extras) if budget else None
    crumb = limits.breadcrumb_cost
    if request.HasField("reported_usage"):
        usage = _usage(request.reported_usage)
        calibrated = plan_reported_usage(limited, budget, usage, crumb, fraction, space)
        return (
            calibrated.plan,
            trim_pb2.TRIM_REASON_TOKEN_BUDGET,
            Counts.reported(calibrated, budget),
        )
    target = budget if space is None else min(budget, space)
    plan = limited.plan_token_budget(target, crumb, fraction, step_budget=budget)
    return plan, trim_pb2.TRIM_REASON_TOKEN_BUDGET, Counts.estimated(plan)


def _place_breadcrumb(
    limited: HistoryView, budget_trim: TrimStep, limits: TrimLimits
) -> HistoryView:
    """The prepared history: the budget trim applied, its breadcrumb after the system rows."""
    return limited.apply(budget_trim[0], limits.breadcrumb_text)


def _visible_trims(
    steps: tuple[TrimStep, ...],
    recovery: Recovery | None,
    resolution: resolution_pb2.Resolution,
    caller: trim_pb2.CallerContext | None,
) -> list[trim_pb2.HistoryTrimmed]:
    """§7: one event per trim that dropped history, logged and counted. Published apart from the
    response: what the feed retains must not hold the response's other fields (its orphan
    removals may be many)."""
    recovered = recovery is not None and recovery.report.trimmed
    trims: list[trim_pb2.HistoryTrimmed] = []
    for plan, reason, counts in steps:
        if not plan.drop:
            continue
        trimmed = trim_pb2.HistoryTrimmed()
        trims.append(trimmed)
        _fill_history_trimmed(
            trimmed,
            plan,
            reason,
            counts,
            overflow_recovery=recovered and reason == trim_pb2.TRIM_REASON_TOKEN_BUDGET,
            budget_tokens=resolution.budget_tokens,
            turn_limit=resolution.max_history_turns,
            resolution=resolution,
            caller=caller,
        )
        label = "turn_limit" if reason == trim_pb2.TRIM_REASON_TURN_LIMIT else "token_budget"
        _record_trim(trim_pb2.CALLER_PATH_AGENT, "PREPARE_MODEL_CALL", label, plan)
    return trims


def _fill_preparation(
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


def _meter(
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
        response.input_cost.CopyFrom(input_cost(used, request.cached_input_tokens, prices))
    return meter


def check_capacity_rpc(request: svc.CheckCapacityRequest, source: HistorySource) -> Reply:
    resolved = _valid_resolution(request.profiles)
    if resolved is None:
        _valid_view(source, validation.profiles_violations(request.profiles, "profiles"))
        raise AssertionError("profiles without a resolution break a rule")  # pragma: no cover
    view = _valid_view(source)
    resolution = resolved.resolution
    report = _preflight(view, _extras(request), resolution)
    response = svc.CheckCapacityResponse(report=report, resolution=resolution)
    return Reply(response.SerializeToString())


def sweep_orphans(request: svc.SweepOrphansRequest, source: HistorySource) -> Reply:
    swept, removals = _valid_view(source).sweep()
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
