"""What a trim that dropped history leaves behind: its log line, its metrics and its trace
attributes (sizes and counts only, never content)."""

from __future__ import annotations

import logging

from turnkeeper.core.trimming import TrimPlan
from turnkeeper.server.telemetry import metrics, tracing
from turnkeeper.server.telemetry.log_handler import log_line
from turnkeeper.v1 import trim_pb2

log = logging.getLogger("turnkeeper.trim")

# Enum names by value: `Name` is a Python call that costs more than the rest of a log line's args.
MODE_NAMES = {mode: trim_pb2.TrimMode.Name(mode) for mode in trim_pb2.TrimMode.values()}
_PATH_NAMES = {path: trim_pb2.CallerPath.Name(path) for path in trim_pb2.CallerPath.values()}
# Metric and log label of each TrimMode's reason; row caps have no TrimReason of their own.
MODE_REASONS = {
    trim_pb2.TRIM_MODE_TOKEN_BUDGET: "token_budget",
    trim_pb2.TRIM_MODE_OVERFLOW_RECOVERY: "token_budget",
    trim_pb2.TRIM_MODE_TURN_COUNT: "turn_limit",
    trim_pb2.TRIM_MODE_ROW_COUNT: "row_limit",
    trim_pb2.TRIM_MODE_REPORTED_USAGE: "token_budget",
}


def record_trim(
    path: trim_pb2.CallerPath.ValueType, mode: str, reason: str, plan: TrimPlan
) -> None:
    """Logs and counts a trim that dropped history (sizes and counts only)."""
    dropped_messages = plan.dropped_messages
    if dropped_messages:
        metrics.observe_trim(
            path,
            reason,
            dropped_turns=plan.dropped_turns,
            dropped_messages=dropped_messages,
            tokens_before=plan.tokens_before,
            tokens_after=plan.tokens_after,
        )
        if tracing.recording():  # the attributes are built only for a span
            tracing.annotate(
                {
                    f"turnkeeper.trim.{reason}.dropped_turns": plan.dropped_turns,
                    f"turnkeeper.trim.{reason}.dropped_messages": dropped_messages,
                    f"turnkeeper.trim.{reason}.tokens_before": plan.tokens_before,
                    f"turnkeeper.trim.{reason}.tokens_after": plan.tokens_after,
                }
            )
        log_line(
            log,
            logging.INFO,
            "trimmed path=%s mode=%s reason=%s dropped_messages=%d dropped_turns=%d "
            "kept_turns=%d tokens_before=%d tokens_after=%d",
            _PATH_NAMES[path],
            mode,
            reason,
            dropped_messages,
            plan.dropped_turns,
            plan.kept_turns,
            plan.tokens_before,
            plan.tokens_after,
        )


def record_clearing(
    results_cleared: int, tokens_before: int, tokens_after: int, turns: int
) -> None:
    """Logs and counts a §13.4 clearing, reason `tool_results_cleared` (counts only)."""
    reason = "tool_results_cleared"
    metrics.observe_trim(
        trim_pb2.CALLER_PATH_AGENT,
        reason,
        dropped_turns=0,
        dropped_messages=0,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
    )
    if tracing.recording():
        tracing.annotate(
            {
                f"turnkeeper.trim.{reason}.results_cleared": results_cleared,
                f"turnkeeper.trim.{reason}.tokens_before": tokens_before,
                f"turnkeeper.trim.{reason}.tokens_after": tokens_after,
            }
        )
    log_line(
        log,
        logging.INFO,
        "trimmed path=%s mode=%s reason=%s results_cleared=%d kept_turns=%d tokens_before=%d "
        "tokens_after=%d",
        _PATH_NAMES[trim_pb2.CALLER_PATH_AGENT],
        "PREPARE_MODEL_CALL",
        reason,
        results_cleared,
        turns,
        tokens_before,
        tokens_after,
    )
