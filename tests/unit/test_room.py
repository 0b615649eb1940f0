"""Room for the rest of the request (spec §12): PrepareModelCall's budget trim leaves room for what
its own pre-flight adds (hook texts, tool schemas, reserved output)."""

from __future__ import annotations

import pytest
from turnkeeper.core.calibration import ReportedUsage, plan_reported_usage
from turnkeeper.core.preflight import Extras, room
from turnkeeper.core.working import WorkingHistory, breadcrumb_cost
from turnkeeper.server.api import rpcs
from turnkeeper.server.api.responses import Counts
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.engine.python import PythonHistoryView, python_history_source
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2 as p
from turnkeeper.v1 import resolution_pb2, trim_pb2

from .histories import assistant, chat, system, user

CRUMB = breadcrumb_cost("[earlier turns omitted to fit the context window]")  # 17
ROW = "x" * 400  # 104 tokens
SCHEMA = "s" * 768  # 196 tokens


def history(turns: int) -> h.History:
    rows = [system(ROW)]
    for _ in range(turns):
        rows += [user(ROW), assistant(ROW)]
    return chat(*rows)


def test_room_is_capacity_minus_extras_and_none_below_one() -> None:
    extras = Extras.of(["Be brief."], [SCHEMA], 1000)
    assert (extras.hook_tokens, extras.schema_tokens, extras.total) == (7, 196, 1203)
    assert room(resolution_pb2.Capacity(safety_tokens=4000), extras) == 2797
    assert room(resolution_pb2.Capacity(safety_tokens=1204), extras) == 1
    assert room(resolution_pb2.Capacity(safety_tokens=1203), extras) is None
    assert room(resolution_pb2.Capacity(safety_tokens=5), Extras.of([], [], 2**64 - 1)) is None


def prepare(request: svc.PrepareModelCallRequest) -> svc.PrepareModelCallResponse:
    source = python_history_source(request.history, 1000)
    return svc.PrepareModelCallResponse.FromString(rpcs.prepare_model_call(request, source).body)


def test_spec_example_the_trim_makes_room_and_the_request_fits() -> None:
    """§12: unknown capacity, max 4,000, 1,000 reserved, one 196-token schema -> aims at 2,804."""
    request = svc.PrepareModelCallRequest(
        history=history(15),
        profiles=p.Profiles(runtime=p.RuntimeProfile(max_context_tokens=4000)),
        tool_schemas=[SCHEMA],
        reserved_output_tokens=1000,
    )
    response = prepare(request)
    (trim,) = response.trims
    assert (trim.target_tokens, trim.budget_tokens, trim.dropped_turns) == (2804, 4000, 3)
    assert response.capacity_report.fits and response.capacity_report.total_tokens == 3813


def test_without_room_the_trim_aims_at_the_budget_and_the_preflight_fails() -> None:
    request = svc.PrepareModelCallRequest(
        history=history(15),
        profiles=p.Profiles(runtime=p.RuntimeProfile(max_context_tokens=4000)),
        reserved_output_tokens=4000,
    )
    with pytest.raises(RequestError) as failed:
        prepare(request)
    report = next(d for d in failed.value.details if isinstance(d, trim_pb2.CapacityReport))
    assert (report.message_tokens, report.total_tokens) == (3224, 7224)


def test_a_zero_budget_stays_off() -> None:
    runtime = p.RuntimeProfile(default_provider="p", max_context_tokens=0)
    profiles = p.Profiles(
        runtime=runtime, providers=[p.ProviderProfile(alias="p", model="m", context_window=4000)]
    )
    request = svc.PrepareModelCallRequest(
        history=history(15), profiles=profiles, reserved_output_tokens=1000
    )
    with pytest.raises(RequestError):
        prepare(request)


def test_reported_usage_room_bounds_the_history_in_estimate_units() -> None:
    view = PythonHistoryView(WorkingHistory.of(history(15)))  # 3,224
    fits = ReportedUsage(reported=3600, estimated=3420, tool_schema=196)
    # The calibrated target (floor(4,000 x 3,420 / 3,600) = 3,800, less 196) fits the history,
    # but the estimate does not fit the room: trim to it (§16.2 step 4).
    trim = plan_reported_usage(view, 4000, fits, CRUMB, room=2804)
    assert trim.plan.dropped_turns == 3 and trim.reported
    assert trim.calibration is not None
    assert (trim.calibration.calibrated_target_tokens, trim.calibration.history_target_tokens) == (
        3800,
        2804,
    )
    assert trim.tokens_after == round((2617 + 196) * 3600 / 3420)
    # Without room, or with room to spare, nothing is trimmed: the history has not grown, so the
    # counts are the provider's (§16.2 is §10.3 exactly then).
    for space in (None, 3224):
        untouched = plan_reported_usage(view, 4000, fits, CRUMB, room=space)
        assert not untouched.plan.trimmed and untouched.tokens_after == 3600
    # A budget of 0 stays off whatever the room.
    assert not plan_reported_usage(view, 0, fits, CRUMB, room=100).plan.trimmed
    # The smaller of step 3's `scaled` and the room.
    over = ReportedUsage(reported=6000, estimated=3420, tool_schema=196)
    scaled = plan_reported_usage(view, 4000, over, CRUMB, room=2804)
    assert scaled.calibration is not None and scaled.calibration.history_target_tokens == 2084
    bound = plan_reported_usage(view, 4000, ReportedUsage(4400, 3420, 196), CRUMB, room=2804)
    assert bound.calibration is not None and bound.calibration.history_target_tokens == 2804


def test_reported_usage_without_an_estimate_counts_in_estimate_units() -> None:
    """estimated = 0 relates nothing to the provider's count: a room trim then reports estimates."""
    view = PythonHistoryView(WorkingHistory.of(history(15)))
    trim = plan_reported_usage(view, 4000, ReportedUsage(10, 0, 0), CRUMB, room=2804)
    assert trim.plan.dropped_turns == 3 and not trim.reported and trim.calibration is None
    assert Counts.reported(trim, 4000).source == trim_pb2.COUNT_SOURCE_ESTIMATE
    assert Counts.reported(trim, 4000).target_tokens == 2804


def test_the_low_water_step_stays_the_budgets() -> None:
    """§12: the section 11 step is computed from the budget, so constant extras do not move it."""
    runtime = p.RuntimeProfile(max_context_tokens=4000, history_trim_low_water=0.7)
    request = svc.PrepareModelCallRequest(
        history=history(15),
        profiles=p.Profiles(runtime=runtime),
        tool_schemas=[SCHEMA],
        reserved_output_tokens=1000,
    )
    (trim,) = prepare(request).trims
    assert (trim.target_tokens, trim.cut_step, trim.cut_drop_target) == (2804, 1200, 1200)
    assert trim.dropped_turns == 6
