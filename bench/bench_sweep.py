"""SweepOrphans on one row with many tool calls, both engines: time per call, and its growth.

A conversation history: a user row, one assistant step with N tool calls, one tool-results row
answering every other call, a user row. The sweep removes the N/2 unanswered calls from the step.
The per-call time should stay flat as N grows (the sweep is linear); prints figures, never fails.
"""

from __future__ import annotations

import argparse

from harness import best_of
from turnkeeper.server.api import rpcs
from turnkeeper.server.engine import create_engine, native_available
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc

MAX_ROWS = 1_000_000
# A million calls are two million items: above the server's default bound, which is not measured.
MAX_ITEMS = 10_000_000


def request(calls: int) -> bytes:
    ids = [f"call-{n}" for n in range(calls)]
    step = h.AssistantToolCalls(
        text="working", tool_calls=[h.ToolCall(id=i, name="search", arguments="{}") for i in ids]
    )
    results = h.ToolResults(results=[h.ToolResult(tool_call_id=i, content="ok") for i in ids[::2]])
    rows = [
        h.ConversationMessage(chat=h.ChatMessage(role=h.ROLE_USER, content="go")),
        h.ConversationMessage(assistant_tool_calls=step),
        h.ConversationMessage(tool_results=results),
        h.ConversationMessage(chat=h.ChatMessage(role=h.ROLE_USER, content="next")),
    ]
    history = h.History(conversation=h.ConversationHistory(messages=rows))
    return svc.SweepOrphansRequest(history=history).SerializeToString()


def seconds(engine_name: str, raw: bytes, repeat: int) -> float:
    engine = create_engine(engine_name)

    def sweep() -> object:
        request_message, source = engine.read(raw, svc.SweepOrphansRequest, MAX_ROWS, MAX_ITEMS)
        return rpcs.sweep_orphans(request_message, source)

    return best_of(sweep, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--calls", type=int, nargs="+", default=[20_000, 80_000, 320_000, 1_000_000]
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    engines = ["python", "native"] if native_available() else ["python"]
    print("== SweepOrphans, one assistant step with N tool calls (half answered)")
    per_call: dict[str, float] = {}
    for calls in args.calls:
        raw = request(calls)
        line = [f"{calls:>9} calls ({len(raw) / 1e6:5.1f} MB):"]
        for name in engines:
            t = seconds(name, raw, args.repeat)
            per_call[name] = t / calls
            line.append(f"{name} {t * 1e3:8.1f} ms ({t / calls * 1e9:6.0f} ns/call)")
        print("  ".join(line))
    if "native" in per_call:
        ratio = per_call["native"] / per_call["python"]
        print(f"native / python time per call at {args.calls[-1]} calls: {ratio:.2f}x")


if __name__ == "__main__":
    main()
