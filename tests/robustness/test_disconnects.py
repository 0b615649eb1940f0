"""Issue 9 "noisy disconnects": subscribers that stop reading and then vanish, or vanish at once,
are each logged once at INFO, with no ERROR and no traceback; publishing never waits for them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import grpc
from harness import agent_trim, chat
from turnkeeper.v1 import history_service_pb2_grpc

# Subscribes, reads the opening heartbeat, says so, then never reads again.
_SUBSCRIBER = """
import sys, time, grpc
from turnkeeper.v1 import history_service_pb2 as svc, history_service_pb2_grpc
channel = grpc.insecure_channel(sys.argv[1])
stream = history_service_pb2_grpc.HistoryServiceStub(channel).TrimEvents(svc.TrimEventsRequest())
next(stream)
print("subscribed", flush=True)
time.sleep(600)
"""


def _subscriber(address: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, "-c", _SUBSCRIBER, address], stdout=subprocess.PIPE, env=env
    )
    assert process.stdout is not None and process.stdout.readline() == b"subscribed\n"
    return process


def test_frozen_then_vanished_subscribers_are_logged_once_at_info(
    server_factory: Callable[..., Any], figures: Any
) -> None:
    server = server_factory(unix=False)
    frozen = [_subscriber(server.address) for _ in range(2)]
    vanished = _subscriber(server.address)
    started = time.monotonic()
    try:
        for process in frozen:
            process.send_signal(signal.SIGSTOP)
        vanished.kill()
        request = agent_trim(chat(40, "a longer row of text " * 20), budget=30)
        with grpc.insecure_channel(server.address) as channel:
            stub = history_service_pb2_grpc.HistoryServiceStub(channel)
            for _ in range(1500):  # more than the frozen readers' queues and windows hold
                stub.TrimHistory(request, timeout=30)
        published_in = time.monotonic() - started
        for process in frozen:  # frozen readers that then go away, as a crashed runtime does
            process.kill()
        deadline = time.monotonic() + 20
        while server.log_text().count("TrimEvents status=") < 3:
            assert time.monotonic() < deadline, [
                line
                for line in server.log_text().splitlines()
                if "TrimHistory" not in line and "trimmed" not in line
            ][-20:]
            time.sleep(0.1)
        dropped_after = time.monotonic() - started
    finally:
        for process in [*frozen, vanished]:
            process.kill()
            process.wait()
    log = server.log_text()
    lines = [line for line in log.splitlines() if "TrimEvents status=" in line]
    assert len(lines) == 3 and all(" INFO " in line for line in lines), lines
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
    figures.add("subscribers dropped / log lines", f"3 / {len(lines)}")
    figures.add("1500 trims with 2 frozen readers, s", f"{published_in:.1f}")
    figures.add("all dropped after s", f"{dropped_after:.1f}")
