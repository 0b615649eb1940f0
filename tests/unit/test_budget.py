"""Budget, capacity and route resolution: spec §3 (rules 1-5, Route) and §6 defaults."""

from __future__ import annotations

import math

import pytest
from turnkeeper.core.budget import resolve
from turnkeeper.v1 import profile_pb2 as p
from turnkeeper.v1 import resolution_pb2 as r


def profiles(
    *,
    window: int | None = None,
    model: str = "m",
    route_model: str = "",
    max_tokens: int | None = None,
    ratio: float | None = None,
    pruning: int | None = None,
    turns: int | None = None,
) -> p.Profiles:
    runtime = p.RuntimeProfile(default_provider="prov", default_model=route_model)
    if max_tokens is not None:
        runtime.max_context_tokens = max_tokens
    if ratio is not None:
        runtime.context_compact_ratio = ratio
    if pruning is not None:
        runtime.history_pruning.enabled = True
        runtime.history_pruning.max_tokens = pruning
    if turns is not None:
        runtime.max_history_messages = turns
    provider = p.ProviderProfile(alias="prov", model=model)
    if window is not None:
        provider.context_window = window
    return p.Profiles(runtime=runtime, providers=[provider])


@pytest.mark.parametrize(
    ("kwargs", "budget"),
    [
        ({"window": 100, "ratio": 0.29}, 28),
        ({"window": 1000, "ratio": 1e-9}, 1),
        ({"ratio": 0.9}, 28_800),
        ({"window": 8_000}, 8_000),
        ({"max_tokens": 100_000, "ratio": 0.5}, 50_000),
    ],
)
def test_section3_reference_examples(kwargs: dict[str, float], budget: int) -> None:
    """§3: the reference examples pinned by issue 2."""
    assert resolve(profiles(**kwargs)).budget_tokens == budget  # type: ignore[arg-type]


def test_section3_rule1_legacy_32000_capped_by_smaller_capacity() -> None:
    """§3.1: no max/ratio keeps 32,000, capped by a smaller configured capacity."""
    assert resolve(profiles()).budget_tokens == 32_000
    assert resolve(profiles()).budget_rule == r.BUDGET_RULE_LEGACY_DEFAULT
    assert resolve(profiles(window=200_000)).budget_tokens == 32_000
    capped = resolve(profiles(window=8_000))
    assert capped.budget_rule == r.BUDGET_RULE_MODEL_CAPACITY


def test_section3_rule2_explicit_zero_disables_and_wins() -> None:
    """§3.2: an explicit max_context_tokens = 0 disables proactive trimming, over everything."""
    res = resolve(profiles(window=100, max_tokens=0, ratio=0.5, pruning=10))
    assert (res.budget_tokens, res.budget_rule) == (0, r.BUDGET_RULE_DISABLED)


def test_section3_rule3_ratio_outside_range_is_unset() -> None:
    """§3.3, §10.7: a ratio outside (0, 1], NaN and infinities included, is treated as unset
    and reported as ignored."""
    for ratio in (0.0, -0.5, 1.5, math.nan, math.inf, -math.inf):
        res = resolve(profiles(window=10_000, ratio=ratio))
        assert res.budget_tokens == 10_000
        assert res.ratio_ignored


def test_section3_rule3_max_caps_ratio_budget_downward() -> None:
    """§3.3: with both, max_context_tokens is a downward cap on the ratio-derived budget."""
    res = resolve(profiles(window=100_000, ratio=0.5, max_tokens=20_000))
    assert res.budget_tokens == 20_000
    assert [s.rule for s in res.budget_steps] == [
        r.BUDGET_RULE_CONTEXT_COMPACT_RATIO,
        r.BUDGET_RULE_MAX_CONTEXT_TOKENS,
    ]
    assert resolve(profiles(window=100_000, ratio=0.1, max_tokens=20_000)).budget_tokens == 10_000


def test_section3_rule4_pruning_lowers_never_raises() -> None:
    """§3.4: history_pruning.max_tokens lowers the cap and never raises it."""
    assert resolve(profiles(max_tokens=10_000, pruning=5_000)).budget_tokens == 5_000
    assert resolve(profiles(max_tokens=10_000, pruning=50_000)).budget_tokens == 10_000
    disabled = profiles(max_tokens=10_000, pruning=5_000)
    disabled.runtime.history_pruning.enabled = False
    assert resolve(disabled).budget_tokens == 10_000


def test_section3_rule5_capped_at_configured_capacity_and_unknown_window_honours_max() -> None:
    """§3.5: capped at configured capacity; unknown window honours a positive max as-is."""
    assert resolve(profiles(window=50_000, max_tokens=100_000)).budget_tokens == 50_000
    unknown = resolve(profiles(max_tokens=100_000))
    assert unknown.budget_tokens == 100_000
    assert not unknown.capacity.known and unknown.capacity.safety_tokens == 100_000
    assert not unknown.capacity.HasField("model_context_window")


def test_section3_route_model_mismatch_means_unknown_capacity() -> None:
    """§3 Route: a model other than the profile's configured model gets unknown capacity."""
    res = resolve(profiles(window=8_000, model="small", route_model="big"))
    assert not res.capacity.known
    assert not res.capacity.HasField("model_context_window")
    assert res.capacity.safety_tokens == 32_000
    assert res.budget_tokens == 32_000


def test_section3_route_session_switch_beats_hint_beats_default() -> None:
    """§3 Route: explicit session switches and classifier hints use the same route selection."""
    prof = p.Profiles(
        runtime=p.RuntimeProfile(
            default_provider="a",
            classifier_routes=[p.ClassifierRoute(hint="code", provider="b")],
        ),
        providers=[
            p.ProviderProfile(alias="a", model="ma", context_window=1_000),
            p.ProviderProfile(alias="b", model="mb", context_window=2_000),
            p.ProviderProfile(alias="c", model="mc", context_window=3_000),
        ],
    )
    assert resolve(prof).route == r.Route(provider="a", model="ma", source=r.ROUTE_SOURCE_DEFAULT)
    prof.selection.classifier_hint = "code"
    hinted = resolve(prof)
    assert (hinted.route.provider, hinted.route.source) == ("b", r.ROUTE_SOURCE_CLASSIFIER_HINT)
    assert hinted.budget_tokens == 2_000
    prof.selection.session_switch.provider = "c"
    switched = resolve(prof)
    assert switched.route.source == r.ROUTE_SOURCE_SESSION_SWITCH
    assert switched.capacity.model_context_window == 3_000
    prof.selection.ClearField("session_switch")
    prof.selection.classifier_hint = "unknown-hint"
    assert resolve(prof).route.source == r.ROUTE_SOURCE_DEFAULT


def test_section6_turn_limit_default_50_and_explicit_zero_authoritative() -> None:
    """§6: default 50 turns; an explicitly configured value, including 0, is authoritative."""
    assert resolve(profiles()).max_history_turns == 50
    assert resolve(profiles(turns=0)).max_history_turns == 0
    assert resolve(profiles(turns=7)).max_history_turns == 7
