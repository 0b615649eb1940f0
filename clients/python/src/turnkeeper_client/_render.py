"""Readable renderings of results for the CLI (proto JSON is used for --json instead)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from google.protobuf import json_format
from google.protobuf.message import Message
from turnkeeper.v1 import (
    events_pb2,
    history_pb2,
    resolution_pb2,
    trim_pb2,
)
from turnkeeper.v1 import history_service_pb2 as svc

from .errors import TurnkeeperError

_PREVIEW = 72


def proto_json(message: Message, *, indent: int | None = 2) -> str:
    text: str = json_format.MessageToJson(message, indent=indent, ensure_ascii=False)
    # One line per item for --json streams: MessageToJson with indent=None still adds spaces.
    return json.dumps(json.loads(text), ensure_ascii=False) if indent is None else text


def _enum(enum_name: str, prefix: str, value: int) -> str:
    """`BUDGET_RULE_CONTEXT_COMPACT_RATIO` -> `context compact ratio`."""
    descriptor = {
        "BudgetRule": resolution_pb2.BudgetRule,
        "RouteSource": resolution_pb2.RouteSource,
        "TrimReason": trim_pb2.TrimReason,
        "Role": history_pb2.Role,
        "GapCause": events_pb2.GapCause,
        "OrphanKind": trim_pb2.OrphanKind,
        "PhraseSource": svc.PhraseSource,
        "CompactionRefusalReason": svc.CompactionRefusalReason,
    }[enum_name]
    try:
        name = descriptor.Name(value)  # type: ignore[arg-type]
    except ValueError:
        return str(value)
    return name.removeprefix(prefix).lower().replace("_", " ")


def _preview(text: str) -> str:
    flat = json.dumps(text, ensure_ascii=False)
    return flat if len(flat) <= _PREVIEW else flat[: _PREVIEW - 4] + '..."'


def _chat_row(row: history_pb2.ChatMessage) -> str:
    role = _enum("Role", "ROLE_", row.role)
    flags = []
    if row.summary:
        flags.append("summary")
    if row.pinned:
        flags.append("pinned")
    if row.breadcrumb:
        flags.append("breadcrumb")
    if row.tool_exchange_summary:
        flags.append("tool-exchange summary")
    if row.tool_call_id:
        flags.append(f"answers {row.tool_call_id}")
    if row.attachments:
        flags.append(f"{len(row.attachments)} attachment(s)")
    head = f"{role:<9}" + (f" [{', '.join(flags)}]" if flags else "")
    text = f"{head} {_preview(row.content)}"
    for call in row.tool_calls:
        text += f"\n{'':14}-> {call.name}({call.id}) {_preview(call.arguments)}"
    return text


def _conversation_row(row: history_pb2.ConversationMessage) -> str:
    kind = row.WhichOneof("message")
    if kind == "chat":
        return _chat_row(row.chat)
    if kind == "assistant_tool_calls":
        step = row.assistant_tool_calls
        text = f"{'assistant':<9} [tool calls] {_preview(step.text)}"
        for call in step.tool_calls:
            text += f"\n{'':14}-> {call.name}({call.id}) {_preview(call.arguments)}"
        return text
    if kind == "tool_results":
        lines = [f"{'tool':<9} [{len(row.tool_results.results)} result(s)]"]
        lines.extend(
            f"{'':14}<- {r.tool_name or '?'}({r.tool_call_id}) {_preview(r.content)}"
            + (f" +{len(r.attachments)} attachment(s)" if r.attachments else "")
            for r in row.tool_results.results
        )
        return "\n".join(lines)
    return "(empty row)"


def row_labels(history: history_pb2.History) -> list[str]:
    """One rendering per input row, for either shape."""
    if history.WhichOneof("shape") == "conversation":
        return [_conversation_row(r) for r in history.conversation.messages]
    return [_chat_row(r) for r in history.chat.messages]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def estimate(history: history_pb2.History, response: svc.EstimateTokensResponse) -> str:
    lines = [
        f"total {response.total_tokens} tokens (images {response.image_tokens}) in "
        f"{_plural(len(response.messages), 'row')}, {_plural(response.turns, 'turn')}",
        f"{'#':>4} {'tokens':>7} {'text':>6} {'frame':>5} {'img':>3} turn  row",
    ]
    for i, (item, label) in enumerate(zip(response.messages, row_labels(history), strict=False)):
        first, *rest = label.split("\n")
        lines.append(
            f"{i:>4} {item.total_tokens:>7} {item.text_tokens:>6} {item.framing_tokens:>5} "
            f"{item.images:>3} {'*' if item.turn_boundary else ' ':^4}  {first}"
        )
        lines.extend(f"{'':35}{more}" for more in rest)
    return "\n".join(lines)


def _route(route: resolution_pb2.Route) -> str:
    where = "/".join(part for part in (route.provider, route.model) if part) or "(none)"
    return f"{where} ({_enum('RouteSource', 'ROUTE_SOURCE_', route.source)})"


def _capacity(capacity: resolution_pb2.Capacity) -> str:
    if capacity.known:
        return f"{capacity.model_context_window} tokens (known)"
    return f"unknown (safety arithmetic uses {capacity.safety_tokens})"


def resolution(res: resolution_pb2.Resolution) -> str:
    steps = " -> ".join(
        f"{_enum('BudgetRule', 'BUDGET_RULE_', s.rule)} {s.budget_tokens}" for s in res.budget_steps
    )
    budget = (
        "0 (proactive trimming disabled)"
        if res.budget_tokens == 0
        else f"{res.budget_tokens} tokens ({_enum('BudgetRule', 'BUDGET_RULE_', res.budget_rule)})"
    )
    lines = [
        f"route      {_route(res.route)}",
        f"capacity   {_capacity(res.capacity)}",
        f"budget     {budget}",
        f"steps      {steps or '(none)'}",
        f"max turns  {res.max_history_turns}",
        f"low water  {_low_water(res)}",
        f"tool ctx   {_tool_context(res)}",
    ]
    if res.HasField("min_cacheable_tokens"):
        lines.append(f"min cache  {_plural(res.min_cacheable_tokens, 'token')} (cache breakpoints)")
    if res.ratio_ignored:
        lines.append("note       context_compact_ratio outside (0, 1] was ignored")
    return "\n".join(lines)


def _low_water(res: resolution_pb2.Resolution) -> str:
    """The low-water fraction in effect (spec §11); 1 (or 0, from a server before §11) is the
    minimal cut."""
    value = res.history_trim_low_water
    text = f"{value:g}" if 0 < value < 1 else "1 (minimal cut)"
    return (
        text + " (history_trim_low_water outside (0, 1] was ignored)"
        if res.low_water_ignored
        else text
    )


def _tool_context(res: resolution_pb2.Resolution) -> str:
    """K and R in effect (spec §13.1, §13.4)."""
    k = res.keep_tool_context_turns
    kept = f"K {k}: tool rows of the running turn and {_plural(k, 'completed turn')} before it"
    if not res.HasField("keep_running_turn_tool_results"):
        return kept + "; R unset: the running turn is kept whole"
    r = res.keep_running_turn_tool_results
    return kept + f"; R {r}: an oversized running turn keeps its newest {_plural(r, 'tool result')}"


def _limits(res: resolution_pb2.Resolution) -> str:
    r = (
        str(res.keep_running_turn_tool_results)
        if res.HasField("keep_running_turn_tool_results")
        else "unset"
    )
    return (
        f"limits: budget {res.budget_tokens} "
        f"({_enum('BudgetRule', 'BUDGET_RULE_', res.budget_rule)}), "
        f"max turns {res.max_history_turns}, low water {_low_water(res)}, route {_route(res.route)}"
        f", tool context K {res.keep_tool_context_turns}, R {r}"
    )


def _collapse(collapse: trim_pb2.ToolContextCollapse) -> str:
    """What the projection of spec §13.1 left out."""
    return (
        f"collapsed {_plural(collapse.collapsed_turns, 'turn')}: "
        f"{_plural(collapse.rows_left_out, 'row')} left out, "
        f"{_plural(collapse.saved_tokens, 'token')} saved"
    )


def _clearing(clearing: trim_pb2.ToolResultClearing) -> str:
    """What clearing the running turn's oldest tool results did (spec §13.4)."""
    return (
        f"cleared {_plural(clearing.results_cleared, 'tool result')}, "
        f"{_plural(clearing.saved_tokens, 'token')} saved"
    )


