"""Request validation: the rules of docs/conventions.md "Validation rules" on a request's own
fields (profiles, limits, reported usage, the caller, filters), one pass per request. What its
history must satisfy is `history_rules.py`'s, checked by the engine that read the history.

Each check finds ALL violations before raising, so a caller fixes everything in one round trip;
it keeps the first MAX_FIELD_VIOLATIONS of them and counts the rest, so the work and the memory
stay linear in the request however many rows are bad. The ErrorInfo reason is the reason of the
first violation found (request field order).
"""

from __future__ import annotations

import math

from turnkeeper.server.contract.caller import MAX_ID_BYTES, id_too_long, too_long_ids
from turnkeeper.server.contract.errors import Violations, raise_if_any, violation
from turnkeeper.v1 import errors_pb2, history_service_pb2, profile_pb2, trim_pb2

INVALID_PROFILE = errors_pb2.ERROR_REASON_INVALID_PROFILE
INVALID_LIMITS = errors_pb2.ERROR_REASON_INVALID_LIMITS
INVALID_SUBSCRIPTION = errors_pb2.ERROR_REASON_INVALID_SUBSCRIPTION
INVALID_PROVIDER_ERROR = errors_pb2.ERROR_REASON_INVALID_PROVIDER_ERROR
INVALID_USAGE = errors_pb2.ERROR_REASON_INVALID_USAGE
INVALID_CALLER = errors_pb2.ERROR_REASON_INVALID_CALLER

_MODES = frozenset(trim_pb2.TrimMode.values()) - {trim_pb2.TRIM_MODE_UNSPECIFIED}
_PATHS = frozenset(trim_pb2.CallerPath.values())  # UNSPECIFIED is accepted: it means AGENT
_REASONS = frozenset(trim_pb2.TrimReason.values()) - {trim_pb2.TRIM_REASON_UNSPECIFIED}
_AGENT_MODES = frozenset(
    {
        trim_pb2.TRIM_MODE_TOKEN_BUDGET,
        trim_pb2.TRIM_MODE_TURN_COUNT,
        trim_pb2.TRIM_MODE_OVERFLOW_RECOVERY,
        trim_pb2.TRIM_MODE_REPORTED_USAGE,
    }
)
_NO_MODES: frozenset[int] = frozenset()
# An open enum on the wire: a number no CacheLifetime defines is rejected (§14 names two).
_CACHE_LIFETIMES = frozenset(profile_pb2.CacheLifetime.values())
# docs/conventions.md: the modes each caller path serves.
_MODES_BY_PATH: dict[int, frozenset[int]] = {
    trim_pb2.CALLER_PATH_UNSPECIFIED: _AGENT_MODES,
    trim_pb2.CALLER_PATH_AGENT: _AGENT_MODES,
    trim_pb2.CALLER_PATH_LEGACY_LOOP: frozenset({trim_pb2.TRIM_MODE_TURN_COUNT}),
    trim_pb2.CALLER_PATH_CHANNEL_SENDER_CACHE: frozenset({trim_pb2.TRIM_MODE_ROW_COUNT}),
}


# --- profiles ------------------------------------------------------------------------------


