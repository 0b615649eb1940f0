"""The context meter and the input cost of a prepared request, on its resolved route (spec §10.5).

Numbers only: the caller passes the prepared request's input tokens and the resolution.
"""

from __future__ import annotations

import sys

from turnkeeper.core.budget import route_profile
from turnkeeper.core.saturation import saturate
from turnkeeper.v1 import profile_pb2, resolution_pb2, trim_pb2

PER_MILLION = 1_000_000


def input_tokens(report: trim_pb2.CapacityReport) -> int:
    """What the prepared request sends: messages, hooks and tool schemas (not reserved output)."""
    return report.message_tokens + report.hook_tokens + report.tool_schema_tokens


def context_meter(used_tokens: int, resolution: resolution_pb2.Resolution) -> trim_pb2.ContextMeter:
    """Capacity and fraction only when the route's window is known: never the 32,000 fallback."""
    meter = trim_pb2.ContextMeter(
        used_tokens=saturate(used_tokens), budget_tokens=resolution.budget_tokens
    )
    capacity = resolution.capacity
    if capacity.known:
        window = capacity.model_context_window
        meter.capacity_tokens = window
        # int / int is correctly rounded; the window is positive (validation).
        meter.capacity_fraction = used_tokens / window
    return meter


def route_prices(
    profiles: profile_pb2.Profiles, route: resolution_pb2.Route
) -> profile_pb2.ModelPrices | None:
    """The prices declared for the route's model: the same rule as its context window (§3 Route)."""
    profile = route_profile(profiles, route)
    return profile.prices if profile is not None and profile.HasField("prices") else None


def input_cost(
    used_tokens: int,
    cached_tokens: int,
    prices: profile_pb2.ModelPrices,
    cache_write_tokens: int = 0,
) -> trim_pb2.InputCostEstimate:
    """((uncached - W') x input price + cached x cached price + W' x write price) / 1,000,000,
    at most the largest double, with W' = min(W, uncached) (§10.5, §14); the cached and write
    prices default to the input price."""
    input_price = prices.input_per_million_tokens
    cached = min(cached_tokens, used_tokens)
    uncached = used_tokens - cached
    written = min(cache_write_tokens, uncached)
    cached_price = (
        prices.cached_input_per_million_tokens
        if prices.HasField("cached_input_per_million_tokens")
        else input_price
    )
    write_price = (
        prices.cache_write_per_million_tokens
        if prices.HasField("cache_write_per_million_tokens")
        else input_price
    )
    cost = (
        (uncached - written) * input_price + cached * cached_price + written * write_price
    ) / PER_MILLION
    estimate = trim_pb2.InputCostEstimate(
        cost=min(cost, sys.float_info.max),
        currency=prices.currency,
        uncached_input_tokens=saturate(uncached),
        cached_input_tokens=saturate(cached),
    )
    if written:
        estimate.cache_write_tokens = saturate(written)
    return estimate
