"""PlanCompaction (spec §15.3): what to condense instead of dropping it, and a summary request
that fits the summarizer's route. It never calls a model: the runtime sends the request and
applies the plan with the answer.

It runs the preparation's own steps (rpcs.py: resolve, sweep, turn limit, projection, budget
trim), so it condenses exactly the turns a `PrepareModelCall` of the same request would drop now.
Those are the oldest unpinned turns (every trim keeps pinned ones, §15.1), so the turns the
preparation lost are counted, then found in the swept history projected whole: the request the
preparation would send without this call's cut, which the summary request is cut from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turnkeeper.core.compaction import DEFAULT_SUMMARY_INSTRUCTION, DEFAULT_SUMMARY_OUTPUT_TOKENS
from turnkeeper.core.pricing import price_text
from turnkeeper.core.saturation import saturate
from turnkeeper.server.api.capacity_gate import request_extras
from turnkeeper.server.api.prepared_rows import before_projection, input_rows_of_swept
from turnkeeper.server.api.responses import Reply
from turnkeeper.server.api.rpcs import apply_turn_limit, budget_trim, removed_rows, valid_view
from turnkeeper.server.api.trim_limits import Resolved, valid_resolution
from turnkeeper.server.contract import validation
from turnkeeper.server.engine.protocol import (
    CollapsedTurn,
    HistorySource,
    HistoryView,
    Projection,
    TurnSpan,
)
from turnkeeper.v1 import events_pb2, history_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

NOTHING_TO_CONDENSE = svc.COMPACTION_REFUSAL_REASON_NOTHING_TO_CONDENSE
TOO_LARGE = svc.COMPACTION_REFUSAL_REASON_TOO_LARGE
NO_SAVING = svc.COMPACTION_REFUSAL_REASON_NO_SAVING


def plan_compaction(request: svc.PlanCompactionRequest, source: HistorySource) -> Reply:
    """§15.3's plan, or the refusal that says why there is none; the plan is published as a
    compaction update for subscribers that opted in to meter updates."""
    view, resolved, summarizer = _resolve(request, source)
    resolution = resolved.resolution
    response = svc.PlanCompactionResponse()
    response.resolution.CopyFrom(resolution)
    swept, removals = view.sweep()  # §10.2
    lost, untrimmed = _lost_turns(request, swept, resolved)
    if not lost:
        response.refusal.reason = NOTHING_TO_CONDENSE
        return Reply(response.SerializeToString())
    # The request the preparation would send without this call's cut: its own projection when
    # the turn limit dropped nothing.
    whole, projection = untrimmed or swept.project(resolution.keep_tool_context_turns)
    spans = whole.turn_spans()
    candidates = [span for span in spans if not span.pinned][:lost]
    instruction = (
        request.instruction
        or request.profiles.runtime.summary_instruction
        or DEFAULT_SUMMARY_INSTRUCTION
    )
    output_tokens = (
        request.summary_output_tokens
        if request.HasField("summary_output_tokens")
        else DEFAULT_SUMMARY_OUTPUT_TOKENS
    )
    extras = request_extras(request)
    priced_extras = extras.hook_tokens + extras.schema_tokens
    capacity = summarizer.resolution.capacity.safety_tokens
    added = price_text(instruction) + priced_extras + output_tokens

    def request_tokens(turns: int) -> int:
        """The summary request through the `turns` oldest candidates, with everything the
        summarizer's pre-flight adds, priced without building it."""
        return whole.tokens_through(candidates[turns - 1].rows.stop - 1) + added

    condensed_turns = _longest_fitting(
        len(candidates), lambda turns: request_tokens(turns) <= capacity
    )
    if not condensed_turns:
        refusal = response.refusal
        refusal.reason = TOO_LARGE
        refusal.request_tokens = saturate(request_tokens(1))
        refusal.capacity_tokens = capacity
        return Reply(response.SerializeToString())
    stop = candidates[condensed_turns - 1].rows.stop
    condensed = _condensed_ranges(whole.summary_row, candidates[0].rows.start, stop, spans)
    saved = max(sum(_tokens(whole, rows) for rows in condensed) - output_tokens, 0)
    if saved < request.min_saved_tokens:
        refusal = response.refusal
        refusal.reason = NO_SAVING
        refusal.saved_tokens = saturate(saved)
        refusal.min_saved_tokens = request.min_saved_tokens
        return Reply(response.SerializeToString())
    plan = response.plan
    summary_request = whole.summary_request(stop, instruction)
    plan.summary_request.CopyFrom(_history(summary_request))
    removed = removed_rows(removals)
    plan.condensed_rows.extend(
        _input_range(rows, projection.collapsed, removed) for rows in condensed
    )
    plan.pinned_turns.extend(
        _input_range(span.rows, projection.collapsed, removed)
        for span in spans
        if span.pinned and span.rows.start < stop
    )
    plan.summary_output_tokens = output_tokens
    plan.summary_request_tokens = saturate(summary_request.total_tokens + priced_extras)
    plan.summarizer_resolution.CopyFrom(summarizer.resolution)
    plan.saved_tokens = saturate(saved)
    plan.condensed_turns = condensed_turns
    planned = events_pb2.CompactionPlanned(
        condensed_turns=condensed_turns,
        saved_tokens=plan.saved_tokens,
        summary_request_tokens=plan.summary_request_tokens,
    )
    caller = request.caller if request.HasField("caller") else None
    return Reply(response.SerializeToString(), (), (caller, resolution.route, planned, None, 0))


