"""The native engine's Python module (service/turnkeeper-native/src/python.rs).

`make lint` checks this stub against the built module with mypy.stubtest.
"""

from typing import final

__all__ = [
    "HISTORY_RULES",
    "CollapsedTurns",
    "Conventions",
    "ItemSchema",
    "NativeHistory",
    "OrphanKind",
    "Plan",
    "Removal",
    "Scan",
    "TooManyItems",
    "Violation",
    "item_limit_crossing",
    "scan",
]

HISTORY_RULES: tuple[str, ...]
"""The name of every history rule the engine reports (`validation.HistoryRule` has the same)."""

@final
class Conventions:
    """The values the Python side defines and hands the engine once."""

    def __new__(
        cls,
        *,
        role_system: int,
        role_user: int,
        role_assistant: int,
        role_tool: int,
        tool_results_prefix: str,
        parse_error_prefix: str,
        tool_exchange_summary: tuple[str, str],
        cleared_tool_result: tuple[str, str],
        max_named_violations: int,
        framing_tokens: int,
        tokens_per_image: int,
    ) -> Conventions: ...

@final
class Violation:
    @property
    def rule(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def count(self) -> int:
        """The row count of `too_many_rows`; 0 for the other rules."""

@final
class Plan:
    """A trim plan in input indices (`core.trimming.TrimPlan`)."""

    @property
    def drop_start(self) -> int: ...
    @property
    def drop_stop(self) -> int: ...
    @property
    def breadcrumb_at(self) -> int | None: ...
    @property
    def dropped_turns(self) -> int: ...
    @property
    def kept_turns(self) -> int: ...
    @property
    def tokens_before(self) -> int: ...
    @property
    def tokens_after(self) -> int: ...
    @property
    def target_tokens(self) -> int: ...
    @property
    def cut_step(self) -> int:
        """The low-water grid step (§11.1), tokens or turns; 0 for the minimal cut of §9."""
    @property
    def cut_drop_target(self) -> int:
        """The drop the grid rounded the minimal cut up to; 0 with the minimal cut."""
    @property
    def kept_in_drop(self) -> list[tuple[int, int]]:
        """The pinned turns inside the drop that are kept, as ascending (start, stop) row
        ranges (§15.1)."""
    @property
    def breadcrumb_from(self) -> int | None:
        """The input index of the breadcrumb written at `breadcrumb_at` when it is moved."""
    @property
    def pinned_turns(self) -> int:
        """The pinned turns in the output (§15.1)."""
    @property
    def pinned_tokens(self) -> int:
        """Their estimate, in tokens."""

@final
class OrphanKind:
    TOOL_RESULT_WITHOUT_CALL: OrphanKind
    TOOL_CALL_WITHOUT_RESULT: OrphanKind

@final
class Removal:
    """One removal of the sweep (trim.proto's `OrphanRemoval`)."""

    @property
    def kind(self) -> OrphanKind: ...
    @property
    def message_index(self) -> int: ...
    @property
    def tool_call_id(self) -> str: ...
    @property
    def row_removed(self) -> bool: ...

@final
class CollapsedTurns:
    """The turns a projection collapsed, oldest first, each read as (input start, input stop,
    output start, output stop) when asked for."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> tuple[int, int, int, int]: ...

@final
class NativeHistory:
    """A valid history with its row view and prices."""

    @property
    def total_tokens(self) -> int: ...
    @property
    def image_tokens(self) -> int: ...
    @property
    def turns(self) -> int: ...
    @property
    def system_floor_tokens(self) -> int: ...
    def plan_token_budget(
        self,
        budget: int,
        breadcrumb_cost: int | None,
        low_water: float = 1.0,
        step_budget: int | None = None,
        allow_growth: bool = False,
    ) -> Plan:
        """`step_budget`: the budget the §11.1 grid step comes from, when not `budget`;
        `allow_growth`: keep a cut whose output estimates more than its input (§16.1)."""
    def plan_turn_count(
        self, limit: int, breadcrumb_cost: int | None, low_water: float = 1.0
    ) -> Plan: ...
    def plan_row_count(self, keep: int) -> Plan:
        """`keep`: the row limit in effect (`trimming.rows_to_keep`), never 0."""
    def apply(
        self,
        drop: tuple[int, int],
        kept_in_drop: list[tuple[int, int]],
        breadcrumb: bool,
        breadcrumb_from: int | None,
        breadcrumb_text: str,
    ) -> NativeHistory:
        """The history after a plan (§15.1 order): the rows of `drop` (start, stop) out but the
        pinned turns `kept_in_drop`; a breadcrumb when asked, the input's at `breadcrumb_from` or
        a new one."""
    def summary_request(self, stop: int, instruction: str) -> NativeHistory:
        """§15.3's summary request: rows 0 to `stop` (exclusive), then one user row holding
        `instruction`."""
    @property
    def pinned_tokens(self) -> int:
        """The estimate of the pinned turns (§15.1)."""
    @property
    def fixed_floor_tokens(self) -> int:
        """The leading system rows, the summary row and every pinned turn but the newest."""
    @property
    def summary_row(self) -> int | None:
        """The index of the §15.2 summary row, if any."""
    def turn_spans(self) -> list[tuple[int, int, bool]]:
        """Every turn (§15.1), oldest first, as (start, stop, pinned)."""
    def sweep(self) -> tuple[NativeHistory, list[Removal]]: ...
    @property
    def rows(self) -> int: ...
    @property
    def pinned_prefix_breadcrumb(self) -> int | None:
        """The fixed prefix's breadcrumb when pinned turns stand before it (§15.1, §14)."""
    @property
    def system_rows(self) -> int:
        """The number of leading system rows."""
    def tokens_through(self, index: int) -> int:
        """The estimate of rows 0 through `index` (every row when it is past the end)."""
    def project(self, keep_turns: int) -> tuple[NativeHistory, CollapsedTurns, int] | None:
        """The §13.1 projection with K = `keep_turns`: the projected history, its collapsed
        turns, the rows left out; None when no turn collapses."""
    def clear_tool_results(
        self, keep_newest: int, stop_tokens: int
    ) -> tuple[NativeHistory, int] | None:
        """§13.4: the history with the running turn's oldest tool results cleared, and how many
        were; None when none is."""
    def history_field(self, tail: bytes) -> bytes:
        """Field 1 (`history`) of a response followed by `tail`, in one bytes object."""
    def estimates_field(self) -> bytes: ...

@final
class Scan:
    """A scanned request: the non-history fields' bytes, the history's violations and view."""

    @property
    def violation_total(self) -> int: ...
    def rest(self) -> bytes: ...
    def violations(self) -> list[Violation]: ...
    def view(self) -> NativeHistory: ...

@final
class TooManyItems:
    """A request refused by the request-item limit."""

    @property
    def field(self) -> int:
        """The number of the top-level field in which the items passed the allowance."""

def scan(
    raw: bytes,
    max_rows: int,
    conventions: Conventions,
    items: tuple[ItemSchema, int, int] | None = None,
) -> Scan | TooManyItems | None:
    """Scans a request's bytes with the GIL released; None when they do not decode. `items`:
    the request-item limit (the schema, the request type's index in it, this request's
    allowance), counted in the same pass; `TooManyItems` when the request holds more, exactly
    when `item_limit_crossing` names a field, and that field."""

@final
class ItemSchema:
    """The counted fields of every request message type (`limits.item_schema()`)."""

    def __new__(cls, types: list[list[tuple[int, int, bool, int, int]]]) -> ItemSchema: ...

def item_limit_crossing(raw: bytes, schema: ItemSchema, root: int, limit: int) -> int | None:
    """The top-level field whose items take the request past `limit` items, counted with the
    GIL released; None when it holds at most `limit` or its framing breaks first."""
