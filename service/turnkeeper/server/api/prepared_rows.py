"""Where the rows of a prepared request come from and where a runtime should mark it (spec §13.2,
§14): pure index arithmetic over the few ranges a preparation's steps report, never per row.

A preparation's history passes through the sweep (which removes rows), the turn-limit trim (a drop
and perhaps a breadcrumb), the §13.1 projection (collapsed turns, each a pair of ranges) and the
budget trim (a drop and perhaps a breadcrumb). A *boundary* is the index of a row that starts a
kept run, or the length: each step maps it back to the same boundary in the history it was given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turnkeeper.server.engine.protocol import CollapsedTurn


def before_sweep(index: int, removed_rows: Sequence[int]) -> int:
    """The index in the swept history's input of its row `index` (`removed_rows`: the input
    indices of the rows the sweep removed, ascending)."""
    for removed in removed_rows:
        if removed > index:
            break
        index += 1
    return index


def before_trim(boundary: int, drop: range, crumb_inserted: bool) -> int:
    """The boundary in a trim's input of a boundary at or after the trim's kept prefix in its
    output: the drop (and the breadcrumb put in its place) shifts everything after it."""
    if not drop or boundary < drop.start:
        return boundary
    return boundary - int(crumb_inserted) + len(drop)


def before_projection(boundary: int, collapsed: Sequence[CollapsedTurn]) -> int:
    """The boundary in the projection's input of a boundary of the projection: every collapsed
    turn that ends at or before it left out the difference of its two ranges. A budget cut never
    falls inside a collapsed turn (the rows that could start a turn there were left out)."""
    for turn in collapsed:
        if turn.output_stop > boundary:
            break
        boundary += (turn.input_stop - turn.input_start) - (turn.output_stop - turn.output_start)
    return boundary


def input_rows_of_swept(drop: range, removed_rows: Sequence[int]) -> range:
    """The request rows a drop of swept rows stands for: from just after the row before it to
    the row after it, so rows the sweep removed inside or at the edges of the dropped turns
    go with them."""
    start = 0 if drop.start == 0 else before_sweep(drop.start - 1, removed_rows) + 1
    return range(start, before_sweep(drop.stop, removed_rows))


def dropped_input_rows(
    removed_rows: Sequence[int],
    turn_drop: range,
    turn_crumb_inserted: bool,
    collapsed: Sequence[CollapsedTurn],
    budget_drop: range,
) -> list[int]:
    """§13.2: the sorted request indices of every row of every turn a preparation's trims
    dropped. `turn_drop` is the turn-limit trim's drop in swept rows, `budget_drop` the budget
    trim's (or recovery's) in projected rows; a dropped collapsed turn brings all its rows."""
    if not turn_drop and not budget_drop:
        return []
    swept: list[range] = []
    if turn_drop:
        swept.append(turn_drop)
    if budget_drop:
        start, stop = (
            before_trim(before_projection(boundary, collapsed), turn_drop, turn_crumb_inserted)
            for boundary in (budget_drop.start, budget_drop.stop)
        )
        swept.append(range(start, stop))
    rows: list[int] = []
    for drop in swept:
        request_rows = input_rows_of_swept(drop, removed_rows)
        # The two drops are consecutive prefixes of the body: the second starts where the first
        # ends, but a removed row at their junction is claimed by both.
        first = max(request_rows.start, rows[-1] + 1) if rows else request_rows.start
        rows.extend(range(first, request_rows.stop))
    return rows


def prepared_index(row: int, drop: range, crumb_inserted: bool) -> int | None:
    """The index in the prepared history of row `row` of the budget trim's input; None when the
    trim dropped it (the kept prefix before the drop holds only system rows and a breadcrumb)."""
    if not drop:
        return row
    if row < drop.stop:
        return None if row >= drop.start else row
    return row - len(drop) + int(crumb_inserted)


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
