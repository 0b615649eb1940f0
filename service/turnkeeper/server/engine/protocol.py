"""The interface both history engines implement, and the names they are chosen by.

An engine reads a request's bytes into the request message minus its history plus a
`HistorySource` (the history's `HistoryView` when it is valid, else its violations). The RPC logic
in `turnkeeper.server.api.rpcs` works on that interface only, so both engines share every decision
that is not history work, and every error they raise is built by the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, TypeVar

from google.protobuf.message import Message

# The core defines a collapsed turn; both engines name it from here.
from turnkeeper.core.projection import CollapsedTurn as CollapsedTurn
from turnkeeper.core.trimming import TrimPlan
from turnkeeper.server.contract import limits
from turnkeeper.server.contract.errors import Violations
from turnkeeper.v1 import trim_pb2

M = TypeVar("M", bound=Message)

PYTHON = "python"
NATIVE = "native"


@dataclass(frozen=True, slots=True)
class Projection:
    """What a §13.1 projection did: the turns it collapsed, oldest first, and the rows it left
    out (every drained row of a collapsed turn; each summary stands in place of some of them)."""

    collapsed: Sequence[CollapsedTurn]
    rows_left_out: int


NO_PROJECTION = Projection((), 0)


@dataclass(frozen=True, slots=True)
class TurnSpan:
    """One turn of a history (§15.1): its rows, from its boundary (for the first turn of `B`,
    from the first row after the fixed prefix) to the next turn's first row, and its pin."""

    rows: range
    pinned: bool


class HistoryView(Protocol):
    """A valid history with its row view and pricing; plans are judged and applied on it."""

    @property
    def total_tokens(self) -> int: ...

    @property
    def image_tokens(self) -> int: ...

    @property
    def turns(self) -> int:
        """Every turn boundary (EstimateTokens `turns`)."""
        ...

    @property
    def system_floor_tokens(self) -> int: ...

    def plan_token_budget(
        self,
        budget: int,
        breadcrumb_cost: int | None,
        low_water: float = 1.0,
        step_budget: int | None = None,
        allow_growth: bool = False,
    ) -> TrimPlan:
        """The §9 token-budget trim, §11 grid and §16.1, keeping pinned turns (§15.1;
        `core.trimming.plan_token_budget`)."""
        ...

    def plan_turn_count(
        self, limit: int, breadcrumb_cost: int | None, low_water: float = 1.0
    ) -> TrimPlan:
        """The §9 turn-count trim with the §11 turn grid, keeping pinned turns (§15.1)."""
        ...

    def plan_row_count(self, limit: int) -> TrimPlan: ...

    def apply(self, plan: TrimPlan, breadcrumb_text: str) -> HistoryView: ...

    def sweep(self) -> tuple[HistoryView, list[trim_pb2.OrphanRemoval]]: ...

    @property
    def rows(self) -> int:
        """The number of rows."""
        ...

    @property
    def system_rows(self) -> int:
        """The number of leading system rows (§9 layout)."""
        ...

    def tokens_through(self, index: int) -> int:
        """The estimate of rows 0 through `index`, each priced as in this whole history."""
        ...

    def project(self, keep_turns: int) -> tuple[HistoryView, Projection]:
        """The §13.1 projection with K = `keep_turns`: this view and `NO_PROJECTION` when no
        turn collapses."""
        ...

    @property
    def pinned_tokens(self) -> int:
        """The estimate of the pinned turns (§15.1)."""
        ...

    @property
    def fixed_floor_tokens(self) -> int:
        """§15.1's fixed floor: the leading system rows, the summary row and every pinned turn
        but the newest turn."""
        ...

    @property
    def summary_row(self) -> int | None:
        """The index of the §15.2 summary row; None when there is none."""
        ...

    def turn_spans(self) -> tuple[TurnSpan, ...]:
        """Every turn (§15.1), oldest first: the pinned turns of the fixed prefix, then `B`'s."""
        ...

    @property
    def pinned_prefix_breadcrumb(self) -> int | None:
        """The index of the fixed prefix's breadcrumb when pinned turns stand before it (§15.1),
        the row §14's first breakpoint moves to; None otherwise."""
        ...

    def summary_request(self, stop: int, instruction: str) -> HistoryView:
        """§15.3's summary request: rows 0 to `stop` (exclusive), then one user row holding
        `instruction`."""
        ...

    def clear_tool_results(self, keep_newest: int, stop_tokens: int) -> tuple[HistoryView, int]:
        """§13.4: the running turn's oldest tool results cleared one at a time in row order,
        never the newest `keep_newest`, until the estimate is at most `stop_tokens` or nothing
        more may be cleared; with the number cleared (this view and 0 when none)."""
        ...

    def history_field(self, tail: bytes = b"") -> bytes:
        """Field 1 (`history`) of a response, encoded (every response puts its history there),
        followed by `tail`, the rest of the response: the response in one bytes object, so a
        big history is not copied again to join the two."""
        ...

    def estimates_field(self) -> bytes:
        """Field 2 (`messages`) of EstimateTokensResponse, encoded."""
        ...


HistorySource: TypeAlias = HistoryView | Violations
"""The request's history as an engine read it: its view when it has no violations, else them (one
or the other, not a pair: a valid history, every call's, costs no object for it)."""


class Engine(Protocol):
    name: str

    def read(
        self,
        raw: bytes,
        request_type: type[M],
        max_rows: int,
        max_items: int = limits.DEFAULT_MAX_REQUEST_ITEMS,
    ) -> tuple[M, HistorySource]:
        """The request (its `history` field is not to be read) and its history. Raises
        RequestError: REQUEST_TOO_LARGE when the request holds more items than `max_items`
        allows (`limits.check_items`, which decides, names the field and words the error), else
        MALFORMED_REQUEST when the bytes do not decode."""
        ...