def _pinned(turns: int, tokens: int) -> str:
    """The pinned turns a trim kept (spec §15.1); empty when nothing is pinned."""
    return f"{_plural(turns, 'pinned turn')} ({tokens} tokens)" if turns else ""


def _grid_cut(step: int, target: int, unit: str) -> str:
    """The low-water grid cut of spec §11.2: the step and the drop it rounded up to."""
    return f"grid cut: step {_plural(step, unit)}, drop target {_plural(target, unit)}"


def history_trimmed(event: trim_pb2.HistoryTrimmed) -> str:
    reason = _enum("TrimReason", "TRIM_REASON_", event.reason)
    if event.overflow_recovery:
        reason += " (overflow recovery)"
    text = (
        f"{reason}: dropped {_plural(event.dropped_messages, 'row')} "
        f"({_plural(event.dropped_turns, 'turn')}), kept {_plural(event.kept_turns, 'turn')}, "
        f"tokens {event.tokens_before} -> {event.tokens_after}"
    )
    if event.target_tokens:
        text += f" (target {event.target_tokens})"
    if event.pinned_turns:
        text += f", kept {_pinned(event.pinned_turns, event.pinned_tokens)}"
    if event.turn_limit:
        text += f" (turn limit {event.turn_limit})"
    if event.cut_step:
        unit = "turn" if event.reason == trim_pb2.TRIM_REASON_TURN_LIMIT else "token"
        text += f" ({_grid_cut(event.cut_step, event.cut_drop_target, unit)})"
    if event.HasField("collapse"):
        text += f" ({_collapse(event.collapse)})"
    if event.HasField("clearing"):
        text += f" ({_clearing(event.clearing)})"
    if event.HasField("route"):
        text += f", route {_route(event.route)}"
    caller = event.caller
    who = [
        f"{name}={value}"
        for name, value in (
            ("session", caller.session_id),
            ("runtime", caller.runtime_id),
            ("agent", caller.agent_id),
            ("turn", caller.turn_id),
        )
        if value
    ]
    if who:
        text += ", " + " ".join(who)
    return text


