"""Route, capacity and budget resolution (spec §3, §6): one function decides them for every RPC."""

from __future__ import annotations

import math

from turnkeeper.core.trimming import DEFAULT_TURN_LIMIT
from turnkeeper.v1 import profile_pb2, resolution_pb2

DEFAULT_KEEP_TOOL_CONTEXT_TURNS = 2
"""The K of a profile (or explicit limits) that leaves `keep_tool_context_turns` unset (§13.1)."""

LEGACY_BUDGET = 32_000
"""The historical budget of a profile that sets neither max_context_tokens nor a ratio (§3.1)."""

FALLBACK_WINDOW = 32_000
"""The window used for safety arithmetic when the capacity is unknown; never reported (§3)."""


def select_route(profiles: profile_pb2.Profiles) -> resolution_pb2.Route:
    """Session switch, then classifier hint, then the default route, as provider dispatch does."""
    runtime = profiles.runtime
    selection = profiles.selection
    if selection.HasField("session_switch"):
        provider = selection.session_switch.provider
        model = selection.session_switch.model
        source = resolution_pb2.ROUTE_SOURCE_SESSION_SWITCH
    else:
        hinted = next(
            (
                r
                for r in runtime.classifier_routes
                if selection.classifier_hint and r.hint == selection.classifier_hint
            ),
            None,
        )
        if hinted is not None:
            provider, model = hinted.provider, hinted.model
            source = resolution_pb2.ROUTE_SOURCE_CLASSIFIER_HINT
        else:
            provider, model = runtime.default_provider, runtime.default_model
            source = resolution_pb2.ROUTE_SOURCE_DEFAULT
    profile = find_provider(profiles, provider)
    if not model and profile is not None:
        model = profile.model
    return resolution_pb2.Route(provider=provider, model=model, source=source)


DEFAULT_TOOL_RESULT_CAP = 50_000
"""The `max_tool_result_chars` of a runtime profile that leaves it unset (§10.6)."""


def tool_result_cap(runtime: profile_pb2.RuntimeProfile) -> int:
    """The cap on one tool result in characters: unset means 50,000, an explicit 0 disables."""
    if runtime.HasField("max_tool_result_chars"):
        return runtime.max_tool_result_chars
    return DEFAULT_TOOL_RESULT_CAP


def find_provider(profiles: profile_pb2.Profiles, alias: str) -> profile_pb2.ProviderProfile | None:
    if not alias:
        return None
    return next((p for p in profiles.providers if p.alias == alias), None)


def route_profile(
    profiles: profile_pb2.Profiles, route: resolution_pb2.Route
) -> profile_pb2.ProviderProfile | None:
    """The provider profile, only when it describes the selected model (§3 Route): its metadata
    (window, prices) is never borrowed for another model."""
    profile = find_provider(profiles, route.provider)
    if profile is None or (profile.model and profile.model != route.model):
        return None
    return profile


def known_window(profiles: profile_pb2.Profiles, route: resolution_pb2.Route) -> int | None:
    """The configured window of the selected model, when its profile declares one."""
    profile = route_profile(profiles, route)
    if profile is None or not profile.HasField("context_window"):
        return None
    return profile.context_window


def min_cacheable_tokens(profiles: profile_pb2.Profiles, route: resolution_pb2.Route) -> int | None:
    """The selected model's shortest cacheable prefix (§14), under the window's rule (§3 Route)."""
    profile = route_profile(profiles, route)
    if profile is None or not profile.HasField("min_cacheable_tokens"):
        return None
    return profile.min_cacheable_tokens


def keep_tool_context_turns(value: int | None) -> int:
    """The K in effect (§13.1): the value set, else 2."""
    return DEFAULT_KEEP_TOOL_CONTEXT_TURNS if value is None else value


def valid_ratio(runtime: profile_pb2.RuntimeProfile) -> float | None:
    """The ratio when it takes effect: in (0.0, 1.0]; anything else (NaN too) counts as unset."""
    if not runtime.HasField("context_compact_ratio"):
        return None
    ratio = runtime.context_compact_ratio
    return ratio if in_unit_interval(ratio) else None


