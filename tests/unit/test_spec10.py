"""Second-edition rules through the servicer in-process (spec §10.1, §10.3, §3, §7).

Hypothesis properties over random histories and profiles, plus what was only claimed before:
the legacy loop's log line and the final-summary pre-flight.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from turnkeeper.core import calibration
from turnkeeper.core.saturation import UINT64_MAX
from turnkeeper.core.trimming import plan_token_budget
from turnkeeper.core.working import WorkingHistory, breadcrumb_cost
from turnkeeper.server.api import rpcs
from turnkeeper.server.api.responses import Reply
from turnkeeper.server.contract import wire
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.engine.python import PythonEngine
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2, trim_pb2

from .histories import assistant, chat, system, turn, user
from .test_properties import histories

TEXT = "[earlier turns omitted to fit the context window]"
CRUMB = breadcrumb_cost(TEXT)
U64 = st.integers(0, UINT64_MAX)


# Each RPC: its request type, the function both engines share, and its response type.
RPCS: dict[str, tuple[type[Any], Callable[..., Reply], type[Any]]] = {
    "PrepareModelCall": (
        svc.PrepareModelCallRequest,
        rpcs.prepare_model_call,
        svc.PrepareModelCallResponse,
    ),
    "TrimHistory": (svc.TrimHistoryRequest, rpcs.trim_history, svc.TrimHistoryResponse),
    "CheckCapacity": (svc.CheckCapacityRequest, rpcs.check_capacity_rpc, svc.CheckCapacityResponse),
}
# RPCs without a history: no engine reads them.
PLAIN_RPCS: dict[str, tuple[type[Any], Callable[..., Reply], type[Any]]] = {
    "ResolveBudget": (svc.ResolveBudgetRequest, rpcs.resolve_budget, svc.ResolveBudgetResponse),
    "CapToolResults": (
        svc.CapToolResultsRequest,
        rpcs.cap_tool_results,
        svc.CapToolResultsResponse,
    ),
}


def call_reply(name: str, request: Any, max_rows: int = 100_000) -> tuple[Any, Reply]:
    """The RPC in-process on the Python engine: the response and what it would publish."""
    raw = request.SerializeToString()
    if name in PLAIN_RPCS:
        request_type, rpc, response_type = PLAIN_RPCS[name]
        reply = rpc(wire.decode(raw, request_type))
    else:
        request_type, rpc, response_type = RPCS[name]
        reply = rpc(*PythonEngine().read(raw, request_type, max_rows))
    return response_type.FromString(reply.body), reply


def call(name: str, request: Any) -> Any:
    """The response; a RequestError surfaces as such."""
    return call_reply(name, request)[0]


profiles_strategy = st.builds(
    lambda budget, window, turns: profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(
            default_provider="p", max_context_tokens=budget, max_history_messages=turns
        ),
        providers=[profile_pb2.ProviderProfile(alias="p", context_window=window)],
    ),
    st.integers(0, 3000),
    st.integers(10**6, 10**7),
    st.integers(0, 9),
)


@settings(max_examples=150, deadline=None)
@given(histories(), profiles_strategy)
def test_section10_1_recovery_is_at_most_two_thirds_of_the_call_without_it(
    history: Any, profiles: profile_pb2.Profiles
) -> None:
    """§10.1: for any history and profiles, PrepareModelCall with recovery returns a history whose
    estimate is <= floor(2/3) of the same call without recovery (unless only the newest turn is
    left, which is always kept), or says it cannot trim; it never grows the request."""
    plain = call(
        "PrepareModelCall", svc.PrepareModelCallRequest(history=history, profiles=profiles)
    )
    recovered = call(
        "PrepareModelCall",
        svc.PrepareModelCallRequest(history=history, profiles=profiles, overflow_recovery=True),
    )
    before = plain.capacity_report.message_tokens
    after = recovered.capacity_report.message_tokens
    report = recovered.recovery
    assert report.baseline_tokens == before
    assert report.target_tokens == 2 * before // 3
    assert report.tokens_after == after
    if report.trimmed:
        assert after < before
        if report.kept_turns > 1:
            assert after <= 2 * before // 3
    elif report.blocker == trim_pb2.RECOVERY_BLOCKER_SINGLE_TURN:
        assert after == before and report.kept_turns <= 1
    else:
        # Dropping tiny turns would cost more (breadcrumb) than it saves: baseline returned.
        assert report.blocker == trim_pb2.RECOVERY_BLOCKER_NO_SAVING
        assert after == before and recovered.history == plain.history
    assert after <= before  # recovery never grows the request


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 3000), st.sampled_from([1.0, 0.9, 0.7, 0.3, 0.01]))
def test_section10_1_one_trim_equals_budget_then_recovery(
    history: Any, budget: int, low_water: float
) -> None:
    """§10.1 as PrepareModelCall runs it: one token-budget trim of the input to
    floor(2/3 x baseline) drops exactly what the budget trim followed by a recovery trim of its
    output would (the proof is in core/recovery.py), also when the baseline is a §11 grid cut."""
    w = WorkingHistory.of(history)
    baseline_plan = plan_token_budget(w.rows, w.pricing, budget, CRUMB, low_water)
    baseline = w.apply(baseline_plan, TEXT)
    target = 2 * baseline.pricing.total // 3
    two_step = baseline.apply(
        plan_token_budget(baseline.rows, baseline.pricing, target, CRUMB), TEXT
    )
    one_step = w.apply(plan_token_budget(w.rows, w.pricing, target, CRUMB), TEXT)
    assert one_step.history == two_step.history
    assert one_step.pricing.total == two_step.pricing.total


@settings(max_examples=500, deadline=None)
@given(st.integers(0, UINT64_MAX), U64, U64, st.data())
def test_section10_3_exact_integer_arithmetic_for_64_bit_inputs(
    budget: int, reported: int, estimated: int, data: st.DataObject
) -> None:
    """§10.3 steps 2, 3 and 5 (as §16.2 keeps them) agree with exact rational arithmetic for any
    64-bit inputs, and the reported count saturates at 2^64-1 (the wire is uint64)."""
    tool_schema = data.draw(st.integers(0, estimated))
    kept = data.draw(st.integers(0, UINT64_MAX))
    usage = calibration.ReportedUsage(reported, estimated, tool_schema)
    if not calibration.calibrates(usage):
        assert reported == 0 or estimated == 0
        return
    target = calibration.calibrated_target(budget, usage)
    assert target == max(1, int(Fraction(budget * estimated, reported)))
    assert target >= 1
    if reported > budget:  # the budget in estimate units is then below the estimate
        assert target <= estimated
    assert calibration.history_target(target, usage) == max(1, target - tool_schema)
    exact = Fraction((kept + tool_schema) * reported, estimated)
    rounded = int(exact) + (1 if exact - int(exact) >= Fraction(1, 2) else 0)
    assert calibration.reported_tokens(kept, usage) == min(rounded, UINT64_MAX)


def test_section7_legacy_loop_logs_its_count_trim(caplog: pytest.LogCaptureFixture) -> None:
    """§7 exception: the legacy loop only logs count-based trimming: the log line names the path,
    the mode and the counts; there is no breadcrumb and no event."""
    rows = [system()]
    for i in range(4):
        rows.extend(turn(i))
    request = svc.TrimHistoryRequest(
        history=chat(*rows),
        mode=trim_pb2.TRIM_MODE_TURN_COUNT,
        caller_path=trim_pb2.CALLER_PATH_LEGACY_LOOP,
        explicit_limits=svc.ExplicitLimits(max_history_messages=1),
    )
    with caplog.at_level(logging.INFO, logger="turnkeeper.trim"):
        response, reply = call_reply("TrimHistory", request, max_rows=100)
    assert response.outcome.dropped_turns == 3 and not response.HasField("history_trimmed")
    assert not any(m.breadcrumb for m in response.history.chat.messages)
    assert reply.events == ()
    lines = [r.getMessage() for r in caplog.records if r.name == "turnkeeper.trim"]
    assert lines == [
        "trimmed path=CALLER_PATH_LEGACY_LOOP mode=TRIM_MODE_TURN_COUNT reason=turn_limit "
        f"dropped_messages={response.outcome.dropped_messages} dropped_turns=3 kept_turns=1 "
        f"tokens_before={response.outcome.tokens_before} "
        f"tokens_after={response.outcome.tokens_after}"
    ]


def test_section3_final_summary_request_is_preflighted() -> None:
    """§3: the final summary request made after the tool-iteration limit is checked against the
    model's capacity like any other, also with proactive trimming disabled (budget 0): the
    summary instruction (a hook text) and the reserved output are counted, and a request that
    does not fit fails before it is sent."""
    history = chat(system(), user("q" * 40), assistant("a" * 40))  # 5 + 14 + 14 = 33
    profiles = profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(default_provider="p", max_context_tokens=0),
        providers=[profile_pb2.ProviderProfile(alias="p", model="m", context_window=60)],
    )
    summary = "Summarize the work so far for the user."  # 39 B -> 10 + 4 = 14
    fits = svc.CheckCapacityRequest(
        history=history, profiles=profiles, hook_texts=[summary], reserved_output_tokens=13
    )
    report = call("CheckCapacity", fits).report
    assert (report.message_tokens, report.hook_tokens, report.total_tokens) == (33, 14, 60)
    over = svc.CheckCapacityRequest()
    over.CopyFrom(fits)
    over.reserved_output_tokens = 14
    with pytest.raises(RequestError) as failed:
        call("CheckCapacity", over)
    assert (
        failed.value.reason
        == trim_pb2.CapacityReport.DESCRIPTOR.file.pool.FindEnumTypeByName(
            "turnkeeper.v1.ErrorReason"
        )
        .values_by_name["ERROR_REASON_CONTEXT_WINDOW_EXCEEDED"]
        .number
    )
    assert "context window is 60" in failed.value.message


def test_section10_5_unknown_capacity_is_never_a_number_in_the_error() -> None:
    """§10.5, §3 Route: an over-capacity error for an unknown window states no capacity number in
    its text or metadata (the 32,000 fallback is not the model's capacity)."""
    request = svc.CheckCapacityRequest(history=chat(user("q")), reserved_output_tokens=40_000)
    with pytest.raises(RequestError) as failed:
        call("CheckCapacity", request)
    error = failed.value
    assert "32000" not in error.message and "32,000" not in error.message
    assert "unknown" in error.message
    assert "capacity_tokens" not in error.metadata
    assert error.metadata["capacity_known"] == "false"


extreme = st.one_of(st.sampled_from([0, 1, 2**53 + 1, 2**63, UINT64_MAX - 1, UINT64_MAX]), U64)
ratios = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1.0, 5e-324]))


