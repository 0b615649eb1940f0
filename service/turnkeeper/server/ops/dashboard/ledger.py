"""What the dashboard counts per session: the latest state, not sums of every trim event.

A runtime that resends its whole history on every call is trimmed again on every call, at the
same row while its cut holds (spec §11), so summing the events counts the same dropped turns and
saved tokens over and over. The ledger reads the feed in order and keeps, per session:

- the turns dropped from its history: a trim of a full history (it inserted a breadcrumb) says it
  all; a trim of a history that already carried one (a runtime that keeps what the trim returned)
  drops turns on top of what was dropped before;
- the tokens saved by its latest prepared call (the trims of one call summed: at most a turn-limit
  trim, a token-budget trim, then a clearing of the running turn's tool results, spec §13.4);
- the turns its latest prepared call collapsed and the tokens that collapse saved (spec §13.3):
  the projection is rebuilt from the history on every call, so the latest call says it all, as a
  meter update or, replayed without one, as the collapse every trim of the call carries;
- whether each prepared call moved the cut, over its last `WINDOW` prepared calls: a call that
  trimmed a history already trimmed moved it; a call that trimmed a full history moved it unless
  it dropped exactly the rows the session's previous full-history call dropped (a resent history
  cut at the same row keeps its prompt-cache prefix). A prepared call that did not trim did not,
  nor did one that only cleared tool results: clearing keeps every row of the request in place;
- the tokens of the pinned turns in its latest prepared request (spec §15.1), from the meter
  update of the call or, replayed without one, from its last trim's output;
- what its latest compaction plan would save (spec §15.3): PlanCompaction publishes a meter update
  with the plan instead of a meter; it is not a prepared call, so it leaves the call count and
  the cut alone. Whether the runtime applied the plan is the runtime's: the sidecar is stateless.

Prepared calls are known by their meter updates, which the feed delivers live only (the Redis feed
also replays them); trims replayed from the feed's ring still set the latest state.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2

WINDOW = 20
"""Prepared calls the cut-moved figure looks back over."""
SESSIONS_KEPT = 10_000
"""Sessions remembered per page; the least recently seen are forgotten first."""

# The order of the trims of one PrepareModelCall: the turn limit, the token budget, then the
# clearing of the running turn's tool results (spec §13.2).
_CLEARING = trim_pb2.TRIM_REASON_TOOL_RESULTS_CLEARED
_RANK = {trim_pb2.TRIM_REASON_TURN_LIMIT: 0, trim_pb2.TRIM_REASON_TOKEN_BUDGET: 1, _CLEARING: 2}


@dataclass
class _Call:
    """The trims of one prepared call, as they arrive."""

    rank: int
    full_history: bool | None
    """Its first cut inserted a breadcrumb: the call was given a history not trimmed before;
    None while the call has made no cut (a clearing alone drops no row)."""
    dropped_messages: int = 0
    """Input rows dropped by its trims together: where its cut sits in a full history."""


@dataclass
class SessionState:
    dropped_turns: int = 0
    saved_by_last_call: int = 0
    collapsed_by_last_call: int = 0
    """The turns the latest prepared call's projection collapsed (spec §13.3)."""
    saved_by_last_collapse: int = 0
    """The tokens that collapse saved."""
    pinned_tokens: int = 0
    """The estimate of the pinned turns in the latest prepared request (spec §15.1)."""
    compactions: int = 0
    """The compaction plans seen (spec §15.3)."""
    saved_by_last_compaction: int = 0
    """What the latest compaction plan would save, in tokens."""
    condensed_by_last_compaction: int = 0
    """The turns the latest compaction plan condenses."""
    trim_events: int = 0
    cut_moves: int = 0
    recent: int = 0
    """One bit per recent prepared call, the newest lowest: did it move the cut (an int rather
    than a deque, as a page keeps up to SESSIONS_KEPT of these)."""
    recent_calls: int = 0
    full_cut: int | None = None
    """The rows the latest full-history call dropped."""
    open_call: _Call | None = None

    def count_call(self, moved: bool) -> None:
        self.recent = ((self.recent << 1) | moved) & ((1 << WINDOW) - 1)
        self.recent_calls = min(WINDOW, self.recent_calls + 1)

    def moved(self, call: _Call) -> bool:
        if call.full_history is None:
            return False
        return not call.full_history or call.dropped_messages != self.full_cut

    def take_collapse(self, collapse: trim_pb2.ToolContextCollapse) -> None:
        """The latest call's collapse; an absent one (the default message) collapsed nothing."""
        self.collapsed_by_last_call = collapse.collapsed_turns
        self.saved_by_last_collapse = collapse.saved_tokens

    @property
    def all_cut_moves(self) -> int:
        """The closed calls' moves and, tentatively, the open call's."""
        call = self.open_call
        return self.cut_moves + (call is not None and self.moved(call))

    def to_json(self) -> dict[str, Any]:
        return {
            "droppedTurns": self.dropped_turns,
            "savedByLastCall": self.saved_by_last_call,
            "collapsedByLastCall": self.collapsed_by_last_call,
            "savedByLastCollapse": self.saved_by_last_collapse,
            "pinnedTokens": self.pinned_tokens,
            "compactions": self.compactions,
            "savedByLastCompaction": self.saved_by_last_compaction,
            "condensedByLastCompaction": self.condensed_by_last_compaction,
            "trimEvents": self.trim_events,
            "cutMoves": self.all_cut_moves,
            "recentCalls": self.recent_calls,
            "recentCutMoves": self.recent.bit_count(),
            "window": WINDOW,
        }


