"""Request validation: every rule of docs/conventions.md "Validation rules", one pass per request.

Each check finds ALL violations before raising, so a caller fixes everything in one round trip;
it keeps the first MAX_FIELD_VIOLATIONS of them and counts the rest, so the work and the memory
stay linear in the request however many rows are bad. The ErrorInfo reason is the reason of the
first violation found (request field order).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeAlias

from turnkeeper.core.rows import TOOL_RESULTS_PREFIX, RowKind, classify_chat
from turnkeeper.server.contract.caller import MAX_ID_BYTES, id_too_long, too_long_ids
from turnkeeper.server.contract.errors import MAX_FIELD_VIOLATIONS, FieldViolation, invalid_argument
from turnkeeper.v1 import (
    errors_pb2,
    history_pb2,
    history_service_pb2,
    profile_pb2,
    trim_pb2,
)

Reason: TypeAlias = errors_pb2.ErrorReason.ValueType
Violation: TypeAlias = tuple[Reason, FieldViolation]

INVALID_HISTORY = errors_pb2.ERROR_REASON_INVALID_HISTORY
INVALID_PROFILE = errors_pb2.ERROR_REASON_INVALID_PROFILE
INVALID_LIMITS = errors_pb2.ERROR_REASON_INVALID_LIMITS
REQUEST_TOO_LARGE = errors_pb2.ERROR_REASON_REQUEST_TOO_LARGE
INVALID_SUBSCRIPTION = errors_pb2.ERROR_REASON_INVALID_SUBSCRIPTION
INVALID_PROVIDER_ERROR = errors_pb2.ERROR_REASON_INVALID_PROVIDER_ERROR
INVALID_USAGE = errors_pb2.ERROR_REASON_INVALID_USAGE
INVALID_CALLER = errors_pb2.ERROR_REASON_INVALID_CALLER

_ROLES = frozenset(history_pb2.Role.values()) - {history_pb2.ROLE_UNSPECIFIED}
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
# docs/conventions.md: the modes each caller path serves.
_MODES_BY_PATH: dict[int, frozenset[int]] = {
    trim_pb2.CALLER_PATH_UNSPECIFIED: _AGENT_MODES,
    trim_pb2.CALLER_PATH_AGENT: _AGENT_MODES,
    trim_pb2.CALLER_PATH_LEGACY_LOOP: frozenset({trim_pb2.TRIM_MODE_TURN_COUNT}),
    trim_pb2.CALLER_PATH_CHANNEL_SENDER_CACHE: frozenset({trim_pb2.TRIM_MODE_ROW_COUNT}),
}


class Violations:
    """The first MAX_FIELD_VIOLATIONS violations in request order, and how many were found."""

    __slots__ = ("kept", "total")

    def __init__(self) -> None:
        self.kept: list[Violation] = []
        self.total = 0

    def append(self, violation: Violation) -> None:
        self.total += 1
        if len(self.kept) < MAX_FIELD_VIOLATIONS:
            self.kept.append(violation)

    def __iadd__(self, later: Violations) -> Violations:
        self.kept.extend(later.kept[: MAX_FIELD_VIOLATIONS - len(self.kept)])
        self.total += later.total
        return self

    @property
    def full(self) -> bool:
        """True once later violations are only counted."""
        return len(self.kept) >= MAX_FIELD_VIOLATIONS

    def __iter__(self) -> Iterator[Violation]:
        return iter(self.kept)


def _v(reason: Reason, field: str, description: str) -> Violation:
    return reason, FieldViolation(field=field, description=description)


def raise_if_any(violations: Violations) -> None:
    if violations.total:
        raise invalid_argument(
            violations.kept[0][0], [v for _, v in violations.kept], violations.total
        )


# --- history -------------------------------------------------------------------------------


class HistoryRule(enum.StrEnum):
    """The history rules (docs/conventions.md), by the names both engines report them under. The
    native engine finds violations in the request bytes and names them by its own enum
    (`turnkeeper._native.HISTORY_RULES`, the same set: a unit test compares them); the reason and
    the description of each are here."""

    HISTORY_REQUIRED = "history_required"
    TOO_MANY_ROWS = "too_many_rows"
    ROLE = "role"
    TOOL_CALL_ID = "tool_call_id"
    TOOL_CALLS = "tool_calls"
    CALL_ID = "call_id"
    CALL_NAME = "call_name"
    ATTACHMENTS = "attachments"
    BREADCRUMB_ROLE = "breadcrumb_role"
    BREADCRUMB_PLACE = "breadcrumb_place"
    RESULTS_REQUIRED = "results_required"
    RESULT_ID = "result_id"
    MESSAGE_REQUIRED = "message_required"


# Every rule but TOO_MANY_ROWS, whose description names the row counts (`_too_many_rows`).
HISTORY_RULES: dict[HistoryRule, tuple[Reason, str]] = {
    HistoryRule.HISTORY_REQUIRED: (
        INVALID_HISTORY,
        "A history is required, in the chat or the conversation shape.",
    ),
    HistoryRule.ROLE: (
        INVALID_HISTORY,
        "The role must be ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT or ROLE_TOOL.",
    ),
    HistoryRule.TOOL_CALL_ID: (
        INVALID_HISTORY,
        "A tool row needs the tool_call_id of the call it answers.",
    ),
    HistoryRule.TOOL_CALLS: (INVALID_HISTORY, "Only assistant rows can carry tool calls."),
    HistoryRule.CALL_ID: (INVALID_HISTORY, "A tool call needs a non-empty id."),
    HistoryRule.CALL_NAME: (INVALID_HISTORY, "A tool call needs a non-empty name."),
    HistoryRule.ATTACHMENTS: (
        INVALID_HISTORY,
        "Attachments are allowed only on tool rows and on user rows whose content starts with "
        f"{TOOL_RESULTS_PREFIX}.",
    ),
    HistoryRule.BREADCRUMB_ROLE: (INVALID_HISTORY, "Only a user row can be the breadcrumb."),
    HistoryRule.BREADCRUMB_PLACE: (
        INVALID_HISTORY,
        "The breadcrumb must directly follow the leading system rows, and there can be only one.",
    ),
    HistoryRule.RESULTS_REQUIRED: (
        INVALID_HISTORY,
        "A tool_results row needs at least one result.",
    ),
    HistoryRule.RESULT_ID: (
        INVALID_HISTORY,
        "A tool result needs the tool_call_id of the call it answers.",
    ),
    HistoryRule.MESSAGE_REQUIRED: (
        INVALID_HISTORY,
        "A conversation row needs one of chat, assistant_tool_calls or tool_results.",
    ),
}


def _rule(rule: HistoryRule, field: str) -> Violation:
    reason, description = HISTORY_RULES[rule]
    return _v(reason, field, description)


def _too_many_rows(path: str, count: int, max_rows: int) -> Violation:
    return _v(
        REQUEST_TOO_LARGE,
        path,
        f"The history has {count} rows; this server accepts at most {max_rows}.",
    )


def history_rule_violation(rule: HistoryRule, path: str, count: int, max_rows: int) -> Violation:
    """A violation the native engine found, named by its rule."""
    if rule is HistoryRule.TOO_MANY_ROWS:
        return _too_many_rows(path, count, max_rows)
    return _rule(rule, path)


def _tool_call_violations(
    calls: Sequence[history_pb2.ToolCall], path: str, out: Violations
) -> None:
    for j, call in enumerate(calls):
        if out.full:  # a row can hold a million calls: count the rest without naming them
            out.total += (not call.id) + (not call.name)
            continue
        if not call.id:
            out.append(_rule(HistoryRule.CALL_ID, f"{path}[{j}].id"))
        if not call.name:
            out.append(_rule(HistoryRule.CALL_NAME, f"{path}[{j}].name"))


def _chat_row_violations(
    row: history_pb2.ChatMessage, path: str, crumb_slot: bool, out: Violations
) -> None:
    """One chat row. `crumb_slot`: the row directly follows the leading run of system rows."""
    role = row.role
    if role not in _ROLES:
        out.append(_rule(HistoryRule.ROLE, f"{path}.role"))
    if role == history_pb2.ROLE_TOOL and not row.tool_call_id:
        out.append(_rule(HistoryRule.TOOL_CALL_ID, f"{path}.tool_call_id"))
    if row.tool_calls:
        if role != history_pb2.ROLE_ASSISTANT:
            out.append(_rule(HistoryRule.TOOL_CALLS, f"{path}.tool_calls"))
        else:
            _tool_call_violations(row.tool_calls, f"{path}.tool_calls", out)
    if row.attachments and classify_chat(row) not in (RowKind.TOOL, RowKind.CARRIER):
        out.append(_rule(HistoryRule.ATTACHMENTS, f"{path}.attachments"))
    if row.breadcrumb:
        if role != history_pb2.ROLE_USER:
            out.append(_rule(HistoryRule.BREADCRUMB_ROLE, f"{path}.breadcrumb"))
        elif not crumb_slot:
            out.append(_rule(HistoryRule.BREADCRUMB_PLACE, f"{path}.breadcrumb"))


def _conversation_row_violations(
    row: history_pb2.ConversationMessage, path: str, crumb_slot: bool, out: Violations
) -> None:
    kind = row.WhichOneof("message")
    if kind == "chat":
        _chat_row_violations(row.chat, f"{path}.chat", crumb_slot, out)
    elif kind == "assistant_tool_calls":
        _tool_call_violations(
            row.assistant_tool_calls.tool_calls, f"{path}.assistant_tool_calls.tool_calls", out
        )
    elif kind == "tool_results":
        results = row.tool_results.results
        if not results:
            out.append(_rule(HistoryRule.RESULTS_REQUIRED, f"{path}.tool_results.results"))
        for j, result in enumerate(results):
            if not result.tool_call_id:
                out.append(
                    _rule(HistoryRule.RESULT_ID, f"{path}.tool_results.results[{j}].tool_call_id")
                )
    else:
        out.append(_rule(HistoryRule.MESSAGE_REQUIRED, f"{path}.message"))


def _leading_run(flags: Iterable[bool]) -> int:
    """Length of the leading run of true flags; stops reading at the first false one."""
    count = 0
    for flag in flags:
        if not flag:
            break
        count += 1
    return count


def history_violations(history: history_pb2.History, path: str, max_rows: int) -> Violations:
    """Every violation of the history rules, in row order; `path` names the History field.

    A history over `max_rows` rows gets only the size violation: its rows are not inspected.
    """
    out = Violations()
    shape = history.WhichOneof("shape")
    if shape is None:
        out.append(_rule(HistoryRule.HISTORY_REQUIRED, path))
        return out
    count = len(history.chat.messages if shape == "chat" else history.conversation.messages)
    if count > max_rows:
        out.append(_too_many_rows(path, count, max_rows))
        return out
    base = f"{path}.{shape}.messages"
    system = history_pb2.ROLE_SYSTEM
    # The only place a breadcrumb may sit is the row right after the leading system rows.
    if shape == "chat":
        chat_rows = history.chat.messages
        crumb_slot = _leading_run(row.role == system for row in chat_rows)
        for i, chat_row in enumerate(chat_rows):
            _chat_row_violations(chat_row, f"{base}[{i}]", i == crumb_slot, out)
    else:
        rows = history.conversation.messages
        crumb_slot = _leading_run(
            row.WhichOneof("message") == "chat" and row.chat.role == system for row in rows
        )
        for i, row in enumerate(rows):
            _conversation_row_violations(row, f"{base}[{i}]", i == crumb_slot, out)
    return out


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
                _v(INVALID_PROFILE, f"{route_path}.hint", "A classifier route needs a hint.")
            )
        elif route.hint in hints:
            out.append(
                _v(
                    INVALID_PROFILE,
                    f"{route_path}.hint",
                    f"The classifier hint {route.hint!r} is already routed by an earlier route.",
                )
            )
        hints.add(route.hint)
        if not route.provider:
            out.append(
                _v(
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
                _v(INVALID_PROFILE, f"{provider_path}.alias", "A provider profile needs an alias.")
            )
        elif provider.alias in aliases:
            out.append(
                _v(
                    INVALID_PROFILE,
                    f"{provider_path}.alias",
                    f"The provider alias {provider.alias!r} is already used by an earlier "
                    "provider.",
                )
            )
        aliases.add(provider.alias)
        if provider.HasField("context_window") and provider.context_window == 0:
            out.append(
                _v(
                    INVALID_PROFILE,
                    f"{provider_path}.context_window",
                    "A context window must be positive; leave it unset when unknown.",
                )
            )
        if provider.HasField("prices"):
            _price_violations(provider.prices, f"{provider_path}.prices", out)
    selection = profiles.selection
    if selection.HasField("session_switch") and not selection.session_switch.provider:
        out.append(
            _v(
                INVALID_PROFILE,
                f"{path}.selection.session_switch.provider",
                "A session switch needs a provider alias.",
            )
        )
    return out


def _price_violations(prices: profile_pb2.ModelPrices, path: str, out: Violations) -> None:
    checked = [("input_per_million_tokens", prices.input_per_million_tokens)]
    if prices.HasField("cached_input_per_million_tokens"):
        checked.append(("cached_input_per_million_tokens", prices.cached_input_per_million_tokens))
    for name, value in checked:
        if not (math.isfinite(value) and value >= 0):
            out.append(
                _v(INVALID_PROFILE, f"{path}.{name}", "A price must be finite and not negative.")
            )


def usage_violations(usage: trim_pb2.ReportedUsage, path: str) -> Violations:
    """The tool-schema tokens are part of the estimate, so they cannot exceed it (§10.3)."""
    out = Violations()
    if usage.tool_schema_tokens > usage.estimated_input_tokens:
        out.append(
            _v(
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
            _v(INVALID_CALLER, f"{path}.{name}", f"An id is at most {MAX_ID_BYTES} bytes of UTF-8.")
        )
    return out


def check_resolve_budget(request: history_service_pb2.ResolveBudgetRequest) -> None:
    raise_if_any(profiles_violations(request.profiles, "profiles"))


def _limits_violations(request: history_service_pb2.TrimHistoryRequest) -> Violations:
    out = Violations()
    mode, path = request.mode, request.caller_path
    if mode not in _MODES:
        out.append(
            _v(
                INVALID_LIMITS,
                "mode",
                "The trim mode must be TOKEN_BUDGET, TURN_COUNT, OVERFLOW_RECOVERY, ROW_COUNT or "
                "REPORTED_USAGE.",
            )
        )
    if path not in _PATHS:
        out.append(
            _v(
                INVALID_LIMITS,
                "caller_path",
                "The caller path must be AGENT, LEGACY_LOOP or CHANNEL_SENDER_CACHE.",
            )
        )
    elif mode in _MODES and mode not in _MODES_BY_PATH[path]:
        out.append(
            _v(
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
            _v(
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
            _v(INVALID_USAGE, "reported_usage", "TRIM_MODE_REPORTED_USAGE needs reported_usage.")
        )
    elif has_usage:
        out.append(
            _v(
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
    request: history_service_pb2.PrepareModelCallRequest, profiles_valid: bool = False
) -> Violations:
    """The violations of a PrepareModelCall request outside its history; `profiles_valid`: its
    profiles are known to break no rule."""
    violations = Violations()
    if not profiles_valid:
        violations = profiles_violations(request.profiles, "profiles")
    if request.HasField("reported_usage"):
        violations += usage_violations(request.reported_usage, "reported_usage")
    if request.HasField("caller"):
        violations += caller_violations(request.caller, "caller")
    return violations


def check_cap_tool_results(request: history_service_pb2.CapToolResultsRequest) -> None:
    """Any text and any explicit cap (0 disables) are valid; the cap comes from one place only."""
    violations = Violations()
    if request.HasField("profiles"):
        if request.max_tool_result_chars:
            violations.append(
                _v(
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
                    _v(
                        INVALID_SUBSCRIPTION,
                        f"{name}[{i}]",
                        f"An id is at most {MAX_ID_BYTES} bytes of UTF-8.",
                    )
                )
    for i, reason in enumerate(request.reasons):
        if reason not in _REASONS:
            out.append(
                _v(
                    INVALID_SUBSCRIPTION,
                    f"reasons[{i}]",
                    "A reason filter must be TRIM_REASON_TOKEN_BUDGET or TRIM_REASON_TURN_LIMIT.",
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
            _v(
                INVALID_PROVIDER_ERROR,
                "http_status",
                "An HTTP status must be 0 (unknown) or in 100-599.",
            )
        )
        raise_if_any(out)
