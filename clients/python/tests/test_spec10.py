"""The second-edition wrappers (spec §10) against the live server."""

from __future__ import annotations

import uuid

import grpc
import pytest
from turnkeeper.v1 import history_pb2, profile_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

from turnkeeper_client import (
    AsyncTurnkeeperClient,
    TurnkeeperClient,
    TurnkeeperError,
    reported_usage,
)


def test_classify_provider_error_names_the_phrase(client: TurnkeeperClient) -> None:
    """spec §10.4: a listed phrase in any case is an overflow naming it; a near miss is not."""
    overflow = client.classify_provider_error(
        svc.ClassifyProviderErrorRequest(
            message="Error 400: Prompt is too long: 250000 tokens > 200000 maximum",
            http_status=400,
            provider="anthropic",
        )
    )
    assert overflow.overflow
    assert overflow.matched_phrase == "prompt is too long"
    assert overflow.phrase_source == svc.PHRASE_SOURCE_BUILT_IN

    near_miss = client.classify_provider_error(
        svc.ClassifyProviderErrorRequest(message="rate limit exceeded: too many requests")
    )
    assert not near_miss.overflow
    assert near_miss.matched_phrase == ""
    assert near_miss.phrase_source == svc.PHRASE_SOURCE_UNSPECIFIED


async def test_classify_provider_error_rejects_a_bad_status(
    unix_aclient: AsyncTurnkeeperClient,
) -> None:
    """spec §10.4 request shape: an HTTP status outside 100-599 is a field violation."""
    with pytest.raises(TurnkeeperError) as caught:
        await unix_aclient.classify_provider_error(
            svc.ClassifyProviderErrorRequest(message="x", http_status=700)
        )
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.reason == "ERROR_REASON_INVALID_PROVIDER_ERROR"
    assert caught.value.fields == {"http_status"}


def _seven_rows() -> history_pb2.History:
    """A system row and three short turns."""
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="sys")]
    for turn in ("one", "two", "three"):
        rows.append(
            history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"user turn {turn} asks")
        )
        rows.append(
            history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content=f"answer {turn}")
        )
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


def _priced_profiles(max_context_tokens: int | None = None) -> profile_pb2.Profiles:
    """Route p/m with a known 1,000-token window and input prices for m."""
    runtime = profile_pb2.RuntimeProfile(default_provider="p")
    if max_context_tokens is not None:
        runtime.max_context_tokens = max_context_tokens
    prices = profile_pb2.ModelPrices(
        input_per_million_tokens=2.5, cached_input_per_million_tokens=0.25, currency="USD"
    )
    provider = profile_pb2.ProviderProfile(alias="p", model="m", context_window=1000, prices=prices)
    return profile_pb2.Profiles(runtime=runtime, providers=[provider])


def test_reported_usage_is_the_estimate_of_what_was_sent() -> None:
    """spec §10.3: `estimated` is the previous request's estimate, tool schemas included, without
    the reserved output; `tool_schema` is its tool-schema part."""
    report = trim_pb2.CapacityReport(
        message_tokens=80,
        hook_tokens=7,
        tool_schema_tokens=9,
        reserved_output_tokens=100,
        total_tokens=196,
    )
    usage = reported_usage(report, 250)
    assert (usage.reported_input_tokens, usage.estimated_input_tokens) == (250, 96)
    assert usage.tool_schema_tokens == 9


