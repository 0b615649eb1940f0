"""The limits a call works with, from a request's explicit limits or its resolved profiles.

Both are functions of the message alone and a runtime sends the same ones with every call, so
small ones are read once per distinct encoding; the results are shared by the calls that sent
them and never changed (responses copy them).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from turnkeeper.core.budget import keep_tool_context_turns, low_water, resolve
from turnkeeper.core.meter import route_prices
from turnkeeper.core.trimming import DEFAULT_BREADCRUMB_TEXT, DEFAULT_ROW_LIMIT, DEFAULT_TURN_LIMIT
from turnkeeper.core.working import breadcrumb_cost
from turnkeeper.server.contract import validation
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2, resolution_pb2


@dataclass(frozen=True, slots=True)  # shared by the calls that sent the same limits
class TrimLimits:
    """The limits one TrimHistory call works with, from explicit limits or resolved profiles."""

    budget_tokens: int | None
    turn_limit: int
    row_limit: int
    breadcrumb_text: str
    breadcrumb_cost: int
    """The price of `breadcrumb_text` as a row (on paths that insert one)."""
    low_water: float
    """The §11 fraction in effect (1.0: the minimal cut)."""
    keep_tool_context_turns: int
    """The §13.1 K in effect; only a preparation projects, so TrimHistory just carries it."""
    keep_running_turn_tool_results: int | None
    """The §13.4 R when set; only a preparation clears, so TrimHistory just carries it."""
    resolution: resolution_pb2.Resolution | None


def _explicit_limits(explicit: svc.ExplicitLimits) -> TrimLimits:
    has_limit = explicit.HasField("max_history_messages")
    text = explicit.breadcrumb_text or DEFAULT_BREADCRUMB_TEXT
    return TrimLimits(
        budget_tokens=explicit.budget_tokens if explicit.HasField("budget_tokens") else None,
        turn_limit=explicit.max_history_messages if has_limit else DEFAULT_TURN_LIMIT,
        row_limit=explicit.max_history_messages if has_limit else DEFAULT_ROW_LIMIT,
        breadcrumb_text=text,
        breadcrumb_cost=breadcrumb_cost(text),
        low_water=low_water(
            explicit.history_trim_low_water if explicit.HasField("history_trim_low_water") else None
        )[0],
        keep_tool_context_turns=keep_tool_context_turns(
            explicit.keep_tool_context_turns
            if explicit.HasField("keep_tool_context_turns")
            else None
        ),
        keep_running_turn_tool_results=(
            explicit.keep_running_turn_tool_results
            if explicit.HasField("keep_running_turn_tool_results")
            else None
        ),
        resolution=None,
    )


def _profile_limits(
    profiles: profile_pb2.Profiles, resolution: resolution_pb2.Resolution
) -> TrimLimits:
    runtime = profiles.runtime
    text = runtime.breadcrumb_text or DEFAULT_BREADCRUMB_TEXT
    return TrimLimits(
        budget_tokens=resolution.budget_tokens,
        turn_limit=resolution.max_history_turns,
        row_limit=runtime.max_history_messages,
        breadcrumb_text=text,
        breadcrumb_cost=breadcrumb_cost(text),
        low_water=resolution.history_trim_low_water,
        keep_tool_context_turns=resolution.keep_tool_context_turns,
        keep_running_turn_tool_results=(
            resolution.keep_running_turn_tool_results
            if resolution.HasField("keep_running_turn_tool_results")
            else None
        ),
        resolution=resolution,
    )


# Profiles and explicit limits this size or smaller are resolved once per distinct encoding (a
# runtime sends the same ones with every call); at most this many of each are kept.
_CACHED_PROFILE_BYTES = 16 * 1024
_CACHED_PROFILES = 256


@dataclass(slots=True)  # not frozen, like responses.Reply
class Resolved:
    """What valid profiles resolve to: the resolution, the prices of its route's model, and the
    limits they give (TrimHistory's; PrepareModelCall's breadcrumb)."""

    resolution: resolution_pb2.Resolution
    prices: profile_pb2.ModelPrices | None
    limits: TrimLimits


@functools.lru_cache(maxsize=_CACHED_PROFILES)
def _resolved_encoding(encoded: bytes) -> Resolved | None:
    return _checked_resolution(profile_pb2.Profiles.FromString(encoded))


def _checked_resolution(profiles: profile_pb2.Profiles) -> Resolved | None:
    if validation.profiles_violations(profiles, "profiles").total:
        return None
    resolution = resolve(profiles)
    return Resolved(
        resolution,
        route_prices(profiles, resolution.route),
        _profile_limits(profiles, resolution),
    )


def valid_resolution(profiles: profile_pb2.Profiles) -> Resolved | None:
    """What `profiles` resolve to when they break no profile rule, else None (validation then
    names what they break); small ones are resolved once per encoding."""
    encoded = profiles.SerializeToString()
    if len(encoded) > _CACHED_PROFILE_BYTES:
        return _checked_resolution(profiles)
    return _resolved_encoding(encoded)


@functools.lru_cache(maxsize=_CACHED_PROFILES)
def _explicit_limits_encoding(encoded: bytes) -> TrimLimits:
    return _explicit_limits(svc.ExplicitLimits.FromString(encoded))


def explicit_trim_limits(explicit: svc.ExplicitLimits) -> TrimLimits:
    """The limits `explicit` gives; small ones are read once per encoding (like profiles)."""
    encoded = explicit.SerializeToString()
    if len(encoded) > _CACHED_PROFILE_BYTES:
        return _explicit_limits(explicit)
    return _explicit_limits_encoding(encoded)
