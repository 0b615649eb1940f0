"""What the dashboard counts per session: the latest state, not sums of every trim event.

A runtime that resends its whole history on every call is trimmed again on every call, at the
same row while its cut holds (spec §11), so summing the events counts the same dropped turns and
saved tokens over and over. The ledger reads the feed in order and keeps, per session:

- the turns dropped from its history: a trim of a full history (it inserted a breadcrumb) says it
  all; a trim of a history that already carried one (a runtime that keeps what the trim returned)
  drops turns on top of what was dropped before;
- the tokens saved by its latest prepared call (the trims of one call summed: at most a turn-limit
  trim, then a token-budget trim);
- whether each prepared call moved the cut, over its last `WINDOW` prepared calls: a call that
  trimmed a history already trimmed moved it; a call that trimmed a full history moved it unless
  it dropped exactly the rows the session's previous full-history call dropped (a resent history
  cut at the same row keeps its prompt-cache prefix). A prepared call that did not trim did not.

Prepared calls are known by their meter updates, which the feed delivers live only (the Redis feed
also replays them); trims replayed from the feed's ring still set the latest state.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turnkeeper.v1 import history_service_pb2, trim_pb2

WINDOW = 20
"""Prepared calls the cut-moved figure looks back over."""
SESSIONS_KEPT = 10_000
"""Sessions remembered per page; the least recently seen are forgotten first."""

# The order of the trims of one PrepareModelCall: the turn limit, then the token budget.
_RANK = {trim_pb2.TRIM_REASON_TURN_LIMIT: 0, trim_pb2.TRIM_REASON_TOKEN_BUDGET: 1}


@dataclass
class _Call:
    """The trims of one prepared call, as they arrive."""

    rank: int
    full_history: bool
    """Its first trim inserted a breadcrumb: the call was given a history not trimmed before."""
    dropped_messages: int = 0
    """Input rows dropped by its trims together: where its cut sits in a full history."""


@dataclass
class SessionState:
    dropped_turns: int = 0
    saved_by_last_call: int = 0
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
        return not call.full_history or call.dropped_messages != self.full_cut

    @property
    def all_cut_moves(self) -> int:
        """The closed calls' moves and, tentatively, the open call's."""
        call = self.open_call
        return self.cut_moves + (call is not None and self.moved(call))

    def to_json(self) -> dict[str, Any]:
        return {
            "droppedTurns": self.dropped_turns,
            "savedByLastCall": self.saved_by_last_call,
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
            session_id = item.meter_update.caller.session_id
            self._change(session_id, self._prepared_call)
            return session_id
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
        if call.full_history:
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
            call = state.open_call = _Call(rank, trimmed.breadcrumb_inserted)
            state.saved_by_last_call = 0
            if trimmed.breadcrumb_inserted:
                state.dropped_turns = 0
        call.rank = rank
        call.dropped_messages += trimmed.dropped_messages
        state.dropped_turns += trimmed.dropped_turns
        state.saved_by_last_call += max(0, trimmed.tokens_before - trimmed.tokens_after)

    def _prepared_call(self, state: SessionState) -> None:
        if state.open_call is None:
            state.count_call(False)  # it trimmed nothing: whatever was cut stays cut
            state.saved_by_last_call = 0
        else:
            self._close(state, prepared=True)