def trim(response: svc.TrimHistoryResponse) -> str:
    outcome = response.outcome
    if outcome.trimmed:
        head = (
            f"trimmed: dropped {_plural(outcome.dropped_messages, 'row')} "
            f"({_plural(outcome.dropped_turns, 'turn')}) = input rows "
            f"[{outcome.dropped_range.start}, {outcome.dropped_range.end}), "
            f"kept {_plural(outcome.kept_turns, 'turn')}"
        )
    else:
        head = f"unchanged: {_plural(outcome.kept_turns, 'turn')}"
    head += f"; tokens {outcome.tokens_before} -> {outcome.tokens_after}"
    if outcome.target_tokens:
        head += f" (target {outcome.target_tokens})"
    lines = [head]
    if outcome.pinned_turns:
        lines.append(f"kept {_pinned(outcome.pinned_turns, outcome.pinned_tokens)}")
    if outcome.kept_in_dropped_range:
        kept = ", ".join(f"[{r.start}, {r.end})" for r in outcome.kept_in_dropped_range)
        lines.append(f"pinned input rows kept from the dropped range: {kept}")
    if outcome.cut_step:
        # Only token-budget trims have a token target; the turn-count grid counts turns.
        unit = "token" if outcome.target_tokens else "turn"
        lines.append(_grid_cut(outcome.cut_step, outcome.cut_drop_target, unit))
    if outcome.HasField("breadcrumb_index"):
        lines.append(f"breadcrumb inserted at row {outcome.breadcrumb_index}")
    if response.HasField("history_trimmed"):
        lines.append("event: " + history_trimmed(response.history_trimmed))
    if response.HasField("resolution"):
        lines.append(_limits(response.resolution))
    lines.extend(_history_lines(response.history))
    return "\n".join(lines)


