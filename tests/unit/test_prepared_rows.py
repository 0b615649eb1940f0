"""The index arithmetic of a preparation (spec §13.2 dropped_input_rows, §14 breakpoints), checked
against a row-by-row model of the same steps."""

from __future__ import annotations

from turnkeeper.core.trimming import TrimPlan
from turnkeeper.server.api.prepared_rows import (
    before_projection,
    before_sweep,
    before_trim,
    cache_breakpoints,
    dropped_input_rows,
    dropped_spans,
    prepared_index,
)
from turnkeeper.server.engine.protocol import CollapsedTurn


def _plan(
    drop: range,
    crumb_at: int | None,
    kept: tuple[range, ...] = (),
    crumb_from: int | None = None,
) -> TrimPlan:
    """A plan with only the index fields the arithmetic reads."""
    return TrimPlan(drop, crumb_at, 0, 0, 0, 0, 0, kept_in_drop=kept, breadcrumb_from=crumb_from)


def _apply(rows: list[object], plan: TrimPlan) -> list[object]:
    """The output of `plan` on labelled rows, as `TrimPlan` defines it."""
    drop = plan.drop
    kept = [row for span in plan.kept_in_drop for row in rows[span.start : span.stop]]
    crumb: list[object] = []
    if plan.breadcrumb_at is not None:
        crumb = [rows[plan.breadcrumb_from] if plan.breadcrumb_from is not None else "crumb"]
    return [*rows[: drop.start], *kept, *crumb, *rows[drop.stop :]]


_NO_TRIM = _plan(range(1, 1), None)


def test_before_sweep_skips_removed_rows() -> None:
    removed = [1, 2, 5]
    # Input rows 0 3 4 6 7 remain: swept row s is the s-th of them.
    assert [before_sweep(s, removed) for s in range(5)] == [0, 3, 4, 6, 7]
    assert before_sweep(3, []) == 3


def test_before_trim_undoes_the_drop_and_its_breadcrumb() -> None:
    # Input [S, a, b, c, d]; drop 1..3, a breadcrumb in its place: output [S, crumb, c, d].
    assert before_trim(2, _plan(range(1, 3), 1)) == 3
    assert before_trim(0, _plan(range(1, 3), 1)) == 0
    # An existing breadcrumb in P: input [S, crumb, a, b, c], drop 2..4: output [S, crumb, c].
    assert before_trim(2, _plan(range(2, 4), None)) == 4
    assert before_trim(5, _NO_TRIM) == 5


def test_before_trim_and_prepared_index_with_kept_pinned_turns_and_a_moved_breadcrumb() -> None:
    # Input [S, crumb, p1 p1, a a, p2, b b, c]: drop 1..8 keeps p1 (2-3) and p2 (6), and moves
    # the breadcrumb after them: output [S, p1 p1, p2, crumb, c].
    rows: list[object] = ["S", "crumb", "p1", "p1'", "a", "a'", "p2", "b", "b'", "c"]
    plan = _plan(range(1, 9), 4, (range(2, 4), range(6, 7)), crumb_from=1)
    output = _apply(rows, plan)
    assert output == ["S", "p1", "p1'", "p2", "crumb", "c"]
    assert [rows[before_trim(i, plan)] for i in range(len(output))] == output
    for row, label in enumerate(rows):
        index = prepared_index(row, plan)
        assert (index is None) == (label in ("a", "a'", "b", "b'"))
        assert index is None or output[index] == label
    assert dropped_spans(plan) == [range(4, 6), range(7, 9)]
    # A new breadcrumb after a kept pinned turn: input [S, a, p, b, c], output [S, p, crumb, c].
    new = _plan(range(1, 4), 2, (range(2, 3),))
    assert _apply(["S", "a", "p", "b", "c"], new) == ["S", "p", "crumb", "c"]
    assert [before_trim(i, new) for i in (0, 1, 3)] == [0, 2, 4]
    assert [prepared_index(row, new) for row in range(5)] == [0, None, 1, None, 3]
    assert dropped_spans(new) == [range(1, 2), range(3, 4)]


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
        turn_plan=_plan(range(1, 3), 1),  # swept rows of turn 1, a breadcrumb in their place
        collapsed=(CollapsedTurn(2, 7, 2, 5),),  # in the turn-limited history [S, crumb, ...]
        budget_plan=_plan(range(2, 5), None),  # the collapsed turn, in the projection
    )
    assert rows == [1, 2, 3, 4, 5, 6, 7, 8]


def test_dropped_input_rows_budget_only_after_uncollapsed_rows() -> None:
    # No sweep, no turn limit; the projection collapsed turn 2 (input 3-7 to projected 3-5); the
    # budget trim dropped turn 1 (rows 1-2) and the collapsed turn (projected 1..5).
    collapsed = (CollapsedTurn(3, 8, 3, 6),)
    budget = _plan(range(1, 6), 1)
    assert dropped_input_rows([], _NO_TRIM, collapsed, budget) == list(range(1, 8))
    # A budget cut before the collapsed turn leaves its rows alone.
    assert dropped_input_rows([], _NO_TRIM, collapsed, _plan(range(1, 3), 1)) == [1, 2]


def test_dropped_input_rows_nothing_dropped_builds_nothing() -> None:
    assert dropped_input_rows([4], _NO_TRIM, (), _plan(range(2, 2), None)) == []


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
    assert (
        dropped_input_rows(removed, _plan(turn_drop, 1), collapsed, _plan(budget_drop, None))
        == expected
    )


def test_dropped_input_rows_leave_out_kept_pinned_turns() -> None:
    # Request: 0 S, 1-2 turn a, 3-4 pinned turn p, 5 an orphan the sweep removes (it sits in p),
    # 6-7 turn b, 8-9 turn c, 10-11 turn d. Swept: [S, a a, p p, b b, c c, d d].
    removed = [5]
    # The turn limit drops a and keeps p ahead of a new breadcrumb: [S, p p, crumb, b b, c c, d d].
    turn_plan = _plan(range(1, 5), 3, (range(3, 5),))
    # The budget trim of that keeps P = [S, p p, crumb] and drops b and c.
    budget_plan = _plan(range(4, 8), None)
    # a (1-2) and b, c (6-9); the orphan 5 stays with p, which is kept.
    assert dropped_input_rows(removed, turn_plan, (), budget_plan) == [1, 2, 6, 7, 8, 9]
    # The budget trim alone, with p inside its drop: [S, p p, crumb, c c, d d] from the swept
    # history; p is kept and the orphan after it is its own.
    budget_alone = _plan(range(1, 7), 3, (range(3, 5),))
    assert dropped_input_rows(removed, _NO_TRIM, (), budget_alone) == [1, 2, 6, 7]


def test_prepared_index_of_a_budget_trim_input_row() -> None:
    assert prepared_index(6, _plan(range(2, 2), None)) == 6
    assert prepared_index(3, _plan(range(2, 5), 2)) is None
    assert prepared_index(6, _plan(range(2, 5), 2)) == 4
    assert prepared_index(6, _plan(range(2, 5), None)) == 3
    assert prepared_index(0, _plan(range(2, 5), 2)) == 0


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