def profiles_violations(profiles: profile_pb2.Profiles, path: str) -> Violations:
    """Every violation of the profile rules; `path` names the Profiles field (e.g. "profiles")."""
    out = Violations()
    runtime = profiles.runtime
    # A NaN or infinite ratio is not an error: like any value outside (0, 1] it is treated as
    # unset and reported as ratio_ignored (§3.3, §10.7).
    hints: set[str] = set()
    for i, route in enumerate(runtime.classifier_routes):
        route_path = f"{path}.runtime.classifier_routes[{i}]"
        if not route.hint:
            out.append(
                violation(INVALID_PROFILE, f"{route_path}.hint", "A classifier route needs a hint.")
            )
        elif route.hint in hints:
            out.append(
                violation(
                    INVALID_PROFILE,
                    f"{route_path}.hint",
                    f"The classifier hint {route.hint!r} is already routed by an earlier route.",
                )
            )
        hints.add(route.hint)
        if not route.provider:
            out.append(
                violation(
                    INVALID_PROFILE,
                    f"{route_path}.provider",
                    "A classifier route needs a provider alias.",
                )
            )
    aliases: set[str] = set()
    for i, provider in enumerate(profiles.providers):
        provider_path = f"{path}.providers[{i}]"
        if not provider.alias:
            out.append(
                violation(
                    INVALID_PROFILE, f"{provider_path}.alias", "A provider profile needs an alias."
                )
            )
        elif provider.alias in aliases:
            out.append(
                violation(
                    INVALID_PROFILE,
                    f"{provider_path}.alias",
                    f"The provider alias {provider.alias!r} is already used by an earlier "
                    "provider.",
                )
            )
        aliases.add(provider.alias)
        if provider.HasField("context_window") and provider.context_window == 0:
            out.append(
                violation(
                    INVALID_PROFILE,
                    f"{provider_path}.context_window",
                    "A context window must be positive; leave it unset when unknown.",
                )
            )
        if provider.HasField("prices"):
            _price_violations(provider.prices, f"{provider_path}.prices", out)
        if provider.cache_lifetime not in _CACHE_LIFETIMES:
            out.append(
                violation(
                    INVALID_PROFILE,
                    f"{provider_path}.cache_lifetime",
                    "A cache lifetime must be CACHE_LIFETIME_FIVE_MINUTES, "
                    "CACHE_LIFETIME_ONE_HOUR or unspecified.",
                )
            )
    out += selection_violations(profiles.selection, f"{path}.selection")
    return out


def selection_violations(selection: profile_pb2.RouteSelection, path: str) -> Violations:
    """A route selection's rule: a session switch names a provider alias."""
    out = Violations()
    if selection.HasField("session_switch") and not selection.session_switch.provider:
        out.append(
            violation(
                INVALID_PROFILE,
                f"{path}.session_switch.provider",
                "A session switch needs a provider alias.",
            )
        )
    return out


def _price_violations(prices: profile_pb2.ModelPrices, path: str, out: Violations) -> None:
    checked = [("input_per_million_tokens", prices.input_per_million_tokens)]
    if prices.HasField("cached_input_per_million_tokens"):
        checked.append(("cached_input_per_million_tokens", prices.cached_input_per_million_tokens))
    if prices.HasField("cache_write_per_million_tokens"):
        checked.append(("cache_write_per_million_tokens", prices.cache_write_per_million_tokens))
    for name, value in checked:
        if not (math.isfinite(value) and value >= 0):
            out.append(
                violation(
                    INVALID_PROFILE, f"{path}.{name}", "A price must be finite and not negative."
                )
            )


def usage_violations(usage: trim_pb2.ReportedUsage, path: str) -> Violations:
    """The tool-schema tokens are part of the estimate, so they cannot exceed it (§10.3)."""
    out = Violations()
    if usage.tool_schema_tokens > usage.estimated_input_tokens:
        out.append(
            violation(
                INVALID_USAGE,
                f"{path}.tool_schema_tokens",
                "tool_schema_tokens is the part of estimated_input_tokens spent on tool schemas; "
                "it cannot exceed it.",
            )
        )
    return out


# --- each request outside its history (the engine that read it checked the history) ---------


def caller_fits(
    request: history_service_pb2.TrimHistoryRequest | history_service_pb2.PrepareModelCallRequest,
) -> bool:
    """Whether the request's CallerContext (if any) breaks no rule: the common case's check."""
    return not request.HasField("caller") or not too_long_ids(request.caller)


def caller_violations(caller: trim_pb2.CallerContext, path: str) -> Violations:
    out = Violations()
    for name in too_long_ids(caller):
        out.append(
            violation(
                INVALID_CALLER, f"{path}.{name}", f"An id is at most {MAX_ID_BYTES} bytes of UTF-8."
            )
        )
    return out


