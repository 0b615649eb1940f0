"""A 10,001-row PrepareModelCall, in-process: the engine's read and the RPC, with the tool-context
projection (spec §13.1) collapsing every old turn (K = 2) and with nothing to collapse (K above
the turns). The history is a system row and 2,500 turns of a user row, an assistant row with one
call, its tool row and a closing reply; the budget and the turn limit are high enough that
nothing is trimmed, so the figures are the projection's own cost.

Prints the fastest of `BENCH_REPEAT` (200) calls of each, never pass/fail. To compare with a
checkout from before §13, run it there too (`PYTHONPATH=<checkout>/service`): with no
`keep_tool_context_turns` in its contract it prints the unprojected figures only.
"""

from __future__ import annotations

import os

from harness import best_of
from turnkeeper.server.api import rpcs
from turnkeeper.server.engine import create_engine, native_available
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2 as p

REPEAT = int(os.environ.get("BENCH_REPEAT", "200"))
TURNS = 2_500


def history() -> h.History:
    rows = [h.ChatMessage(role=h.ROLE_SYSTEM, content="You are a helpful agent. " * 20)]
    for turn in range(TURNS):
        call = h.ToolCall(id=f"call-{turn}", name="search", arguments='{"q": "x"}')
        rows += [
            h.ChatMessage(role=h.ROLE_USER, content=f"please do task {turn} " * 8),
            h.ChatMessage(role=h.ROLE_ASSISTANT, tool_calls=[call]),
            h.ChatMessage(role=h.ROLE_TOOL, tool_call_id=call.id, content="result text " * 40),
            h.ChatMessage(role=h.ROLE_ASSISTANT, content=f"done with {turn} " * 6),
        ]
    return h.History(chat=h.ChatHistory(messages=rows))


def request(keep_turns: int | None) -> bytes:
    runtime = p.RuntimeProfile(max_context_tokens=100_000_000, max_history_messages=100_000)
    if keep_turns is not None:
        runtime.keep_tool_context_turns = keep_turns
    profiles = p.Profiles(runtime=runtime)
    return svc.PrepareModelCallRequest(history=history(), profiles=profiles).SerializeToString()


def main() -> None:
    projects = "keep_tool_context_turns" in p.RuntimeProfile.DESCRIPTOR.fields_by_name
    cases = {"K = 2": 2, "K above the turns": TURNS + 1} if projects else {"no projection": None}
    engines = ["native", "python"] if native_available() else ["python"]
    print(f"== PrepareModelCall, {4 * TURNS + 1} rows, fastest of {REPEAT}")
    for name in engines:
        for case, keep in cases.items():
            read, prepare = _best(name, request(keep))
            print(
                f"{name:>6} {case:<18} read {read:7.0f} µs  prepare {prepare:7.0f} µs"
                f"  total {read + prepare:7.0f} µs"
            )


def _best(engine_name: str, raw: bytes) -> tuple[float, float]:
    """The fastest read of `raw` and the fastest PrepareModelCall on what it read, in µs."""
    engine = create_engine(engine_name)
    message, source = engine.read(raw, svc.PrepareModelCallRequest, 100_000)
    read = best_of(lambda: engine.read(raw, svc.PrepareModelCallRequest, 100_000), REPEAT)
    prepare = best_of(lambda: rpcs.prepare_model_call(message, source), REPEAT)
    return read * 1e6, prepare * 1e6


if __name__ == "__main__":
    main()
