"""The native engine: the Rust extension (`turnkeeper._native`) reads the request's wire bytes.

Rust splits the request's top level, scans the history in one pass (framing, UTF-8, the history
rules, the row view, prices) with the GIL released, and writes response histories as slices of the
request. protobuf parses only the small rest of the request (profiles, caller, limits). Everything
that is not history work, and every error, is the code the Python engine uses too: malformed
bytes are named by `wire.malformed_request`, rule violations get their reasons and descriptions
from `validation.HISTORY_RULES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from turnkeeper import _native  # type: ignore[attr-defined]
from turnkeeper.core.trimming import TrimPlan
from turnkeeper.server.api import validation, wire
from turnkeeper.server.engine.protocol import NATIVE, HistorySource
from turnkeeper.v1 import trim_pb2

M = TypeVar("M", bound=Message)

_REMOVAL_KINDS = {
    True: trim_pb2.ORPHAN_KIND_TOOL_RESULT_WITHOUT_CALL,
    False: trim_pb2.ORPHAN_KIND_TOOL_CALL_WITHOUT_RESULT,
}

PlanTuple = tuple[int, int, int | None, int, int, int, int, int]


def _plan(values: PlanTuple) -> TrimPlan:
    start, stop, breadcrumb_at, dropped, kept, before, after, target = values
    return TrimPlan(range(start, stop), breadcrumb_at, dropped, kept, before, after, target)


@dataclass(frozen=True, slots=True)
class NativeHistoryView:
    """A `HistoryView` over the extension's row view of the request bytes."""

    native: _native.NativeHistory

    @property
    def total_tokens(self) -> int:
        return int(self.native.total_tokens)

    @property
    def image_tokens(self) -> int:
        return int(self.native.image_tokens)

    @property
    def turns(self) -> int:
        return int(self.native.turns)

    @property
    def system_floor_tokens(self) -> int:
        return int(self.native.system_floor_tokens)

    def plan_token_budget(self, budget: int, breadcrumb_cost: int | None) -> TrimPlan:
        return _plan(self.native.plan_token_budget(budget, breadcrumb_cost))

    def plan_turn_count(self, limit: int, breadcrumb_cost: int | None) -> TrimPlan:
        return _plan(self.native.plan_turn_count(limit, breadcrumb_cost))

    def plan_row_count(self, limit: int) -> TrimPlan:
        return _plan(self.native.plan_row_count(limit))

    def apply(self, plan: TrimPlan, breadcrumb_text: str) -> NativeHistoryView:
        if not plan.trimmed:
            return self
        applied = self.native.apply(
            plan.drop.start, plan.drop.stop, plan.breadcrumb_at is not None, breadcrumb_text
        )
        return NativeHistoryView(applied)

    def sweep(self) -> tuple[NativeHistoryView, list[trim_pb2.OrphanRemoval]]:
        swept, found = self.native.sweep()
        if not found:
            return self, []
        removals = [
            trim_pb2.OrphanRemoval(
                kind=_REMOVAL_KINDS[is_result],
                message_index=index,
                tool_call_id=call_id,
                row_removed=row_removed,
            )
            for is_result, index, call_id, row_removed in found
        ]
        return NativeHistoryView(swept), removals

    def history_field(self) -> bytes:
        return bytes(self.native.history_field())

    def estimates_field(self) -> bytes:
        return bytes(self.native.estimates_field())


class NativeEngine:
    name = NATIVE

    def read(self, raw: bytes, request_type: type[M], max_rows: int) -> tuple[M, HistorySource]:
        scan = _native.scan(raw, max_rows)
        if scan is None:
            raise wire.malformed_request(raw, request_type)
        try:
            request = request_type.FromString(scan.rest())
        except DecodeError:
            raise wire.malformed_request(raw, request_type) from None
        total, named = scan.violations()
        violations = validation.Violations()
        for rule, path, count in named:
            violations.append(validation.history_rule_violation(rule, path, count, max_rows))
        violations.total = total
        view = NativeHistoryView(scan.view()) if total == 0 else None
        return request, HistorySource(violations, view)