def _lost_turns(
    request: svc.PlanCompactionRequest, swept: HistoryView, resolved: Resolved
) -> tuple[int, tuple[HistoryView, Projection] | None]:
    """The turns the preparation's trims drop now (§15.3 step 1): its turn limit, then its budget
    trim of the projection, with the low water's grid and the room of §12, calibrated by
    reported usage when given. Every trim keeps pinned turns, so these are the oldest unpinned
    turns, and the prepared history has that many turns fewer. With them, the projection of the
    swept history when the turn limit left it whole (None when it dropped turns)."""
    resolution, limits = resolved.resolution, resolved.limits
    turn_step, limited = apply_turn_limit(swept, resolution, limits)
    projected, projection = limited.project(resolution.keep_tool_context_turns)
    plan = budget_trim(request, projected, resolution, limits, request_extras(request))[0]
    lost = max(swept.turns - projected.apply(plan, limits.breadcrumb_text).turns, 0)
    return lost, None if turn_step[0].trimmed else (projected, projection)


def _resolve(
    request: svc.PlanCompactionRequest, source: HistorySource
) -> tuple[HistoryView, Resolved, Resolved]:
    """The history view, the call's resolution and the summarizer's (the same profiles with the
    summarizer's selection; the call's own when it has none), once the request passed
    validation."""
    resolved = valid_resolution(request.profiles)
    violations = validation.compaction_request_violations(request, resolved is not None)
    view = valid_view(source, violations)
    assert resolved is not None, "profiles without a resolution break a rule"
    if not request.HasField("summarizer_selection"):
        return view, resolved, resolved
    profiles = type(request.profiles)()
    profiles.CopyFrom(request.profiles)
    profiles.selection.CopyFrom(request.summarizer_selection)
    summarizer = valid_resolution(profiles)
    assert summarizer is not None, "a valid selection in valid profiles resolves"
    return view, resolved, summarizer


def _longest_fitting(count: int, fits: Callable[[int], bool]) -> int:
    """The largest `n` in 1..count with `fits(n)`, 0 when none: a summary request only grows with
    the turns it holds, so the search halves the candidates each time."""
    low, high = 0, count
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _condensed_ranges(
    summary_row: int | None, first: int, stop: int, spans: Sequence[TurnSpan]
) -> list[range]:
    """The rows condensed, from the old summary row (or the first turn condensed) to `stop`, as
    ascending ranges split by the pinned turns among them."""
    start = first if summary_row is None else summary_row
    ranges: list[range] = []
    for span in spans:
        if not span.pinned or span.rows.stop <= start or span.rows.start >= stop:
            continue
        if span.rows.start > start:
            ranges.append(range(start, span.rows.start))
        start = span.rows.stop
    if start < stop:
        ranges.append(range(start, stop))
    return ranges


def _tokens(view: HistoryView, rows: range) -> int:
    return view.tokens_through(rows.stop - 1) - view.tokens_through(rows.start - 1)


def _input_range(
    rows: range, collapsed: Sequence[CollapsedTurn], removed: Sequence[int]
) -> trim_pb2.IndexRange:
    """A range of the swept history's projection as the request rows it stands for: through the
    projection (a collapsed turn brings all its rows), then through the sweep."""
    swept = range(before_projection(rows.start, collapsed), before_projection(rows.stop, collapsed))
    request_rows = input_rows_of_swept(swept, removed, claims_before=True)
    return trim_pb2.IndexRange(start=request_rows.start, end=request_rows.stop)


def _history(view: HistoryView) -> history_pb2.History:
    """The view's history as a message: `history_field` writes it as field 1, which is the history
    of every request too."""
    return svc.PlanCompactionRequest.FromString(view.history_field()).history
