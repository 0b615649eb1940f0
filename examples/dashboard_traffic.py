"""Runtime-like traffic for trying the dashboard: sessions whose histories grow one turn per call.

Every call is a real PrepareModelCall: sessions on the `main` route (capacity known) and on the
`small` route (capacity unknown) grow until the turn limit or the token budget trims them, so the
page fills with meters, trims and charts. Every runtime resends its whole history; half the
sessions trim with the minimal cut (which moves on nearly every call: the page flags them as
burning their prompt cache), the others with `history_trim_low_water = 0.7` (spec §11).

    make run                                   # the sidecar, dashboard on http://127.0.0.1:9464/
    .venv/bin/python examples/dashboard_traffic.py --sessions 40 --rate 20
"""

from __future__ import annotations

import argparse
import contextlib
import random
import time

import grpc
from turnkeeper.v1 import history_pb2, history_service_pb2_grpc, profile_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

RUNTIMES = ("runtime-eu-1", "runtime-eu-2", "runtime-us-1")


def profiles(cheap: bool, low_water: float) -> profile_pb2.Profiles:
    return profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(
            max_context_tokens=20_000,
            context_compact_ratio=0.6,
            max_history_messages=14,
            history_trim_low_water=low_water,
            default_provider="main",
            classifier_routes=[profile_pb2.ClassifierRoute(hint="cheap", provider="small")],
        ),
        providers=[
            profile_pb2.ProviderProfile(alias="main", model="big-model", context_window=32_000),
            profile_pb2.ProviderProfile(alias="small", model="small-model"),  # capacity unknown
        ],
        selection=profile_pb2.RouteSelection(classifier_hint="cheap" if cheap else ""),
    )


class Session:
    def __init__(self, index: int, rng: random.Random) -> None:
        self.id = f"session-{index:04d}"
        self.runtime = RUNTIMES[index % len(RUNTIMES)]
        self.cheap = index % 8 == 0
        self.low_water = 0.7 if index % 2 else 1.0
        self.turn_words = rng.choice((200, 800, 1500, 2500))
        self.rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="You help.")]
        self.turns = 0
        for _ in range(rng.randrange(14)):  # sessions are already under way
            self.add_turn()

    def add_turn(self) -> None:
        self.turns += 1
        words = " ".join(f"w{self.turns}" for _ in range(self.turn_words))
        self.rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=words))
        self.rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content="ok"))

    def next_call(self) -> svc.PrepareModelCallRequest:
        self.add_turn()
        return svc.PrepareModelCallRequest(
            history=history_pb2.History(chat=history_pb2.ChatHistory(messages=self.rows)),
            profiles=profiles(self.cheap, self.low_water),
            caller=trim_pb2.CallerContext(
                session_id=self.id, runtime_id=self.runtime, turn_id=f"turn-{self.turns}"
            ),
        )


def run(target: str, sessions: int, rate: float, seconds: float, seed: int) -> int:
    """Sends calls at `rate` per second for `seconds` (0: until interrupted); returns the count."""
    rng = random.Random(seed)
    pool = [Session(i, rng) for i in range(sessions)]
    sent = 0
    deadline = time.monotonic() + seconds if seconds else float("inf")
    with grpc.insecure_channel(target) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        while time.monotonic() < deadline:
            session = rng.choice(pool)
            try:
                stub.PrepareModelCall(session.next_call(), timeout=5)
            except grpc.RpcError as error:  # e.g. over capacity: a runtime would summarize
                if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    raise
                session.rows = session.rows[:1]
            sent += 1
            time.sleep(1 / rate)
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="the sidecar's gRPC address")
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--rate", type=float, default=20.0, help="calls per second")
    parser.add_argument("--seconds", type=float, default=0.0, help="0 runs until interrupted")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        run(args.target, args.sessions, args.rate, args.seconds, args.seed)


if __name__ == "__main__":
    main()