def _history_lines(history: history_pb2.History, breakpoints: Sequence[int] = ()) -> list[str]:
    """The rows, numbered; a row after which a cache breakpoint belongs (spec §14) is starred."""
    lines = ["history:"]
    for i, label in enumerate(row_labels(history)):
        first, *rest = label.split("\n")
        lines.append(f"{i:>4}{'*' if i in breakpoints else ' '} {first}")
        lines.extend(f"      {more}" for more in rest)
    return lines


def _indices(indices: Sequence[int]) -> str:
    return ", ".join(str(i) for i in indices)


def _breakdown(report: trim_pb2.CapacityReport) -> str:
    return (
        f"messages {report.message_tokens}, images {report.image_tokens}, hooks "
        f"{report.hook_tokens}, tool schemas {report.tool_schema_tokens}, reserved output "
        f"{report.reserved_output_tokens}"
    )


def capacity_report(report: trim_pb2.CapacityReport) -> str:
    verdict = "fits" if report.fits else "does not fit"
    sign = "<=" if report.fits else ">"
    return (
        f"{verdict}: total {report.total_tokens} {sign} capacity "
        f"{_capacity(report.capacity)} ({_breakdown(report)})"
    )


def orphan(removal: trim_pb2.OrphanRemoval) -> str:
    kind = _enum("OrphanKind", "ORPHAN_KIND_", removal.kind)
    what = "row removed" if removal.row_removed else "call removed from the row"
    return f"{kind} at row {removal.message_index} (tool_call_id {removal.tool_call_id!r}): {what}"


def prepare(response: svc.PrepareModelCallResponse) -> str:
    res = response.resolution
    lines = [
        f"prepared: tokens {response.tokens_before} -> {response.capacity_report.total_tokens} "
        f"with hooks, tools and reserved output; {_plural(len(response.trims), 'trim')}, "
        f"{_plural(len(response.orphans_removed), 'orphan')} removed",
        _limits(res),
        "capacity: " + capacity_report(response.capacity_report),
    ]
    lines.extend("orphan: " + orphan(removal) for removal in response.orphans_removed)
    if response.HasField("collapse"):
        lines.append("tool context: " + _collapse(response.collapse))
    lines.extend("trim: " + history_trimmed(trimmed) for trimmed in response.trims)
    if response.dropped_input_rows:
        lines.append(f"dropped input rows: {_indices(response.dropped_input_rows)}")
    if response.HasField("clearing"):
        lines.append("running turn: " + _clearing(response.clearing))
    breakpoints = list(response.cache_breakpoints)
    lines.append(
        f"cache breakpoints: after rows {_indices(breakpoints)} (starred)"
        if breakpoints
        else "cache breakpoints: none"
    )
    lines.extend(_history_lines(response.history, breakpoints))
    return "\n".join(lines)


def _ranges(ranges: Sequence[trim_pb2.IndexRange]) -> str:
    return ", ".join(f"[{r.start}, {r.end})" for r in ranges)


def compaction(response: svc.PlanCompactionResponse) -> str:
    """A PlanCompaction answer (spec §15.3): the plan and its summary request, or the refusal."""
    lines = []
    if response.HasField("plan"):
        plan = response.plan
        lines.append(
            f"plan: condense {_plural(plan.condensed_turns, 'turn')} = input rows "
            f"{_ranges(plan.condensed_rows)}; saves {plan.saved_tokens} tokens"
        )
        if plan.pinned_turns:
            lines.append(
                f"pinned turns kept after the summary: input rows {_ranges(plan.pinned_turns)}"
            )
        summarizer = plan.summarizer_resolution
        lines.append(
            f"summary request: {plan.summary_request_tokens} tokens with hooks and tools, "
            f"{plan.summary_output_tokens} reserved for the summary; summarizer route "
            f"{_route(summarizer.route)}, capacity {_capacity(summarizer.capacity)}"
        )
        lines.extend(_history_lines(plan.summary_request))
    else:
        refusal = response.refusal
        reason = _enum("CompactionRefusalReason", "COMPACTION_REFUSAL_REASON_", refusal.reason)
        text = f"no plan: {reason}"
        if refusal.reason == svc.COMPACTION_REFUSAL_REASON_TOO_LARGE:
            text += (
                f" (the smallest summary request needs {refusal.request_tokens} tokens, the "
                f"summarizer's capacity is {refusal.capacity_tokens})"
            )
        elif refusal.reason == svc.COMPACTION_REFUSAL_REASON_NO_SAVING:
            text += (
                f" (it would save {refusal.saved_tokens} tokens, the minimum is "
                f"{refusal.min_saved_tokens})"
            )
        lines.append(text)
    if response.HasField("resolution"):
        lines.append(_limits(response.resolution))
    return "\n".join(lines)


