"""Cache-stable trimming (spec §11): the low-water grid cut, its resolution and its reporting."""

from __future__ import annotations

import math

import pytest
from turnkeeper.core.budget import low_water, resolve
from turnkeeper.core.calibration import ReportedUsage, plan_reported_usage
from turnkeeper.core.trimming import grid_step, plan_token_budget, plan_turn_count
from turnkeeper.core.working import WorkingHistory, breadcrumb_cost
from turnkeeper.server.api import rpcs
from turnkeeper.server.engine.python import PythonHistoryView, python_history_source
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2 as p
from turnkeeper.v1 import trim_pb2

from .histories import assistant, c_chat, chat, conversation, system, user

TEXT = "[earlier turns omitted to fit the context window]"
CRUMB = breadcrumb_cost(TEXT)  # 17
ROW = "x" * 400  # ceil(400 / 4) + 4 = 104 tokens


def example(turns: int) -> h.History:
    """The §11.1 example: a 104-token system row and turns of two 104-token rows."""
    rows = [system(ROW)]
    for _ in range(turns):
        rows += [user(ROW), assistant(ROW)]
    return chat(*rows)


def as_conversation(history: h.History) -> h.History:
    return conversation(*(c_chat(m) for m in history.chat.messages))


@pytest.mark.parametrize("shape", [lambda x: x, as_conversation])
@pytest.mark.parametrize(
    ("turns", "minimal", "grid", "drop_target"),
    [(10, 1, 3, 600), (11, 2, 3, 600), (12, 3, 6, 1200)],
)
def test_spec_example(shape: object, turns: int, minimal: int, grid: int, drop_target: int) -> None:
    """§11.1: 10 turns drop 1 -> 3 at L = 0.7 (S = 600), 11 the same 3, 12 move once to 6."""
    w = WorkingHistory.of(shape(example(turns)))  # type: ignore[operator]
    assert w.pricing.total == 104 + 208 * turns
    plain = plan_token_budget(w.rows, w.pricing, 2000, CRUMB)
    assert (plain.dropped_turns, plain.cut_step, plain.cut_drop_target) == (minimal, 0, 0)
    cut = plan_token_budget(w.rows, w.pricing, 2000, CRUMB, 0.7)
    assert (cut.dropped_turns, cut.cut_step, cut.cut_drop_target) == (grid, 600, drop_target)
    assert cut.dropped_messages == 2 * grid
    assert cut.tokens_after == 104 + 208 * (turns - grid) + CRUMB
    if turns == 10:
        assert cut.tokens_after == 1577  # "1,577 tokens sent"


def test_low_water_never_trims_on_its_own() -> None:
    w = WorkingHistory.of(example(9))  # 1,976 tokens
    plan = plan_token_budget(w.rows, w.pricing, 2000, CRUMB, 0.01)
    assert not plan.trimmed and (plan.cut_step, plan.cut_drop_target) == (0, 0)
    assert not plan_token_budget(w.rows, w.pricing, 0, CRUMB, 0.5).trimmed  # disabled stays off
    assert not plan_turn_count(w.rows, w.pricing, 9, CRUMB, 0.1).trimmed


def test_no_boundary_reaches_the_target_keeps_the_newest_turn() -> None:
    """j = k-1 when no D(j) reaches the rounded target; the step and target are still reported."""
    w = WorkingHistory.of(example(4))  # 936 tokens; D(j) = 208 j
    plan = plan_token_budget(w.rows, w.pricing, 900, CRUMB, 0.001)  # S = 900 - 0 = 900
    assert (plan.dropped_turns, plan.kept_turns) == (3, 1)
    assert (plan.cut_step, plan.cut_drop_target) == (900, 900)


@pytest.mark.parametrize("value", [1.0, 0.0, -0.3, 1.5, math.nan, math.inf, -math.inf])
def test_outside_the_open_interval_is_the_minimal_cut(value: float) -> None:
    w = WorkingHistory.of(example(12))
    assert grid_step(2000, value) == 0
    assert plan_token_budget(w.rows, w.pricing, 2000, CRUMB, value) == plan_token_budget(
        w.rows, w.pricing, 2000, CRUMB
    )
    assert plan_turn_count(w.rows, w.pricing, 5, CRUMB, value) == plan_turn_count(
        w.rows, w.pricing, 5, CRUMB
    )


def test_grid_step_arithmetic() -> None:
    assert grid_step(2000, 0.7) == 600
    assert grid_step(1, 0.5) == 1
    assert grid_step(100, 0.9999999999999999) == 1  # floor(99.99999999999999) = 99
    top = 2**64 - 1  # a double 2^64; x (1 - 2^-53) = 2^64 - 2^11 exactly
    assert grid_step(top, 0.9999999999999999) == 2047
    assert grid_step(top, 5e-324) == top
    assert grid_step(top, 0.5) == 2**63 - 1


