"""The native engine: the Rust extension (`turnkeeper._native`) reads the request's wire bytes.

Rust splits the request's top level, scans the history in one pass (framing, UTF-8, the history
rules, the row view, prices) with the GIL released, and writes response histories as slices of the
request. protobuf parses only the small rest of the request (profiles, caller, limits). Everything
that is not history work, and every error, is the code the Python engine uses too: malformed
bytes are named by `wire.malformed_request`, rule violations get their reasons and descriptions
from `history_rules.HISTORY_RULES`. What both sides must agree on (roles, the carrier prefix,
prices, the violation cap) is defined here in Python and handed to the engine once, as
`CONVENTIONS`; the extension's types are declared in `turnkeeper/_native.pyi`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar, overload

from google.protobuf.message import DecodeError, Message

from turnkeeper import _native
from turnkeeper.core.pricing import FRAMING_TOKENS, TOKENS_PER_IMAGE
from turnkeeper.core.rows import (
    CLEARED_TOOL_RESULT,
    PARSE_ERROR_PREFIX,
    TOOL_EXCHANGE_SUMMARY,
    TOOL_RESULTS_PREFIX,
)
from turnkeeper.core.trimming import TrimPlan, rows_to_keep
from turnkeeper.server import allocator
from turnkeeper.server.contract import history_rules, limits, wire
from turnkeeper.server.contract.errors import MAX_FIELD_VIOLATIONS, Violations
from turnkeeper.server.engine.protocol import (
    NATIVE,
    NO_PROJECTION,
    CollapsedTurn,
    HistorySource,
    Projection,
    TurnSpan,
)
from turnkeeper.v1 import history_pb2, trim_pb2

M = TypeVar("M", bound=Message)

CONVENTIONS = _native.Conventions(
    role_system=history_pb2.ROLE_SYSTEM,
    role_user=history_pb2.ROLE_USER,
    role_assistant=history_pb2.ROLE_ASSISTANT,
    role_tool=history_pb2.ROLE_TOOL,
    tool_results_prefix=TOOL_RESULTS_PREFIX,
    parse_error_prefix=PARSE_ERROR_PREFIX,
    tool_exchange_summary=TOOL_EXCHANGE_SUMMARY,
    cleared_tool_result=CLEARED_TOOL_RESULT,
    max_named_violations=MAX_FIELD_VIOLATIONS,
    framing_tokens=FRAMING_TOKENS,
    tokens_per_image=TOKENS_PER_IMAGE,
)

ITEM_SCHEMA = limits.native_item_schema()
ITEM_ROOTS = limits.item_schema().roots

ORPHAN_KINDS = {
    _native.OrphanKind.TOOL_RESULT_WITHOUT_CALL: trim_pb2.ORPHAN_KIND_TOOL_RESULT_WITHOUT_CALL,
    _native.OrphanKind.TOOL_CALL_WITHOUT_RESULT: trim_pb2.ORPHAN_KIND_TOOL_CALL_WITHOUT_RESULT,
}


def _u64(value: int) -> int:
    """A count for the engine, which takes u64: a negative one is 0, a larger one saturates (no
    history holds that many turns, results or tokens)."""
    return min(max(value, 0), 2**64 - 1)


def _plan(plan: _native.Plan) -> TrimPlan:
    return TrimPlan(
        range(plan.drop_start, plan.drop_stop),
        plan.breadcrumb_at,
        plan.dropped_turns,
        plan.kept_turns,
        plan.tokens_before,
        plan.tokens_after,
        plan.target_tokens,
        plan.cut_step,
        plan.cut_drop_target,
        tuple(range(start, stop) for start, stop in plan.kept_in_drop),
        plan.breadcrumb_from,
        plan.pinned_turns,
        plan.pinned_tokens,
    )


class _CollapsedTurns(Sequence[CollapsedTurn]):
    """The extension's collapsed turns, each made a `CollapsedTurn` when read: a call reads its
    newest one, and the others only when a trim dropped turns."""

    __slots__ = ("_turns",)

    def __init__(self, turns: _native.CollapsedTurns) -> None:
        self._turns = turns

    def __len__(self) -> int:
        return len(self._turns)

    @overload
    def __getitem__(self, index: int) -> CollapsedTurn: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[CollapsedTurn]: ...
    def __getitem__(self, index: int | slice) -> CollapsedTurn | Sequence[CollapsedTurn]:
        if isinstance(index, slice):
            return [CollapsedTurn(*self._turns[i]) for i in range(len(self))[index]]
        return CollapsedTurn(*self._turns[index])


@dataclass(slots=True)  # not frozen, like responses.Reply: built per call
class NativeHistoryView:
    """A `HistoryView` over the extension's row view of the request bytes."""

    native: _native.NativeHistory

    @property
    def total_tokens(self) -> int:
        return self.native.total_tokens

    @property
    def image_tokens(self) -> int:
        return self.native.image_tokens

    @property
    def turns(self) -> int:
        return self.native.turns

    @property
    def system_floor_tokens(self) -> int:
        return self.native.system_floor_tokens

    def plan_token_budget(
        self,
        budget: int,
        breadcrumb_cost: int | None,
        low_water: float = 1.0,
        step_budget: int | None = None,
        allow_growth: bool = False,
    ) -> TrimPlan:
        native = self.native.plan_token_budget(
            budget, breadcrumb_cost, low_water, step_budget, allow_growth
        )
        return _plan(native)

    def plan_turn_count(
        self, limit: int, breadcrumb_cost: int | None, low_water: float = 1.0
    ) -> TrimPlan:
        return _plan(self.native.plan_turn_count(limit, breadcrumb_cost, low_water))

    def plan_row_count(self, limit: int) -> TrimPlan:
        return _plan(self.native.plan_row_count(rows_to_keep(limit)))

    def apply(self, plan: TrimPlan, breadcrumb_text: str) -> NativeHistoryView:
        if not plan.trimmed:
            return self
        drop = plan.drop
        applied = self.native.apply(
            (drop.start, drop.stop),
            [(kept.start, kept.stop) for kept in plan.kept_in_drop],
            plan.breadcrumb_at is not None,
            plan.breadcrumb_from,
            breadcrumb_text,
        )
        return NativeHistoryView(applied)

    def sweep(self) -> tuple[NativeHistoryView, list[trim_pb2.OrphanRemoval]]:
        swept, found = self.native.sweep()
        if not found:
            return self, []
        removals = [
            trim_pb2.OrphanRemoval(
                kind=ORPHAN_KINDS[removal.kind],
                message_index=removal.message_index,
                tool_call_id=removal.tool_call_id,
                row_removed=removal.row_removed,
            )
            for removal in found
        ]
        return NativeHistoryView(swept), removals

    @property
    def pinned_prefix_breadcrumb(self) -> int | None:
        return self.native.pinned_prefix_breadcrumb

    @property
    def rows(self) -> int:
        return self.native.rows

    @property
    def system_rows(self) -> int:
        return self.native.system_rows

    def tokens_through(self, index: int) -> int:
        return self.native.tokens_through(min(index, self.native.rows)) if index >= 0 else 0

    def project(self, keep_turns: int) -> tuple[NativeHistoryView, Projection]:
        projected = self.native.project(_u64(keep_turns))
        if projected is None:
            return self, NO_PROJECTION
        native, turns, rows_left_out = projected
        return NativeHistoryView(native), Projection(_CollapsedTurns(turns), rows_left_out)

    @property
    def pinned_tokens(self) -> int:
        return self.native.pinned_tokens

    @property
    def fixed_floor_tokens(self) -> int:
        return self.native.fixed_floor_tokens

    @property
    def summary_row(self) -> int | None:
        return self.native.summary_row

    def turn_spans(self) -> tuple[TurnSpan, ...]:
        return tuple(
            TurnSpan(range(start, stop), pinned) for start, stop, pinned in self.native.turn_spans()
        )

    def summary_request(self, stop: int, instruction: str) -> NativeHistoryView:
        return NativeHistoryView(self.native.summary_request(max(stop, 0), instruction))

    def clear_tool_results(
        self, keep_newest: int, stop_tokens: int
    ) -> tuple[NativeHistoryView, int]:
        cleared = self.native.clear_tool_results(_u64(keep_newest), _u64(stop_tokens))
        if cleared is None:
            return self, 0
        native, count = cleared
        return NativeHistoryView(native), count

    def history_field(self, tail: bytes = b"") -> bytes:
        return self.native.history_field(tail)

    def estimates_field(self) -> bytes:
        return self.native.estimates_field()