def in_unit_interval(value: float) -> bool:
    """Whether a fraction takes effect: in (0.0, 1.0]; NaN and infinities are outside (§10.7)."""
    return math.isfinite(value) and 0.0 < value <= 1.0


def low_water(value: float | None) -> tuple[float, bool]:
    """The `history_trim_low_water` in effect and whether a set value was ignored (§11.1).

    Unset, or outside (0.0, 1.0] (NaN and infinities too), is 1.0: the minimal cut of §9.
    """
    if value is None:
        return 1.0, False
    if in_unit_interval(value):
        return value, False
    return 1.0, True


def resolve(profiles: profile_pb2.Profiles) -> resolution_pb2.Resolution:
    runtime = profiles.runtime
    route = select_route(profiles)
    window = known_window(profiles, route)
    max_tokens = runtime.max_context_tokens if runtime.HasField("max_context_tokens") else None
    # Unknown capacity: a positive max_context_tokens is the window operand, honoured as-is (§3.5).
    safety = window if window is not None else (max_tokens or FALLBACK_WINDOW)
    capacity = resolution_pb2.Capacity(known=window is not None, safety_tokens=safety)
    if window is not None:
        capacity.model_context_window = window

    steps: list[resolution_pb2.BudgetStep] = []

    def step(rule: resolution_pb2.BudgetRule.ValueType, value: int) -> int:
        steps.append(resolution_pb2.BudgetStep(rule=rule, budget_tokens=value))
        return value

    ratio = valid_ratio(runtime)
    if max_tokens == 0:
        budget = step(resolution_pb2.BUDGET_RULE_DISABLED, 0)
    else:
        if ratio is None:
            if max_tokens is not None:
                budget = step(resolution_pb2.BUDGET_RULE_MAX_CONTEXT_TOKENS, max_tokens)
            else:
                budget = step(resolution_pb2.BUDGET_RULE_LEGACY_DEFAULT, LEGACY_BUDGET)
        else:
            # floor(operand x ratio) in doubles; ratio <= 1, so it never exceeds the operand,
            # but rounding the operand to a double can (operands above 2^53): clamp to it.
            derived = min(safety, max(1, math.floor(safety * ratio)))
            budget = step(resolution_pb2.BUDGET_RULE_CONTEXT_COMPACT_RATIO, derived)
            if max_tokens is not None and max_tokens < budget:
                budget = step(resolution_pb2.BUDGET_RULE_MAX_CONTEXT_TOKENS, max_tokens)
        pruning = runtime.history_pruning
        if pruning.enabled and 0 < pruning.max_tokens < budget:
            budget = step(resolution_pb2.BUDGET_RULE_HISTORY_PRUNING, pruning.max_tokens)
        if window is not None and window < budget:
            budget = step(resolution_pb2.BUDGET_RULE_MODEL_CAPACITY, window)

    ratio_set = runtime.HasField("context_compact_ratio")
    fraction, fraction_ignored = low_water(
        runtime.history_trim_low_water if runtime.HasField("history_trim_low_water") else None
    )
    resolution = resolution_pb2.Resolution(
        route=route,
        capacity=capacity,
        budget_tokens=budget,
        budget_rule=steps[-1].rule,
        budget_steps=steps,
        max_history_turns=(
            runtime.max_history_messages
            if runtime.HasField("max_history_messages")
            else DEFAULT_TURN_LIMIT
        ),
        # NaN and infinities are out of range like any other value (§10.7).
        ratio_ignored=ratio_set and ratio is None,
        history_trim_low_water=fraction,
        low_water_ignored=fraction_ignored,
        keep_tool_context_turns=keep_tool_context_turns(
            runtime.keep_tool_context_turns if runtime.HasField("keep_tool_context_turns") else None
        ),
    )
    # §13.4: R is reported only when set (unset keeps the running turn whole).
    if runtime.HasField("keep_running_turn_tool_results"):
        resolution.keep_running_turn_tool_results = runtime.keep_running_turn_tool_results
    minimum = min_cacheable_tokens(profiles, route)
    if minimum is not None:
        resolution.min_cacheable_tokens = minimum
    return resolution