def check_resolve_budget(request: history_service_pb2.ResolveBudgetRequest) -> None:
    raise_if_any(profiles_violations(request.profiles, "profiles"))


def _limits_violations(request: history_service_pb2.TrimHistoryRequest) -> Violations:
    out = Violations()
    mode, path = request.mode, request.caller_path
    if mode not in _MODES:
        out.append(
            violation(
                INVALID_LIMITS,
                "mode",
                "The trim mode must be TOKEN_BUDGET, TURN_COUNT, OVERFLOW_RECOVERY, ROW_COUNT or "
                "REPORTED_USAGE.",
            )
        )
    if path not in _PATHS:
        out.append(
            violation(
                INVALID_LIMITS,
                "caller_path",
                "The caller path must be AGENT, LEGACY_LOOP or CHANNEL_SENDER_CACHE.",
            )
        )
    elif mode in _MODES and mode not in _MODES_BY_PATH[path]:
        out.append(
            violation(
                INVALID_LIMITS,
                "caller_path",
                f"The {trim_pb2.CallerPath.Name(path)} path does not serve "
                f"{trim_pb2.TrimMode.Name(mode)}.",
            )
        )
    if (
        mode in (trim_pb2.TRIM_MODE_TOKEN_BUDGET, trim_pb2.TRIM_MODE_REPORTED_USAGE)
        and request.WhichOneof("limits") == "explicit_limits"
        and not request.explicit_limits.HasField("budget_tokens")
    ):
        out.append(
            violation(
                INVALID_LIMITS,
                "explicit_limits.budget_tokens",
                "A token-budget or reported-usage trim with explicit limits needs budget_tokens.",
            )
        )
    return out


def _trim_usage_violations(request: history_service_pb2.TrimHistoryRequest) -> Violations:
    """reported_usage goes with TRIM_MODE_REPORTED_USAGE, and only with it."""
    has_usage = request.HasField("reported_usage")
    if has_usage and request.mode == trim_pb2.TRIM_MODE_REPORTED_USAGE:
        return usage_violations(request.reported_usage, "reported_usage")
    out = Violations()
    if request.mode == trim_pb2.TRIM_MODE_REPORTED_USAGE:
        out.append(
            violation(
                INVALID_USAGE, "reported_usage", "TRIM_MODE_REPORTED_USAGE needs reported_usage."
            )
        )
    elif has_usage:
        out.append(
            violation(
                INVALID_USAGE,
                "reported_usage",
                "reported_usage is only used by TRIM_MODE_REPORTED_USAGE.",
            )
        )
    return out


def plain_trim_request(
    mode: trim_pb2.TrimMode.ValueType,
    caller_path: trim_pb2.CallerPath.ValueType,
    *,
    budget_given: bool,
    reported_usage: bool,
) -> bool:
    """Whether a TrimHistory request is the well-formed common case, by one check: a mode its
    caller path serves, other than REPORTED_USAGE, no reported usage, and a budget if the mode
    needs one (explicit limits may lack it). Then the rules outside its history find nothing but
    what its profiles break; otherwise `trim_request_violations` (which may find nothing)."""
    return (
        mode in _MODES_BY_PATH.get(caller_path, _NO_MODES)
        and mode != trim_pb2.TRIM_MODE_REPORTED_USAGE
        and not reported_usage
        and (mode != trim_pb2.TRIM_MODE_TOKEN_BUDGET or budget_given)
    )


def trim_request_violations(
    request: history_service_pb2.TrimHistoryRequest, profiles_valid: bool = False
) -> Violations:
    """The violations of a TrimHistory request outside its history; `profiles_valid`: its
    profiles are known to break no rule."""
    limits = request.WhichOneof("limits")
    if caller_fits(request) and plain_trim_request(
        request.mode,
        request.caller_path,
        budget_given=limits != "explicit_limits"
        or request.explicit_limits.HasField("budget_tokens"),
        reported_usage=request.HasField("reported_usage"),
    ):
        if limits == "profiles" and not profiles_valid:
            return profiles_violations(request.profiles, "profiles")
        return Violations()
    return _trim_request_violations_in_full(request, profiles_valid)


