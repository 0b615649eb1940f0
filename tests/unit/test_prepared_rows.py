"""The index arithmetic of a preparation (spec §13.2 dropped_input_rows, §14 breakpoints), checked
against a row-by-row model of the same steps."""

from __future__ import annotations

from turnkeeper.server.api.prepared_rows import (
    before_projection,
    before_sweep,
    before_trim,
    cache_breakpoints,
    dropped_input_rows,
    prepared_index,
)
from turnkeeper.server.engine.protocol import CollapsedTurn


def test_before_sweep_skips_removed_rows() -> None:
    removed = [1, 2, 5]
    # Input rows 0 3 4 6 7 remain: swept row s is the s-th of them.
    assert [before_sweep(s, removed) for s in range(5)] == [0, 3, 4, 6, 7]
    assert before_sweep(3, []) == 3


def test_before_trim_undoes_the_drop_and_its_breadcrumb() -> None:
    # Input [S, a, b, c, d]; drop 1..3, a breadcrumb in its place: output [S, crumb, c, d].
    assert before_trim(2, range(1, 3), True) == 3
    assert before_trim(0, range(1, 3), True) == 0
    # An existing breadcrumb in P: input [S, crumb, a, b, c], drop 2..4: output [S, crumb, c].
    assert before_trim(2, range(2, 4), False) == 4
    assert before_trim(5, range(1, 1), True) == 5


def test_before_projection_adds_back_what_each_earlier_collapse_left_out() -> None:
    # Input [S, u1 a t t r, u2 a t r, u3]: turns at 1-5 and 6-9 collapse to 3 rows each.
    collapsed = (CollapsedTurn(1, 6, 1, 4), CollapsedTurn(6, 10, 4, 7))
    assert before_projection(1, collapsed) == 1
    assert before_projection(4, collapsed) == 6
    assert before_projection(7, collapsed) == 10
    assert before_projection(3, ()) == 3


def test_dropped_input_rows_through_sweep_turn_limit_and_projection() -> None:
    # Vector 413's shape: input 0 S; 1-2 turn 1; 3 an orphan the sweep removes; 4-8 a tool turn
    # that collapses to 3 rows; 9-13, 14-18 tool turns; 19-21 the running turn.
    rows = dropped_input_rows(
        removed_rows=[3],
        turn_drop=range(1, 3),  # swept rows of turn 1
        turn_crumb_inserted=True,
        collapsed=(CollapsedTurn(2, 7, 2, 5),),  # in the turn-limited history [S, crumb, ...]
        budget_drop=range(2, 5),  # the collapsed turn, in the projection
    )
    assert rows == [1, 2, 3, 4, 5, 6, 7, 8]


def test_dropped_input_rows_budget_only_after_uncollapsed_rows() -> None:
    # No sweep, no turn limit; the projection collapsed turn 2 (input 3-7 to projected 3-5); the
    # budget trim dropped turn 1 (rows 1-2) and the collapsed turn (projected 1..5).
    collapsed = (CollapsedTurn(3, 8, 3, 6),)
    assert dropped_input_rows([], range(1, 1), False, collapsed, range(1, 6)) == list(range(1, 8))
    # A budget cut before the collapsed turn leaves its rows alone.
    assert dropped_input_rows([], range(1, 1), False, collapsed, range(1, 3)) == [1, 2]


def test_dropped_input_rows_nothing_dropped_builds_nothing() -> None:
    assert dropped_input_rows([4], range(1, 1), False, (), range(2, 2)) == []


def test_dropped_input_rows_matches_a_row_by_row_model() -> None:
    # A model of the steps on labelled rows: every dropped label, traced back to the input.
    request = list(range(12))  # 0 S, then rows 1..11
    removed = [2, 7]
    swept = [r for r in request if r not in removed]  # [0, 1, 3, 4, 5, 6, 8, 9, 10, 11]
    turn_drop = range(1, 3)  # swept rows 1, 3 (labels)
    limited: list[int | str] = [swept[0], "crumb", *swept[3:]]  # [0, crumb, 4, 5, 6, 8, ...]
    # Collapse labels 4..6 (limited 2..5) into 2 rows standing for all of them.
    collapsed = (CollapsedTurn(2, 5, 2, 4),)
    projected: list[object] = [limited[0], limited[1], ("c", 4, 5, 6), ("c",), *limited[5:]]
    budget_drop = range(2, 4)
    dropped_labels = {1, 3, 4, 5, 6}
    # The orphans 2 (between 1 and 3) and 7 (between 6 and the first kept row 8) go with them.
    expected = sorted(dropped_labels | {2, 7})
    assert projected[budget_drop.stop] == 8
    assert dropped_input_rows(removed, turn_drop, True, collapsed, budget_drop) == expected


def test_prepared_index_of_a_budget_trim_input_row() -> None:
    assert prepared_index(6, range(2, 2), False) == 6
    assert prepared_index(3, range(2, 5), True) is None
    assert prepared_index(6, range(2, 5), True) == 4
    assert prepared_index(6, range(2, 5), False) == 3
    assert prepared_index(0, range(2, 5), True) == 0


def test_cache_breakpoints_order_and_minimum() -> None:
    prefix = [5, 20, 40, 65, 90].__getitem__
    assert cache_breakpoints((0, 3, 4), prefix, 0, None) == [0, 3, 4]
    # Not after the last kept: the collapsed turn's end is the last row, or there is no system row.
    assert cache_breakpoints((0, 4, 4), prefix, 0, None) == [0, 4]
    assert cache_breakpoints((-1, None, 4), prefix, 0, None) == [4]
    # The minimum counts the tool schemas with the rows through the candidate.
    assert cache_breakpoints((0, 3, 4), prefix, 11, 70) == [3, 4]
    assert cache_breakpoints((0, 3, 4), prefix, 11, 76) == [3, 4]
    assert cache_breakpoints((0, 3, 4), prefix, 11, 77) == [4]
    assert cache_breakpoints((0, 3, 4), prefix, 0, 1000) == []