def test_prepare_calibrates_with_the_previous_calls_reported_usage(
    client: TurnkeeperClient,
) -> None:
    """spec §10.3 and §10.5 through the wrapper: the first call's CapacityReport and the provider's
    count become the next call's ReportedUsage; its budget trim then counts provider tokens, and
    every response carries the meter and the cost of the resolved route."""
    request = svc.PrepareModelCallRequest(
        history=_seven_rows(),
        profiles=_priced_profiles(max_context_tokens=100),
        hook_texts=["Be brief."],
        reserved_output_tokens=100,
        cached_input_tokens=40,
    )
    first = client.prepare_model_call(request)
    assert not first.trims
    report = first.capacity_report
    used = report.total_tokens - report.reserved_output_tokens
    meter = first.context_meter
    assert (meter.used_tokens, meter.budget_tokens, meter.capacity_tokens) == (used, 100, 1000)
    assert meter.capacity_fraction == pytest.approx(used / 1000)
    cost = first.input_cost
    assert (cost.currency, cost.cached_input_tokens) == ("USD", 40)
    assert cost.uncached_input_tokens == used - 40
    assert cost.cost == pytest.approx(((used - 40) * 2.5 + 40 * 0.25) / 1e6)

    # The provider counted twice as much as estimated: more than the budget of 100.
    request.reported_usage.CopyFrom(reported_usage(report, 2 * used))
    second = client.prepare_model_call(request)
    assert second.trims, "a reported count above the budget trims"
    calibrated = second.trims[-1]
    assert calibrated.count_source == trim_pb2.COUNT_SOURCE_PROVIDER_REPORTED
    # spec §16.2 step 5 scales the history, tool schemas included, not the hooks the count covered.
    assert calibrated.tokens_before == 2 * (report.message_tokens + report.tool_schema_tokens)
    assert calibrated.calibration.calibrated_target_tokens == max(1, 100 * used // (2 * used))
    assert second.context_meter.used_tokens < used


def test_trim_history_in_reported_usage_mode(client: TurnkeeperClient) -> None:
    """spec §10.3 as a TrimHistory mode: counts in the outcome and the event are the provider's."""
    estimate = client.estimate_tokens(svc.EstimateTokensRequest(history=_seven_rows()))
    request = svc.TrimHistoryRequest(
        history=_seven_rows(),
        mode=trim_pb2.TRIM_MODE_REPORTED_USAGE,
        caller_path=trim_pb2.CALLER_PATH_AGENT,
        explicit_limits=svc.ExplicitLimits(budget_tokens=estimate.total_tokens),
        reported_usage=trim_pb2.ReportedUsage(
            reported_input_tokens=3 * estimate.total_tokens,
            estimated_input_tokens=estimate.total_tokens,
        ),
        caller=trim_pb2.CallerContext(session_id=uuid.uuid4().hex),
    )
    trimmed = client.trim_history(request)
    assert trimmed.outcome.trimmed
    assert trimmed.outcome.count_source == trim_pb2.COUNT_SOURCE_PROVIDER_REPORTED
    assert trimmed.outcome.tokens_before == 3 * estimate.total_tokens
    assert trimmed.history_trimmed.count_source == trim_pb2.COUNT_SOURCE_PROVIDER_REPORTED

    # Within the budget by the provider's count: nothing to do, both counts are the reported one.
    request.reported_usage.reported_input_tokens = estimate.total_tokens
    unchanged = client.trim_history(request)
    assert not unchanged.outcome.trimmed
    outcome = unchanged.outcome
    assert (outcome.tokens_before, outcome.tokens_after) == (estimate.total_tokens,) * 2


def test_meter_without_a_known_capacity_has_no_capacity(client: TurnkeeperClient) -> None:
    """spec §10.5: the 32,000 fallback is never shown as a capacity; no prices, no cost."""
    prepared = client.prepare_model_call(svc.PrepareModelCallRequest(history=_seven_rows()))
    meter = prepared.context_meter
    assert meter.used_tokens == prepared.capacity_report.total_tokens
    assert not meter.HasField("capacity_tokens") and not meter.HasField("capacity_fraction")
    assert not prepared.HasField("input_cost")


def test_a_recovery_that_cannot_trim_says_why(client: TurnkeeperClient) -> None:
    """spec §10.1: one turn left is reported (floor, blocker, route), never a silent no-op."""
    rows = [
        history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="s" * 400),
        history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="the only turn"),
    ]
    prepared = client.prepare_model_call(
        svc.PrepareModelCallRequest(
            history=history_pb2.History(chat=history_pb2.ChatHistory(messages=rows)),
            profiles=_priced_profiles(max_context_tokens=50),
            overflow_recovery=True,
        )
    )
    recovery = prepared.recovery
    assert not recovery.trimmed
    assert recovery.blocker == trim_pb2.RECOVERY_BLOCKER_SINGLE_TURN
    assert recovery.target_tokens == 2 * recovery.baseline_tokens // 3
    assert recovery.system_floor_tokens > recovery.budget_tokens == 50
    assert recovery.system_floor_reaches_budget
    assert (recovery.route.provider, recovery.route.model) == ("p", "m")


def test_tool_result_cap_from_profiles(client: TurnkeeperClient) -> None:
    """spec §10.6: the cap resolves from the runtime profile; unset is 50,000 and 0 disables."""
    long = "x" * 50_001
    default = client.cap_tool_results(
        svc.CapToolResultsRequest(contents=[long], profiles=profile_pb2.Profiles())
    )
    assert default.max_tool_result_chars == 50_000
    assert default.results[0].truncated_chars > 0
    disabled = client.cap_tool_results(
        svc.CapToolResultsRequest(
            contents=[long],
            profiles=profile_pb2.Profiles(
                runtime=profile_pb2.RuntimeProfile(max_tool_result_chars=0)
            ),
        )
    )
    assert disabled.max_tool_result_chars == 0
    assert disabled.results[0].content == long and disabled.results[0].truncated_chars == 0


def test_meter_updates_reach_only_subscribers_that_opt_in(client: TurnkeeperClient) -> None:
    """spec §10.5: a subscriber with include_meter_updates gets the meter of every prepared call
    of its sessions (route and meter as returned), also when updates share a cursor; one without
    gets none."""
    session = uuid.uuid4().hex
    with (
        client.watch_trims(
            session_ids=[session], include_meter_updates=True, heartbeat_interval=1.0
        ).wait_subscribed() as metered,
        client.watch_trims(
            session_ids=[session], heartbeat_interval=1.0
        ).wait_subscribed() as plain,
    ):
        prepared = client.prepare_model_call(
            svc.PrepareModelCallRequest(
                history=_seven_rows(),
                profiles=_priced_profiles(),
                caller=trim_pb2.CallerContext(session_id=session, runtime_id="pytest"),
            )
        )
        assert next(metered).WhichOneof("item") == "heartbeat"  # the subscription's answer
        item = next(metered)
        assert item.WhichOneof("item") == "meter_update"
        update = item.meter_update
        assert update.caller.session_id == session
        assert update.meter == prepared.context_meter
        assert update.route == prepared.resolution.route
        assert metered.cursor == update.cursor
        # With no trim in between the next update shares that cursor (the feed position of the
        # trims before it): it is delivered all the same.
        again = client.prepare_model_call(
            svc.PrepareModelCallRequest(
                history=_seven_rows(),
                profiles=_priced_profiles(),
                caller=trim_pb2.CallerContext(session_id=session),
            )
        )
        item = next(metered)
        assert item.WhichOneof("item") == "meter_update"
        assert item.meter_update.meter == again.context_meter
        # The plain subscriber's next items are heartbeats only (the answer, then an idle one).
        assert [next(plain).WhichOneof("item") for _ in range(2)] == ["heartbeat", "heartbeat"]
