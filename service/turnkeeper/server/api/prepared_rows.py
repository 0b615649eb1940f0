"""Where the rows of a prepared request come from and where a runtime should mark it (spec §13.2,
§14): pure index arithmetic over the few ranges a preparation's steps report, never per row.

A preparation's history passes through the sweep (which removes rows), the turn-limit trim (a drop
and perhaps a breadcrumb), the §13.1 projection (collapsed turns, each a pair of ranges) and the
budget trim (a drop and perhaps a breadcrumb). A *boundary* is the index of a row that starts a
kept run, or the length: each step maps it back to the same boundary in the history it was given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turnkeeper.core.trimming import TrimPlan
from turnkeeper.server.engine.protocol import CollapsedTurn


def before_sweep(index: int, removed_rows: Sequence[int]) -> int:
    """The index in the swept history's input of its row `index` (`removed_rows`: the input
    indices of the rows the sweep removed, ascending)."""
    for removed in removed_rows:
        if removed > index:
            break
        index += 1
    return index


def dropped_spans(plan: TrimPlan) -> list[range]:
    """The rows a trim really dropped, ascending runs of its input: its drop without the pinned
    turns it keeps and the breadcrumb it moves (§15.1)."""
    drop = plan.drop
    kept = list(plan.kept_in_drop)
    if plan.breadcrumb_from is not None:
        kept.append(range(plan.breadcrumb_from, plan.breadcrumb_from + 1))
        kept.sort(key=lambda span: span.start)
    spans: list[range] = []
    start = drop.start
    for span in kept:
        if span.start > start:
            spans.append(range(start, span.start))
        start = max(start, span.stop)
    if drop.stop > start:
        spans.append(range(start, drop.stop))
    return spans


def before_trim(row: int, plan: TrimPlan) -> int:
    """The input index of row `row` of a trim's output, which copies an input row (not a new
    breadcrumb): the output is the rows before the drop, its kept pinned turns, the breadcrumb,
    then the rows after the drop (`TrimPlan`)."""
    drop = plan.drop
    if not drop or row < drop.start:
        return row
    position = drop.start
    for kept in plan.kept_in_drop:
        if row < position + len(kept):
            return kept.start + row - position
        position += len(kept)
    if plan.breadcrumb_at is not None:
        if row == position and plan.breadcrumb_from is not None:
            return plan.breadcrumb_from
        position += 1
    return drop.stop + row - position


def before_projection(boundary: int, collapsed: Sequence[CollapsedTurn]) -> int:
    """The boundary in the projection's input of a boundary of the projection: every collapsed
    turn that ends at or before it left out the difference of its two ranges. A budget cut never
    falls inside a collapsed turn (the rows that could start a turn there were left out)."""
    for turn in collapsed:
        if turn.output_stop > boundary:
            break
        boundary += (turn.input_stop - turn.input_start) - (turn.output_stop - turn.output_start)
    return boundary


def input_rows_of_swept(span: range, removed_rows: Sequence[int], claims_before: bool) -> range:
    """The request rows a dropped span of swept rows stands for: to the row after it, so rows the
    sweep removed inside or after the dropped turns go with them, and, when `claims_before`, from
    just after the row before it. A span that follows a kept pinned turn does not claim the rows
    removed before it: they sat in that turn."""
    if not claims_before:
        start = before_sweep(span.start, removed_rows)
    elif span.start == 0:
        start = 0
    else:
        start = before_sweep(span.start - 1, removed_rows) + 1
    return range(start, before_sweep(span.stop, removed_rows))


def _follows_kept(start: int, plan: TrimPlan) -> bool:
    return any(kept.stop == start for kept in plan.kept_in_drop)


def dropped_input_rows(
    removed_rows: Sequence[int],
    turn_plan: TrimPlan,
    collapsed: Sequence[CollapsedTurn],
    budget_plan: TrimPlan,
) -> list[int]:
    """§13.2: the sorted request indices of every row of every turn a preparation's trims
    dropped, pinned turns kept inside a drop (and a moved breadcrumb) excluded (§15.1).
    `turn_plan` is the turn-limit trim of the swept rows, `budget_plan` the budget trim (or
    recovery) of the projected rows; a dropped collapsed turn brings all its rows."""
    # (span of swept rows, whether it claims the removed rows before it), in ascending order.
    swept: list[tuple[range, bool]] = [
        (span, not _follows_kept(span.start, turn_plan)) for span in dropped_spans(turn_plan)
    ]
    for span in dropped_spans(budget_plan):
        # Every span starts and ends on a turn boundary of the projection, never inside a
        # collapsed turn; in the turn-limited history it is one run of the rows after the
        # turn limit's drop (the rows before it are the fixed prefix and kept pinned turns).
        start, stop = (
            before_projection(boundary, collapsed) for boundary in (span.start, span.stop)
        )
        first, last = before_trim(start, turn_plan), before_trim(stop - 1, turn_plan)
        claims = not _follows_kept(span.start, budget_plan) and not _follows_kept(first, turn_plan)
        swept.append((range(first, last + 1), claims))
    rows: list[int] = []
    for span, claims_before in swept:
        request_rows = input_rows_of_swept(span, removed_rows, claims_before)
        # Consecutive spans can meet: a removed row at their junction is claimed by both.
        first = max(request_rows.start, rows[-1] + 1) if rows else request_rows.start
        rows.extend(range(first, request_rows.stop))
    return rows


def prepared_index(row: int, plan: TrimPlan) -> int | None:
    """The index in the prepared history of row `row` of the budget trim's input; None when the
    trim dropped it. Kept pinned turns and a moved breadcrumb move ahead (§15.1)."""
    drop = plan.drop
    if not drop or row < drop.start:
        return row
    position = drop.start
    for kept in plan.kept_in_drop:
        if row in kept:
            return position + row - kept.start
        position += len(kept)
    if row == plan.breadcrumb_from:
        return plan.breadcrumb_at
    if row < drop.stop:
        return None
    return position + int(plan.breadcrumb_at is not None) + row - drop.stop


def cache_breakpoints(
    candidates: Sequence[int | None],
    tokens_through: Callable[[int], int],
    tool_schema_tokens: int,
    min_cacheable_tokens: int | None,
) -> list[int]:
    """§14: the candidates kept, in order: each must come after the last one kept and, when the
    route has a minimum, the tool schemas plus the prepared rows through it must reach it."""
    kept: list[int] = []
    for candidate in candidates:
        if candidate is None or candidate < 0 or (kept and candidate <= kept[-1]):
            continue
        if (
            min_cacheable_tokens is not None
            and tool_schema_tokens + tokens_through(candidate) < min_cacheable_tokens
        ):
            continue
        kept.append(candidate)
    return kept