def _trim_request_violations_in_full(
    request: history_service_pb2.TrimHistoryRequest, profiles_valid: bool = False
) -> Violations:
    violations = _limits_violations(request)
    if request.WhichOneof("limits") == "profiles" and not profiles_valid:
        violations += profiles_violations(request.profiles, "profiles")
    violations += _trim_usage_violations(request)
    violations += caller_violations(request.caller, "caller")
    return violations


def prepare_request_violations(
    request: history_service_pb2.PrepareModelCallRequest
    | history_service_pb2.PlanCompactionRequest,
    profiles_valid: bool = False,
) -> Violations:
    """The violations of a PrepareModelCall request (or of what a PlanCompaction request shares
    with it) outside its history; `profiles_valid`: its profiles are known to break no rule."""
    violations = Violations()
    if not profiles_valid:
        violations = profiles_violations(request.profiles, "profiles")
    if request.HasField("reported_usage"):
        violations += usage_violations(request.reported_usage, "reported_usage")
    if request.HasField("caller"):
        violations += caller_violations(request.caller, "caller")
    return violations


def compaction_request_violations(
    request: history_service_pb2.PlanCompactionRequest, profiles_valid: bool = False
) -> Violations:
    """The violations of a PlanCompaction request outside its history (§15.3): what it shares
    with PrepareModelCall, and its summarizer's route selection, held to the route selection's
    rule."""
    violations = prepare_request_violations(request, profiles_valid)
    if request.HasField("summarizer_selection"):
        violations += selection_violations(request.summarizer_selection, "summarizer_selection")
    return violations


def check_cap_tool_results(request: history_service_pb2.CapToolResultsRequest) -> None:
    """Any text and any explicit cap (0 disables) are valid; the cap comes from one place only."""
    violations = Violations()
    if request.HasField("profiles"):
        if request.max_tool_result_chars:
            violations.append(
                violation(
                    INVALID_LIMITS,
                    "max_tool_result_chars",
                    "Give the cap either explicitly or through profiles, not both.",
                )
            )
        violations += profiles_violations(request.profiles, "profiles")
    raise_if_any(violations)


def check_trim_events(request: history_service_pb2.TrimEventsRequest) -> None:
    """The id filters' lengths and the `reasons` rule; the feed checks `after_cursor`, which only
    it can read."""
    out = Violations()
    for name, ids in (("session_ids", request.session_ids), ("runtime_ids", request.runtime_ids)):
        for i, value in enumerate(ids):
            if id_too_long(value):
                out.append(
                    violation(
                        INVALID_SUBSCRIPTION,
                        f"{name}[{i}]",
                        f"An id is at most {MAX_ID_BYTES} bytes of UTF-8.",
                    )
                )
    for i, reason in enumerate(request.reasons):
        if reason not in _REASONS:
            out.append(
                violation(
                    INVALID_SUBSCRIPTION,
                    f"reasons[{i}]",
                    "A reason filter must be TRIM_REASON_TOKEN_BUDGET, TRIM_REASON_TURN_LIMIT or "
                    "TRIM_REASON_TOOL_RESULTS_CLEARED.",
                )
            )
    raise_if_any(out)


def check_classify_provider_error(
    request: history_service_pb2.ClassifyProviderErrorRequest,
) -> None:
    """Any message is valid; an HTTP status, when given, must be one (100-599) or 0, which SDKs
    report for an error that came with no response (a status the runtime does not know)."""
    status = request.http_status
    if request.HasField("http_status") and status != 0 and not 100 <= status <= 599:
        out = Violations()
        out.append(
            violation(
                INVALID_PROVIDER_ERROR,
                "http_status",
                "An HTTP status must be 0 (unknown) or in 100-599.",
            )
        )
        raise_if_any(out)