@pytest.mark.parametrize("shape", [lambda x: x, as_conversation])
@pytest.mark.parametrize(
    ("turns", "limit", "fraction", "dropped", "step", "target"),
    [
        (12, 10, 0.7, 3, 3, 3),  # j0 = 2, s = 10 - 7 = 3
        (13, 10, 0.7, 3, 3, 3),  # j0 = 3
        (14, 10, 0.7, 6, 3, 6),  # j0 = 4 -> 6
        (12, 10, 0.05, 10, 10, 10),  # s = 10: j0 = 2 -> 10
        (12, 0, 0.5, 11, 1, 11),  # N = 1: s = 1, j0 = 11
        (12, 5, 0.01, 10, 5, 10),  # j0 = 7 -> 10 (the k - 1 cap never binds: j0 + s - 1 < k)
    ],
)
def test_turn_count_grid(
    shape: object, turns: int, limit: int, fraction: float, dropped: int, step: int, target: int
) -> None:
    """§11.1: s = max(1, N - min(N, floor(N x L))), j = min(k - 1, ceil(j0 / s) x s)."""
    w = WorkingHistory.of(shape(example(turns)))  # type: ignore[operator]
    plan = plan_turn_count(w.rows, w.pricing, limit, CRUMB, fraction)
    assert (plan.dropped_turns, plan.cut_step, plan.cut_drop_target) == (dropped, step, target)
    assert plan.kept_turns == turns - dropped


def test_reported_usage_step_comes_from_the_budget() -> None:
    """§11.1 / §10.3 step 4: S from the effective budget, not from the calibrated target."""
    view = PythonHistoryView(WorkingHistory.of(example(10)))  # 2,184 estimated
    usage = ReportedUsage(reported=4368, estimated=2184, tool_schema=0)  # the provider counts 2x
    trim = plan_reported_usage(view, 4000, usage, CRUMB, 0.7)
    # target = 4000 x 2184 / 4368 = 2000; S = 4000 - 2800 = 1200; D(j0 = 1) = 208 -> 1200:
    # the smallest j with 208 j >= 1200 is 6.
    assert trim.calibration is not None and trim.calibration.history_target_tokens == 2000
    assert (trim.plan.dropped_turns, trim.plan.cut_step, trim.plan.cut_drop_target) == (
        6,
        1200,
        1200,
    )
    assert trim.tokens_after == round((104 + 208 * 4 + CRUMB) * 2)


@pytest.mark.parametrize(
    ("value", "effective", "ignored"),
    [
        (None, 1.0, False),
        (0.7, 0.7, False),
        (1.0, 1.0, False),
        (5e-324, 5e-324, False),
        (0.0, 1.0, True),
        (-0.5, 1.0, True),
        (1.5, 1.0, True),
        (math.nan, 1.0, True),
        (math.inf, 1.0, True),
    ],
)
def test_resolution(value: float | None, effective: float, ignored: bool) -> None:
    assert low_water(value) == (effective, ignored)
    runtime = p.RuntimeProfile(default_provider="prov")
    if value is not None:
        runtime.history_trim_low_water = value
    resolution = resolve(p.Profiles(runtime=runtime))
    assert (resolution.history_trim_low_water, resolution.low_water_ignored) == (effective, ignored)


def _trim(request: svc.TrimHistoryRequest) -> svc.TrimHistoryResponse:
    source = python_history_source(request.history, 1000)
    reply = rpcs.trim_history(request, source)
    return svc.TrimHistoryResponse.FromString(reply.body)


def test_trim_history_reports_the_grid_in_outcome_and_event() -> None:
    limits = svc.ExplicitLimits(budget_tokens=2000, history_trim_low_water=0.7)
    request = svc.TrimHistoryRequest(
        history=example(10), mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET, explicit_limits=limits
    )
    response = _trim(request)
    assert (response.outcome.dropped_turns, response.outcome.cut_step) == (3, 600)
    assert response.outcome.cut_drop_target == 600
    event = response.history_trimmed
    assert (event.dropped_turns, event.cut_step, event.cut_drop_target) == (3, 600, 600)


def test_prepare_model_call_applies_the_grid_to_both_trims() -> None:
    runtime = p.RuntimeProfile(
        default_provider="prov",
        max_context_tokens=2000,
        max_history_messages=10,
        history_trim_low_water=0.7,
    )
    request = svc.PrepareModelCallRequest(history=example(13), profiles=p.Profiles(runtime=runtime))
    source = python_history_source(request.history, 1000)
    response = svc.PrepareModelCallResponse.FromString(
        rpcs.prepare_model_call(request, source).body
    )
    # Turn limit: k = 13, N = 10, j0 = 3, s = 3 -> 3 turns (10 left, 104 + 17 + 2,080 = 2,201).
    # Budget: D(j) = 208 j in the 10-turn body; j0 = 1 (1,993 fits); S = 600 -> 3 turns.
    turn_limit, budget = response.trims
    assert (turn_limit.dropped_turns, turn_limit.cut_step, turn_limit.cut_drop_target) == (3, 3, 3)
    assert (budget.dropped_turns, budget.cut_step, budget.cut_drop_target) == (3, 600, 600)
    assert response.resolution.history_trim_low_water == 0.7