class NativeEngine:
    name = NATIVE

    def read(
        self,
        raw: bytes,
        request_type: type[M],
        max_rows: int,
        max_items: int = limits.DEFAULT_MAX_REQUEST_ITEMS,
    ) -> tuple[M, HistorySource]:
        allocator.before_work(len(raw))
        # The scan counts the history's items as it reads them, and the rest of the request
        # while it splits the top level: no pass of its own, and the refusal is check_items'.
        allowed = limits.allowance_to_count(len(raw), max_items)
        items = None
        if allowed is not None:
            items = (ITEM_SCHEMA, ITEM_ROOTS[request_type.DESCRIPTOR.full_name], allowed)
        scan = _native.scan(raw, max_rows, CONVENTIONS, items)
        if scan is None:
            raise wire.malformed_request(raw, request_type)
        if isinstance(scan, _native.TooManyItems):
            allowed = limits.items_allowed(len(raw), max_items)
            raise limits.too_many_items(request_type, scan.field, allowed, max_items)
        try:
            request = request_type.FromString(scan.rest())
        except DecodeError:
            raise wire.malformed_request(raw, request_type) from None
        if scan.violation_total == 0:
            return request, NativeHistoryView(scan.view())
        violations = Violations()
        for found in scan.violations():
            rule = history_rules.HistoryRule(found.rule)
            violations.append(
                history_rules.history_rule_violation(rule, found.path, found.count, max_rows)
            )
        violations.total = scan.violation_total
        return request, violations
