"""The interface both history engines implement, and the names they are chosen by.

An engine reads a request's bytes into the request message minus its history plus a
`HistorySource` (the history's `HistoryView` when it is valid, else its violations). The RPC logic
in `turnkeeper.server.api.rpcs` works on that interface only, so both engines share every decision
that is not history work, and every error they raise is built by the same code.
"""

from __future__ import annotations

from typing import Protocol, TypeAlias, TypeVar

from google.protobuf.message import Message

from turnkeeper.core.trimming import TrimPlan
from turnkeeper.server.contract import limits
from turnkeeper.server.contract.errors import Violations
from turnkeeper.v1 import trim_pb2

M = TypeVar("M", bound=Message)

PYTHON = "python"
NATIVE = "native"


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
        """The §9 token-budget trim, §11 grid and §16.1 (`core.trimming.plan_token_budget`)."""
        ...

    def plan_turn_count(
        self, limit: int, breadcrumb_cost: int | None, low_water: float = 1.0
    ) -> TrimPlan:
        """The §9 turn-count trim with the §11 turn grid."""
        ...

    def plan_row_count(self, limit: int) -> TrimPlan: ...

    def apply(self, plan: TrimPlan, breadcrumb_text: str) -> HistoryView: ...

    def sweep(self) -> tuple[HistoryView, list[trim_pb2.OrphanRemoval]]: ...

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