@st.composite
def extreme_profiles(draw: st.DrawFn) -> profile_pb2.Profiles:
    runtime = profile_pb2.RuntimeProfile(default_provider="p")
    if draw(st.booleans()):
        runtime.max_context_tokens = draw(extreme)
    if draw(st.booleans()):
        runtime.context_compact_ratio = draw(ratios)
    if draw(st.booleans()):
        runtime.max_tool_result_chars = draw(extreme)
    runtime.history_pruning.enabled = draw(st.booleans())
    runtime.history_pruning.max_tokens = draw(extreme)
    runtime.max_history_messages = draw(st.integers(0, 2**32 - 1))
    provider = profile_pb2.ProviderProfile(alias="p")
    if draw(st.booleans()):
        provider.context_window = draw(st.integers(1, UINT64_MAX))
    if draw(st.booleans()):
        provider.prices.input_per_million_tokens = draw(st.floats(0, 1e308))
    return profile_pb2.Profiles(runtime=runtime, providers=[provider])


@settings(max_examples=300, deadline=None)
@given(histories(), extreme_profiles(), extreme, extreme, extreme, st.data())
def test_every_64_bit_input_saturates_or_is_rejected(
    history: Any,
    profiles: profile_pb2.Profiles,
    reserved: int,
    cached: int,
    reported: int,
    data: st.DataObject,
) -> None:
    """Every arithmetic path saturates or rejects with a field violation, for every 64-bit input
    (spec §3, §9, §10.3, §10.5): no call fails any other way."""
    estimated = data.draw(extreme)
    usage = trim_pb2.ReportedUsage(
        reported_input_tokens=reported,
        estimated_input_tokens=estimated,
        tool_schema_tokens=data.draw(st.integers(0, estimated)),
    )
    requests = [
        ("ResolveBudget", svc.ResolveBudgetRequest(profiles=profiles)),
        (
            "PrepareModelCall",
            svc.PrepareModelCallRequest(
                history=history,
                profiles=profiles,
                reserved_output_tokens=reserved,
                cached_input_tokens=cached,
                reported_usage=usage,
                overflow_recovery=data.draw(st.booleans()),
            ),
        ),
        (
            "CheckCapacity",
            svc.CheckCapacityRequest(
                history=history, profiles=profiles, reserved_output_tokens=reserved
            ),
        ),
        (
            "TrimHistory",
            svc.TrimHistoryRequest(
                history=history,
                mode=trim_pb2.TRIM_MODE_REPORTED_USAGE,
                profiles=profiles,
                reported_usage=usage,
            ),
        ),
        (
            "TrimHistory",
            svc.TrimHistoryRequest(
                history=history,
                mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
                explicit_limits=svc.ExplicitLimits(budget_tokens=reserved),
            ),
        ),
        ("CapToolResults", svc.CapToolResultsRequest(contents=["x" * 70], profiles=profiles)),
    ]
    for name, request in requests:
        try:
            call(name, request)
        except RequestError as error:
            assert error.violations or error.details, (name, error)