def check(response: svc.CheckCapacityResponse) -> str:
    lines = [capacity_report(response.report)]
    if response.HasField("resolution"):
        lines.append(f"route: {_route(response.resolution.route)}")
    return "\n".join(lines)


def sweep(response: svc.SweepOrphansResponse) -> str:
    if not response.removals:
        lines = ["no orphans: every tool result has its call and every call its result"]
    else:
        lines = [f"swept {_plural(len(response.removals), 'orphan')}:"]
        lines.extend("  " + orphan(removal) for removal in response.removals)
    lines.extend(_history_lines(response.history))
    return "\n".join(lines)


def cap(sources: Sequence[str], response: svc.CapToolResultsResponse) -> str:
    lines = [f"max_tool_result_chars {response.max_tool_result_chars}"]
    for source, result in zip(sources, response.results, strict=True):
        if result.truncated_chars:
            lines.append(f"{source}: {result.truncated_chars} chars cut")
        else:
            lines.append(f"{source}: unchanged")
        lines.append(result.content)
    return "\n".join(lines)


def classification(response: svc.ClassifyProviderErrorResponse) -> str:
    if not response.overflow:
        return "not a context-window overflow"
    source = _enum("PhraseSource", "PHRASE_SOURCE_", response.phrase_source)
    return f"context-window overflow (matched {response.matched_phrase!r}, {source} phrase)"


def _time(item: events_pb2.TrimEvent | events_pb2.Heartbeat) -> str:
    if not item.HasField("time"):
        return "-"
    stamp: str = item.time.ToJsonString()
    return stamp


def feed_item(item: svc.TrimEventsResponse) -> str:
    kind = item.WhichOneof("item")
    if kind == "event":
        event = item.event
        return f"{_time(event)} event {history_trimmed(event.trimmed)} cursor={event.cursor}"
    if kind == "heartbeat":
        beat = item.heartbeat
        return (
            f"{_time(beat)} heartbeat cursor={beat.cursor or '-'} "
            f"dropped_events={beat.dropped_events}"
        )
    if kind == "gap":
        gap = item.gap
        missed = str(gap.missed_events) if gap.missed_events else "unknown"
        return (
            f"- gap {_enum('GapCause', 'GAP_CAUSE_', gap.cause)}: missed {missed} event(s) "
            f"after={gap.after_cursor or '-'} before={gap.before_cursor or '-'}"
        )
    return "- (empty item)"


def error_text(error: TurnkeeperError) -> str:
    lines = [f"error: {error}"]
    lines.extend(f"  {v.field}: {v.description}" for v in error.field_violations)
    lines.extend(f"  {v.subject}: {v.description}" for v in error.precondition_violations)
    report = error.capacity_report
    if report is not None:
        lines.append(
            f"  capacity report: total {report.total_tokens} > {report.capacity.safety_tokens} "
            f"({_breakdown(report)})"
        )
    return "\n".join(lines)


def error_json(error: TurnkeeperError) -> str:
    """The error in the conformance-vector shape (`expect.error`), one line."""
    out: dict[str, object] = {"code": error.code.name, "message": error.message}
    if error.reason:
        out["reason"] = error.reason
    if error.field_violations:
        out["fieldViolations"] = [v.field for v in error.field_violations]
    if error.capacity_report is not None:
        out["capacityReport"] = json_format.MessageToDict(error.capacity_report)
    return json.dumps(out, ensure_ascii=False)
