"""docs/conventions.md "Validation rules": one test per rule, named after it.

Each request is checked the way the server checks it: the engine reads its bytes, then the RPC's
function (`api/rpcs.py`) validates it before any work.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import grpc
import pytest
from google.protobuf.message import Message
from turnkeeper.core import budget
from turnkeeper.server.api import rpcs, trim_limits
from turnkeeper.server.api.responses import Reply
from turnkeeper.server.contract import history_rules, validation
from turnkeeper.server.contract.errors import RequestError, Violations
from turnkeeper.server.engine.protocol import HistorySource
from turnkeeper.server.engine.python import PythonEngine
from turnkeeper.v1 import errors_pb2, history_pb2, profile_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

ROWS = 100_000
M = TypeVar("M", bound=Message)
SYS, USER, ASSISTANT, TOOL = (
    history_pb2.ROLE_SYSTEM,
    history_pb2.ROLE_USER,
    history_pb2.ROLE_ASSISTANT,
    history_pb2.ROLE_TOOL,
)


def chat(*rows: history_pb2.ChatMessage) -> history_pb2.History:
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


def conversation(*rows: history_pb2.ConversationMessage) -> history_pb2.History:
    return history_pb2.History(conversation=history_pb2.ConversationHistory(messages=rows))


def row(role: int, content: str = "x", **fields: object) -> history_pb2.ChatMessage:
    return history_pb2.ChatMessage(role=role, content=content, **fields)  # type: ignore[arg-type]


def call(id: str = "c1", name: str = "f") -> history_pb2.ToolCall:
    return history_pb2.ToolCall(id=id, name=name, arguments="{}")


IMAGE = history_pb2.Attachment(media_type="image/png", uri="file:///a.png")


def error_of(check: Callable[[], None]) -> RequestError:
    with pytest.raises(RequestError) as caught:
        check()
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    return caught.value


def fields_of(check: Callable[[], None]) -> list[str]:
    return [v.field for v in error_of(check).violations]


def reason_of(check: Callable[[], None]) -> str:
    return errors_pb2.ErrorReason.Name(error_of(check).reason)


def served(rpc: Callable[[M, HistorySource], Reply], request: M, max_rows: int = ROWS) -> None:
    """Runs `rpc` on `request` as the servicer does (with the reference engine)."""
    rpc(*PythonEngine().read(request.SerializeToString(), type(request), max_rows))


def estimate(history: history_pb2.History, max_rows: int = ROWS) -> Callable[[], None]:
    request = svc.EstimateTokensRequest(history=history)
    return lambda: served(rpcs.estimate_tokens, request, max_rows)


def trim(max_rows: int = ROWS, **fields: object) -> Callable[[], None]:
    fields.setdefault("history", chat(row(USER)))
    fields.setdefault("mode", trim_pb2.TRIM_MODE_TURN_COUNT)
    request = svc.TrimHistoryRequest(**fields)  # type: ignore[arg-type]
    return lambda: served(rpcs.trim_history, request, max_rows)


def resolve(profiles: profile_pb2.Profiles) -> Callable[[], None]:
    request = svc.ResolveBudgetRequest(profiles=profiles)
    return lambda: rpcs.resolve_budget(request)


# --- valid requests pass --------------------------------------------------------------------


def test_valid_histories_in_both_shapes_pass() -> None:
    good_chat = chat(
        row(SYS),
        row(USER, "[earlier turns omitted]", breadcrumb=True),
        row(USER, "hi"),
        row(ASSISTANT, "", tool_calls=[call("a"), call("b")]),
        row(TOOL, "r", tool_call_id="a", attachments=[IMAGE]),
        row(USER, "[Tool results] b", attachments=[IMAGE]),
    )
    estimate(good_chat)()
    good_conversation = conversation(
        history_pb2.ConversationMessage(chat=row(SYS)),
        history_pb2.ConversationMessage(chat=row(USER, "crumb", breadcrumb=True)),
        history_pb2.ConversationMessage(
            assistant_tool_calls=history_pb2.AssistantToolCalls(tool_calls=[call()])
        ),
        history_pb2.ConversationMessage(
            tool_results=history_pb2.ToolResults(
                results=[history_pb2.ToolResult(tool_call_id="c1", attachments=[IMAGE])]
            )
        ),
    )
    served(rpcs.sweep_orphans, svc.SweepOrphansRequest(history=good_conversation))
    estimate(chat())()


# --- History (ERROR_REASON_INVALID_HISTORY) --------------------------------------------------


@pytest.mark.parametrize(
    "history", [history_pb2.History(), None], ids=["neither-shape", "history-unset"]
)
def test_history_unset_or_neither_shape_set_names_history(
    history: history_pb2.History | None,
) -> None:
    request = svc.EstimateTokensRequest(history=history)
    check = lambda: served(rpcs.estimate_tokens, request)  # noqa: E731
    assert fields_of(check) == ["history"]
    assert reason_of(check) == "ERROR_REASON_INVALID_HISTORY"


@pytest.mark.parametrize("role", [history_pb2.ROLE_UNSPECIFIED, 99])
def test_chat_row_role_unspecified_or_unknown(role: int) -> None:
    assert fields_of(estimate(chat(row(USER), row(role)))) == ["history.chat.messages[1].role"]


def test_chat_row_tool_row_with_empty_tool_call_id() -> None:
    check = estimate(chat(row(USER), row(TOOL, "r")))
    assert fields_of(check) == ["history.chat.messages[1].tool_call_id"]


def test_chat_row_tool_calls_on_a_non_assistant_row() -> None:
    check = estimate(chat(row(USER, tool_calls=[call()])))
    assert fields_of(check) == ["history.chat.messages[0].tool_calls"]


def test_chat_row_tool_call_with_empty_id_or_name() -> None:
    check = estimate(chat(row(ASSISTANT, tool_calls=[call(), call(id=""), call(name="")])))
    assert fields_of(check) == [
        "history.chat.messages[0].tool_calls[1].id",
        "history.chat.messages[0].tool_calls[2].name",
    ]


@pytest.mark.parametrize(
    "bad",
    [
        row(ASSISTANT, attachments=[IMAGE]),
        row(SYS, attachments=[IMAGE]),
        row(USER, "plain user text", attachments=[IMAGE]),
        row(USER, " [Tool results] leading space", attachments=[IMAGE]),
        row(USER, "[tool results] wrong case", attachments=[IMAGE]),
    ],
    ids=["assistant", "system", "user", "user-leading-space", "user-wrong-case"],
)
def test_chat_row_attachments_only_on_tool_rows_and_tool_results_carriers(
    bad: history_pb2.ChatMessage,
) -> None:
    assert fields_of(estimate(chat(row(USER), bad))) == ["history.chat.messages[1].attachments"]


def test_chat_row_attachments_on_a_breadcrumb_carrier_text_are_rejected() -> None:
    """A carrier is a NON-breadcrumb user row starting with [Tool results]."""
    crumb = row(USER, "[Tool results] x", breadcrumb=True, attachments=[IMAGE])
    assert fields_of(estimate(chat(crumb))) == ["history.chat.messages[0].attachments"]


@pytest.mark.parametrize("role", [SYS, ASSISTANT, TOOL])
def test_chat_row_breadcrumb_on_a_non_user_row(role: int) -> None:
    bad = row(role, breadcrumb=True, tool_call_id="t" if role == TOOL else "")
    assert fields_of(estimate(chat(row(SYS), bad))) == ["history.chat.messages[1].breadcrumb"]


def test_chat_row_breadcrumb_only_directly_after_the_leading_system_rows() -> None:
    crumb = row(USER, "crumb", breadcrumb=True)
    # Valid slots: index 0 with no system rows, index 2 after two.
    estimate(chat(crumb, row(USER)), max_rows=9)()
    ok = chat(row(SYS), row(SYS), crumb, row(USER), row(SYS))
    estimate(ok, max_rows=9)()
    late = chat(row(SYS), row(USER), crumb)
    assert fields_of(estimate(late)) == ["history.chat.messages[2].breadcrumb"]


def test_chat_row_breadcrumb_at_most_one() -> None:
    crumb = row(USER, "crumb", breadcrumb=True)
    check = estimate(chat(row(SYS), crumb, crumb, row(USER)))
    assert fields_of(check) == ["history.chat.messages[2].breadcrumb"]


def test_chat_row_rules_apply_inside_conversation_chat_rows() -> None:
    check = estimate(
        conversation(
            history_pb2.ConversationMessage(chat=row(USER)),
            history_pb2.ConversationMessage(chat=row(TOOL, "r")),
            history_pb2.ConversationMessage(chat=row(USER, breadcrumb=True)),
        )
    )
    assert fields_of(check) == [
        "history.conversation.messages[1].chat.tool_call_id",
        "history.conversation.messages[2].chat.breadcrumb",
    ]


def test_conversation_breadcrumb_slot_counts_only_chat_system_rows() -> None:
    crumb = history_pb2.ConversationMessage(chat=row(USER, breadcrumb=True))
    calls = history_pb2.ConversationMessage(
        assistant_tool_calls=history_pb2.AssistantToolCalls(tool_calls=[call()])
    )
    system = history_pb2.ConversationMessage(chat=row(SYS))
    estimate(conversation(system, crumb, calls))()
    check = estimate(conversation(system, calls, crumb))
    assert fields_of(check) == ["history.conversation.messages[2].chat.breadcrumb"]


@pytest.mark.parametrize(
    "bad",
    [
        row(SYS, pinned=True),
        row(ASSISTANT, pinned=True),
        row(TOOL, tool_call_id="t", pinned=True),
        row(USER, "[Tool results] r", pinned=True),
        row(USER, "crumb", breadcrumb=True, pinned=True),
    ],
)
def test_chat_row_pinned_only_on_a_real_user_row(bad: history_pb2.ChatMessage) -> None:
    """§15.1: a pin on anything but a real user row would split its turn."""
    check = estimate(chat(row(USER, pinned=True), row(ASSISTANT), bad, row(USER)))
    assert fields_of(check) == ["history.chat.messages[2].pinned"]
    assert history_rules.HISTORY_RULES[history_rules.HistoryRule.PINNED][1] == (
        "Only a real user row can be pinned: it pins its whole turn."
    )


def test_chat_row_pinned_on_the_summary_row() -> None:
    summary = row(USER, "so far", summary=True, pinned=True)
    assert fields_of(estimate(chat(row(SYS), summary))) == ["history.chat.messages[1].pinned"]


def test_chat_row_summary_only_right_after_the_leading_system_rows() -> None:
    """§15.2: at most one summary row, a user row right after the system rows."""
    summary = row(USER, "so far", summary=True)
    estimate(chat(summary, row(USER)))()
    estimate(chat(row(SYS), row(SYS), summary, row(USER, "crumb", breadcrumb=True), row(USER)))()
    assert fields_of(estimate(chat(row(SYS), row(USER), summary))) == [
        "history.chat.messages[2].summary"
    ]
    assert fields_of(estimate(chat(row(SYS), summary, summary))) == [
        "history.chat.messages[2].summary"
    ]
    after_crumb = chat(row(SYS), row(USER, "crumb", breadcrumb=True), summary)
    assert fields_of(estimate(after_crumb)) == ["history.chat.messages[2].summary"]
    assert fields_of(estimate(chat(row(SYS), row(ASSISTANT, summary=True)))) == [
        "history.chat.messages[1].summary"
    ]


def test_chat_row_summary_marked_as_breadcrumb_too_is_a_misplaced_breadcrumb() -> None:
    both = row(USER, "so far", summary=True, breadcrumb=True)
    assert fields_of(estimate(chat(row(SYS), both))) == ["history.chat.messages[1].breadcrumb"]


def test_chat_row_breadcrumb_after_the_summary_row_and_pinned_turns() -> None:
    """§15.1: a breadcrumb may stand right after the pinned turns of the fixed prefix."""
    crumb = row(USER, "crumb", breadcrumb=True)
    summary = row(USER, "so far", summary=True)
    pinned = [row(USER, "task", pinned=True), row(ASSISTANT)]
    estimate(chat(row(SYS), summary, *pinned, *pinned, crumb, row(USER)))()
    # Rows before the first pinned boundary belong to its turn.
    estimate(chat(row(SYS), row(ASSISTANT), *pinned, crumb, row(USER)))()
    unpinned = chat(row(SYS), *pinned, row(USER), crumb)
    assert fields_of(estimate(unpinned)) == ["history.chat.messages[4].breadcrumb"]
    no_turn = chat(row(SYS), row(ASSISTANT), crumb)
    assert fields_of(estimate(no_turn)) == ["history.chat.messages[2].breadcrumb"]
    twice = chat(row(SYS), *pinned, crumb, *pinned, crumb)
    assert fields_of(estimate(twice)) == ["history.chat.messages[6].breadcrumb"]


def test_conversation_pinned_and_summary_rules_on_chat_rows() -> None:
    def c(message: history_pb2.ChatMessage) -> history_pb2.ConversationMessage:
        return history_pb2.ConversationMessage(chat=message)

    calls = history_pb2.ConversationMessage(
        assistant_tool_calls=history_pb2.AssistantToolCalls(tool_calls=[call()])
    )
    results = history_pb2.ConversationMessage(
        tool_results=history_pb2.ToolResults(
            results=[history_pb2.ToolResult(tool_call_id="c1", content="r")]
        )
    )
    crumb = c(row(USER, "crumb", breadcrumb=True))
    good = conversation(
        c(row(SYS)),
        c(row(USER, "s", summary=True)),
        c(row(USER, pinned=True)),
        calls,
        results,
        crumb,
        c(row(USER)),
    )
    estimate(good)()
    bad = conversation(
        c(row(SYS)),
        c(row(USER)),
        c(row(ASSISTANT, pinned=True)),
        c(row(USER, summary=True)),
        crumb,
    )
    assert fields_of(estimate(bad)) == [
        "history.conversation.messages[2].chat.pinned",
        "history.conversation.messages[3].chat.summary",
        "history.conversation.messages[4].chat.breadcrumb",
    ]


def test_conversation_row_with_no_message_set() -> None:
    check = estimate(conversation(history_pb2.ConversationMessage()))
    assert fields_of(check) == ["history.conversation.messages[0].message"]


def test_assistant_tool_calls_call_with_empty_id_or_name() -> None:
    calls = history_pb2.AssistantToolCalls(tool_calls=[call(id=""), call(name=""), call()])
    check = estimate(conversation(history_pb2.ConversationMessage(assistant_tool_calls=calls)))
    assert fields_of(check) == [
        "history.conversation.messages[0].assistant_tool_calls.tool_calls[0].id",
        "history.conversation.messages[0].assistant_tool_calls.tool_calls[1].name",
    ]


def test_tool_results_with_no_results() -> None:
    empty = history_pb2.ConversationMessage(tool_results=history_pb2.ToolResults())
    assert fields_of(estimate(conversation(empty))) == [
        "history.conversation.messages[0].tool_results.results"
    ]


def test_tool_results_result_with_empty_tool_call_id() -> None:
    results = history_pb2.ToolResults(
        results=[history_pb2.ToolResult(tool_call_id="a"), history_pb2.ToolResult()]
    )
    check = estimate(conversation(history_pb2.ConversationMessage(tool_results=results)))
    assert fields_of(check) == [
        "history.conversation.messages[0].tool_results.results[1].tool_call_id"
    ]


def test_more_rows_than_max_history_rows_is_request_too_large() -> None:
    history = chat(*(row(USER) for _ in range(4)))
    estimate(history, max_rows=4)()
    check = estimate(history, max_rows=3)
    assert fields_of(check) == ["history"]
    assert reason_of(check) == "ERROR_REASON_REQUEST_TOO_LARGE"
    big = conversation(*(history_pb2.ConversationMessage(chat=row(USER)) for _ in range(4)))
    assert reason_of(estimate(big, max_rows=3)) == "ERROR_REASON_REQUEST_TOO_LARGE"


# --- Profiles (ERROR_REASON_INVALID_PROFILE) -------------------------------------------------


@pytest.mark.parametrize("ratio", [0.0, -1.0, 1.5, 1e-9, 1.0, math.nan, math.inf, -math.inf])
def test_section10_7_ratio_outside_range_is_not_an_error(ratio: float) -> None:
    """§10.7: values outside (0, 1], NaN and infinities included, are treated as unset
    (ratio_ignored), not rejected."""
    profiles = profile_pb2.Profiles(runtime=profile_pb2.RuntimeProfile(context_compact_ratio=ratio))
    rpcs.resolve_budget(svc.ResolveBudgetRequest(profiles=profiles))


def test_profile_provider_alias_empty_or_duplicate() -> None:
    profiles = profile_pb2.Profiles(
        providers=[
            profile_pb2.ProviderProfile(alias="a"),
            profile_pb2.ProviderProfile(alias=""),
            profile_pb2.ProviderProfile(alias="b"),
            profile_pb2.ProviderProfile(alias="a"),
        ]
    )
    assert fields_of(resolve(profiles)) == [
        "profiles.providers[1].alias",
        "profiles.providers[3].alias",
    ]


def test_profile_provider_context_window_present_and_zero() -> None:
    profiles = profile_pb2.Profiles(
        providers=[
            profile_pb2.ProviderProfile(alias="a", context_window=0),
            profile_pb2.ProviderProfile(alias="b"),  # absent: unknown, fine
            profile_pb2.ProviderProfile(alias="c", context_window=1),
        ]
    )
    assert fields_of(resolve(profiles)) == ["profiles.providers[0].context_window"]


def test_profile_classifier_route_hint_empty_or_duplicate_and_provider_empty() -> None:
    runtime = profile_pb2.RuntimeProfile(
        classifier_routes=[
            profile_pb2.ClassifierRoute(hint="code", provider="p"),
            profile_pb2.ClassifierRoute(hint="", provider="p"),
            profile_pb2.ClassifierRoute(hint="code", provider=""),
        ]
    )
    assert fields_of(resolve(profile_pb2.Profiles(runtime=runtime))) == [
        "profiles.runtime.classifier_routes[1].hint",
        "profiles.runtime.classifier_routes[2].hint",
        "profiles.runtime.classifier_routes[2].provider",
    ]


def test_profile_session_switch_present_with_empty_provider() -> None:
    switch = profile_pb2.Profiles(
        selection=profile_pb2.RouteSelection(session_switch=profile_pb2.SessionSwitch(model="m"))
    )
    assert fields_of(resolve(switch)) == ["profiles.selection.session_switch.provider"]
    rpcs.resolve_budget(svc.ResolveBudgetRequest())  # absent switch: fine


def test_profile_rules_apply_to_every_request_carrying_profiles() -> None:
    bad = profile_pb2.Profiles(providers=[profile_pb2.ProviderProfile(alias="")])
    history = chat(row(USER))
    prepare = svc.PrepareModelCallRequest(history=history, profiles=bad)
    capacity = svc.CheckCapacityRequest(history=history, profiles=bad)
    for check in (
        lambda: served(rpcs.prepare_model_call, prepare),
        lambda: served(rpcs.check_capacity_rpc, capacity),
        trim(profiles=bad),
    ):
        assert fields_of(check) == ["profiles.providers[0].alias"]


def test_profiles_resolved_once_per_encoding_are_checked_every_time() -> None:
    """Valid profiles are resolved once and answered from the cache after; invalid ones are
    refused every time, with every violation named, on every RPC."""
    bad = profile_pb2.Profiles(providers=[profile_pb2.ProviderProfile(alias="")] * 2)
    good = profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(max_context_tokens=777, default_provider="p"),
        providers=[profile_pb2.ProviderProfile(alias="p", context_window=1_000)],
    )
    history = chat(row(USER))
    for _ in range(2):
        for check in (
            resolve(bad),
            lambda: served(rpcs.prepare_model_call, svc.PrepareModelCallRequest(profiles=bad)),
            lambda: served(rpcs.check_capacity_rpc, svc.CheckCapacityRequest(profiles=bad)),
            trim(profiles=bad),
        ):
            found = fields_of(check)
            assert found[-2:] == ["profiles.providers[0].alias", "profiles.providers[1].alias"]
            assert found[:-2] in ([], ["history"])
    trim_limits._resolved_encoding.cache_clear()
    answers = [rpcs.resolve_budget(svc.ResolveBudgetRequest(profiles=good)).body for _ in range(3)]
    served(rpcs.check_capacity_rpc, svc.CheckCapacityRequest(history=history, profiles=good))
    assert trim_limits._resolved_encoding.cache_info().misses == 1
    assert answers[0] == answers[2]
    resolution = svc.ResolveBudgetResponse.FromString(answers[0]).resolution
    assert resolution.capacity.model_context_window == 1_000
    assert resolution == budget.resolve(good)


def test_explicit_limits_read_once_per_encoding() -> None:
    """Explicit limits are read once per encoding: repeated trims answer from the cache as the
    first did; limits over the cached size are read every time, to the same effect."""
    history = chat(row(SYS), *(row(USER, f"turn {i}") for i in range(4)))

    def trimmed(explicit: svc.ExplicitLimits) -> bytes:
        request = svc.TrimHistoryRequest(
            history=history, mode=trim_pb2.TRIM_MODE_TURN_COUNT, explicit_limits=explicit
        )
        raw = request.SerializeToString()
        return rpcs.trim_history(*PythonEngine().read(raw, svc.TrimHistoryRequest, ROWS)).body

    def crumb(answer: bytes) -> str:
        return svc.TrimHistoryResponse.FromString(answer).history.chat.messages[1].content

    trim_limits._explicit_limits_encoding.cache_clear()
    small = svc.ExplicitLimits(max_history_messages=2, breadcrumb_text="earlier turns gone")
    answers = [trimmed(small) for _ in range(3)]
    assert trim_limits._explicit_limits_encoding.cache_info().misses == 1
    assert answers[0] == answers[2]
    assert crumb(answers[0]) == "earlier turns gone"
    text = "x" * (trim_limits._CACHED_PROFILE_BYTES + 1)
    assert crumb(trimmed(svc.ExplicitLimits(max_history_messages=2, breadcrumb_text=text))) == text
    assert trim_limits._explicit_limits_encoding.cache_info().misses == 1


# --- Limits (ERROR_REASON_INVALID_LIMITS) ----------------------------------------------------


@pytest.mark.parametrize("mode", [trim_pb2.TRIM_MODE_UNSPECIFIED, 42])
def test_limits_mode_unspecified_or_unknown(mode: int) -> None:
    check = trim(mode=mode)
    assert fields_of(check) == ["mode"]
    assert reason_of(check) == "ERROR_REASON_INVALID_LIMITS"


def test_limits_caller_path_unknown() -> None:
    assert fields_of(trim(caller_path=42)) == ["caller_path"]


def test_limits_caller_path_unspecified_is_the_agent_path() -> None:
    trim(caller_path=trim_pb2.CALLER_PATH_UNSPECIFIED, mode=trim_pb2.TRIM_MODE_TURN_COUNT)()
    check = trim(caller_path=trim_pb2.CALLER_PATH_UNSPECIFIED, mode=trim_pb2.TRIM_MODE_ROW_COUNT)
    assert fields_of(check) == ["caller_path"]


_SERVED = {
    trim_pb2.CALLER_PATH_AGENT: {
        trim_pb2.TRIM_MODE_TOKEN_BUDGET,
        trim_pb2.TRIM_MODE_TURN_COUNT,
        trim_pb2.TRIM_MODE_OVERFLOW_RECOVERY,
    },
    trim_pb2.CALLER_PATH_LEGACY_LOOP: {trim_pb2.TRIM_MODE_TURN_COUNT},
    trim_pb2.CALLER_PATH_CHANNEL_SENDER_CACHE: {trim_pb2.TRIM_MODE_ROW_COUNT},
}


@pytest.mark.parametrize("path", sorted(_SERVED))
@pytest.mark.parametrize(
    "mode",
    [
        trim_pb2.TRIM_MODE_TOKEN_BUDGET,
        trim_pb2.TRIM_MODE_TURN_COUNT,
        trim_pb2.TRIM_MODE_OVERFLOW_RECOVERY,
        trim_pb2.TRIM_MODE_ROW_COUNT,
    ],
)
def test_limits_mode_not_served_by_the_caller_path(path: int, mode: int) -> None:
    check = trim(caller_path=path, mode=mode)  # unset limits: default profiles
    if mode in _SERVED[path]:
        check()
    else:
        assert fields_of(check) == ["caller_path"]


def test_limits_token_budget_with_explicit_limits_lacking_budget_tokens() -> None:
    check = trim(mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET, explicit_limits=svc.ExplicitLimits())
    assert fields_of(check) == ["explicit_limits.budget_tokens"]
    # budget_tokens = 0 is present (it disables trimming), so it is valid.
    trim(
        mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET, explicit_limits=svc.ExplicitLimits(budget_tokens=0)
    )()
    trim(mode=trim_pb2.TRIM_MODE_TURN_COUNT, explicit_limits=svc.ExplicitLimits())()


# --- TrimEvents (ERROR_REASON_INVALID_SUBSCRIPTION) ------------------------------------------


def _described(violations: Violations) -> tuple[int, list[tuple[int, str, str]]]:
    return violations.total, [(r, v.field, v.description) for r, v in violations]


@pytest.mark.parametrize("mode", [*trim_pb2.TrimMode.values(), 99])
@pytest.mark.parametrize("path", [*trim_pb2.CallerPath.values(), 99])
def test_limits_the_quick_check_agrees_with_every_rule(mode: int, path: int) -> None:
    """trim_request_violations answers the common case with one check; it finds what the rules
    in full find, for every mode, path, kind of limits and reported usage."""
    bad_profiles = profile_pb2.Profiles(providers=[profile_pb2.ProviderProfile(alias="")])
    usage = trim_pb2.ReportedUsage(reported_input_tokens=5, estimated_input_tokens=4)
    limits: list[dict[str, object]] = [
        {},
        {"explicit_limits": svc.ExplicitLimits()},
        {"explicit_limits": svc.ExplicitLimits(budget_tokens=10)},
        {"profiles": profile_pb2.Profiles()},
        {"profiles": bad_profiles},
    ]
    for fields in limits:
        for extra in ({}, {"reported_usage": usage}):
            request = svc.TrimHistoryRequest(
                mode=mode,  # type: ignore[arg-type]
                caller_path=path,  # type: ignore[arg-type]
                **fields,  # type: ignore[arg-type]
                **extra,  # type: ignore[arg-type]
            )
            assert _described(validation.trim_request_violations(request)) == _described(
                validation._trim_request_violations_in_full(request)
            )


def test_trim_events_reason_unspecified_or_unknown() -> None:
    request = svc.TrimEventsRequest(
        reasons=[trim_pb2.TRIM_REASON_TURN_LIMIT, trim_pb2.TRIM_REASON_UNSPECIFIED, 77]
    )
    check = lambda: validation.check_trim_events(request)  # noqa: E731
    assert fields_of(check) == ["reasons[1]", "reasons[2]"]
    assert reason_of(check) == "ERROR_REASON_INVALID_SUBSCRIPTION"
    validation.check_trim_events(svc.TrimEventsRequest(after_cursor="not-read-here"))


def test_trim_events_id_filters_over_the_limit() -> None:
    ok, long = "é" * 128, "x" * 257  # 256 bytes of UTF-8; 257
    request = svc.TrimEventsRequest(session_ids=[ok, long], runtime_ids=[long, ok])
    check = lambda: validation.check_trim_events(request)  # noqa: E731
    assert fields_of(check) == ["session_ids[1]", "runtime_ids[0]"]
    assert reason_of(check) == "ERROR_REASON_INVALID_SUBSCRIPTION"


@pytest.mark.parametrize("name", ["session_id", "runtime_id", "agent_id", "turn_id"])
@pytest.mark.parametrize("mode", [trim_pb2.TRIM_MODE_TURN_COUNT, trim_pb2.TRIM_MODE_REPORTED_USAGE])
def test_caller_ids_at_most_256_bytes(name: str, mode: trim_pb2.TrimMode.ValueType) -> None:
    """Both the common case's quick check and the full rules refuse a long id, in every RPC
    that carries a caller; an id of exactly 256 bytes (multi-byte characters) is accepted."""
    fits = trim_pb2.CallerContext(**{name: "€" * 85 + "x"})  # 256 bytes
    trim(caller=fits, explicit_limits=svc.ExplicitLimits(max_history_messages=9))()
    served(
        rpcs.prepare_model_call, svc.PrepareModelCallRequest(history=chat(row(USER)), caller=fits)
    )
    long = trim_pb2.CallerContext(**{name: "€" * 85 + "xy"})
    usage = trim_pb2.ReportedUsage(reported_input_tokens=10, estimated_input_tokens=10)
    extra = {"reported_usage": usage} if mode == trim_pb2.TRIM_MODE_REPORTED_USAGE else {}
    limits = svc.ExplicitLimits(max_history_messages=9, budget_tokens=100)
    check = trim(caller=long, mode=mode, explicit_limits=limits, **extra)
    assert fields_of(check) == [f"caller.{name}"]
    assert reason_of(check) == "ERROR_REASON_INVALID_CALLER"
    prepare = svc.PrepareModelCallRequest(history=chat(row(USER)), caller=long)
    assert fields_of(lambda: served(rpcs.prepare_model_call, prepare)) == [f"caller.{name}"]


# --- collection ------------------------------------------------------------------------------


def test_all_violations_collected_in_one_error_reason_of_the_first() -> None:
    """Bad input is one INVALID_ARGUMENT listing every violation; the reason is the first's."""
    history = chat(row(99), row(TOOL, "r"), row(USER, tool_calls=[call()]))
    profiles = profile_pb2.Profiles(providers=[profile_pb2.ProviderProfile(alias="")])
    error = error_of(trim(history=history, mode=0, caller_path=9, profiles=profiles))
    assert [v.field for v in error.violations] == [
        "history.chat.messages[0].role",
        "history.chat.messages[1].tool_call_id",
        "history.chat.messages[2].tool_calls",
        "mode",
        "caller_path",
        "profiles.providers[0].alias",
    ]
    assert error.reason == errors_pb2.ERROR_REASON_INVALID_HISTORY
    assert all(v.description.endswith(".") and v.description[0].isupper() for v in error.violations)
    # No violation in the history: the reason comes from the limits.
    assert reason_of(trim(mode=0, profiles=profiles)) == "ERROR_REASON_INVALID_LIMITS"


def test_a_too_large_history_reports_only_its_size() -> None:
    history = chat(*(row(99) for _ in range(5)))
    assert fields_of(estimate(history, max_rows=4)) == ["history"]


def test_history_violations_on_a_large_history_name_the_one_bad_row() -> None:
    history = chat(*(row(USER, "t") for _ in range(100_000)), row(TOOL))
    assert [v.field for _, v in history_rules.history_violations(history, "history", ROWS + 1)] == [
        "history.chat.messages[100000].tool_call_id"
    ]
