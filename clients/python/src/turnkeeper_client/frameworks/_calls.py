"""What every adapter does around one model call: the PrepareModelCall request (profiles, session,
hook texts, tool schemas, calibration) and the provider usage that calibrates the next call."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from turnkeeper.v1 import history_pb2, history_service_pb2, profile_pb2, trim_pb2

from ..usage import reported_usage

# Sessions whose last capacity report is kept for calibration; the oldest is forgotten first, so
# a long-lived process with many sessions holds a bounded amount.
MAX_CALIBRATED_SESSIONS = 4096


def schema_text(schema: object) -> str:
    """A tool schema as the JSON text PrepareModelCall prices."""
    return json.dumps(schema, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


@dataclass
class _Calibration:
    report: trim_pb2.CapacityReport
    usage: trim_pb2.ReportedUsage | None = None


class CallPreparer:
    """Builds each PrepareModelCall request of one adapter and keeps, per session, what the last
    prepared request was estimated at, so the provider's count of it calibrates the next one."""

    def __init__(
        self,
        profiles: profile_pb2.Profiles,
        *,
        reserved_output_tokens: int = 0,
        calibrate: bool = True,
        runtime_id: str = "",
        agent_id: str = "",
    ) -> None:
        self.profiles = profiles
        self.reserved_output_tokens = reserved_output_tokens
        self.calibrate = calibrate
        self.runtime_id = runtime_id
        self.agent_id = agent_id
        self._sessions: OrderedDict[str, _Calibration] = OrderedDict()

    def request(
        self,
        history: history_pb2.History,
        *,
        session_id: str,
        hook_texts: Iterable[str] = (),
        tool_schemas: Iterable[str] = (),
    ) -> history_service_pb2.PrepareModelCallRequest:
        request = history_service_pb2.PrepareModelCallRequest(
            history=history,
            profiles=self.profiles,
            caller=trim_pb2.CallerContext(
                session_id=session_id, runtime_id=self.runtime_id, agent_id=self.agent_id
            ),
            hook_texts=list(hook_texts),
            tool_schemas=list(tool_schemas),
            reserved_output_tokens=self.reserved_output_tokens,
        )
        state = self._sessions.get(session_id)
        if self.calibrate and state is not None and state.usage is not None:
            request.reported_usage.CopyFrom(state.usage)
        return request

    def prepared(
        self, session_id: str, response: history_service_pb2.PrepareModelCallResponse
    ) -> None:
        """Records the request about to be sent; its usage, once known, calibrates the next."""
        previous = self._sessions.pop(session_id, None)
        usage = previous.usage if previous is not None else None
        self._sessions[session_id] = _Calibration(response.capacity_report, usage)
        while len(self._sessions) > MAX_CALIBRATED_SESSIONS:
            self._sessions.popitem(last=False)

    def reported(self, session_id: str, input_tokens: int | None) -> None:
        """The provider's input-token count of the request last prepared for the session."""
        state = self._sessions.get(session_id)
        if state is None or input_tokens is None or input_tokens <= 0:
            return
        state.usage = reported_usage(state.report, input_tokens)


def recovery_request(
    request: history_service_pb2.PrepareModelCallRequest,
    sent: history_pb2.History,
) -> history_service_pb2.PrepareModelCallRequest:
    """The overflow-recovery request after the provider refused `sent` (the prepared history)."""
    again = history_service_pb2.PrepareModelCallRequest()
    again.CopyFrom(request)
    again.history.CopyFrom(sent)
    again.overflow_recovery = True
    again.ClearField("reported_usage")
    return again


def recovery_blocked(response: history_service_pb2.PrepareModelCallResponse) -> bool:
    """True when the recovery could not make the request smaller (it reports a blocker)."""
    return not response.recovery.trimmed


T = TypeVar("T")
U = TypeVar("U")


def keep_originals(
    prepared: Sequence[T], originals: Sequence[U], same: Callable[[T, U], bool]
) -> list[T | U]:
    """The prepared items with each one that stands for an input item replaced by that input
    object itself, so the framework gets its own objects back. The prepared history is the input
    in order with rows left out and a breadcrumb put in, so one forward scan pairs them."""
    out: list[T | U] = []
    position = 0
    for item in prepared:
        match = next((k for k in range(position, len(originals)) if same(item, originals[k])), None)
        if match is None:
            out.append(item)
        else:
            out.append(originals[match])
            position = match + 1
    return out