class Ledger:
    """Per-session latest state over one page's feed, in feed order."""

    def __init__(self, sessions_kept: int = SESSIONS_KEPT) -> None:
        self._sessions: OrderedDict[str, SessionState] = OrderedDict()
        self._kept = sessions_kept

    def session(self, session_id: str) -> SessionState | None:
        return self._sessions.get(session_id)

    def read(self, item: history_service_pb2.TrimEventsResponse) -> str | None:
        """Counts one feed item; returns the session it changed (None for heartbeats and gaps)."""
        kind = item.WhichOneof("item")
        if kind == "event":
            trimmed = item.event.trimmed
            self._change(trimmed.caller.session_id, lambda s: self._trim(s, trimmed))
            return trimmed.caller.session_id
        if kind == "meter_update":
            update = item.meter_update
            self._change(update.caller.session_id, lambda s: self._meter_update(s, update))
            return update.caller.session_id
        return None

    def annotation(self, session_id: str) -> dict[str, Any]:
        """What a message about `session_id` carries: the session's latest state. The page sums
        its sessions' states for its totals, so a resent history is counted once there too."""
        return {"session": self._sessions[session_id].to_json()}

    def _change(self, session_id: str, update: Callable[[SessionState], None]) -> None:
        state = self._sessions.pop(session_id, None)
        if state is None:
            state = SessionState()
            while len(self._sessions) >= self._kept:
                self._sessions.popitem(last=False)
        update(state)
        self._sessions[session_id] = state  # the most recently seen last

    @staticmethod
    def _close(state: SessionState, prepared: bool) -> None:
        """Ends the open call: counted in the recent-calls window when it was a prepared call."""
        call = state.open_call
        if call is None:
            return
        moved = state.moved(call)
        state.cut_moves += moved
        if call.full_history:  # not None: a clearing alone leaves the full cut where it was
            state.full_cut = call.dropped_messages
        if prepared:
            state.count_call(moved)
        state.open_call = None

    def _trim(self, state: SessionState, trimmed: trim_pb2.HistoryTrimmed) -> None:
        state.trim_events += 1
        rank = _RANK.get(trimmed.reason, 1)
        call = state.open_call
        if call is None or rank <= call.rank:
            # A new call: the previous one ended without a meter update (a TrimHistory call,
            # a failed pre-flight, or a trim replayed without its meter).
            self._close(state, prepared=False)
            call = state.open_call = _Call(rank, None)
            state.saved_by_last_call = 0
            state.take_collapse(trimmed.collapse)
        if call.full_history is None and trimmed.reason != _CLEARING:
            call.full_history = trimmed.breadcrumb_inserted
            if trimmed.breadcrumb_inserted:
                state.dropped_turns = 0
        call.rank = rank
        call.dropped_messages += trimmed.dropped_messages
        state.dropped_turns += trimmed.dropped_turns
        state.saved_by_last_call += max(0, trimmed.tokens_before - trimmed.tokens_after)
        # Each trim of a call reports the pinned turns in its own output; the last one's stand
        # in the request until the call's meter update says so itself.
        state.pinned_tokens = trimmed.pinned_tokens

    def _meter_update(self, state: SessionState, update: events_pb2.MeterUpdate) -> None:
        if update.HasField("compaction"):
            state.compactions += 1
            state.saved_by_last_compaction = update.compaction.saved_tokens
            state.condensed_by_last_compaction = update.compaction.condensed_turns
            return
        state.take_collapse(update.collapse)
        state.pinned_tokens = update.pinned_tokens
        if state.open_call is None:
            state.count_call(False)  # it trimmed nothing: whatever was cut stays cut
            state.saved_by_last_call = 0
        else:
            self._close(state, prepared=True)
