"""Helpers shared by the robustness tests: rich statuses, server RSS, bursts of calls (the request
builders are the bench's, `harness`)."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
import time
import types
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from harness import ESTIMATE, OPTIONS

BIG_MESSAGES = OPTIONS
"""Channel options for the robustness tests' big requests and answers (the bench's)."""


def burst(
    address: str,
    body: bytes,
    calls: int,
    outcome_of: Callable[[grpc.RpcError], str],
    pid: int,
    sample_seconds: float = 0.05,
    method: str = ESTIMATE,
) -> tuple[Counter[str], int]:
    """`calls` concurrent calls of `method` with the serialized `body`, each on its own channel:
    their outcomes ("OK" or `outcome_of(error)`) and the peak RSS of the server `pid` (MiB)
    meanwhile, while it lives."""
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def call() -> None:
        with grpc.insecure_channel(address, options=BIG_MESSAGES) as channel:
            try:
                channel.unary_unary(method)(body, timeout=120)
                outcome = "OK"
            except grpc.RpcError as error:
                outcome = outcome_of(error)
        with lock:
            outcomes[outcome] += 1

    threads = [threading.Thread(target=call) for _ in range(calls)]
    peak = rss_kib(pid) // 1024
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        with contextlib.suppress(OSError, RuntimeError):  # it died (the test says so)
            peak = max(peak, rss_kib(pid) // 1024)
        time.sleep(sample_seconds)
    return outcomes, peak


def rich_status(error: grpc.RpcError) -> status_pb2.Status | None:
    """The google.rpc.Status of a failed call, or None when it carries none."""
    status: status_pb2.Status | None = rpc_status.from_call(error)  # type: ignore[arg-type]
    return status


def error_info(status: status_pb2.Status) -> error_details_pb2.ErrorInfo | None:
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    return None


def bad_request(status: status_pb2.Status) -> error_details_pb2.BadRequest | None:
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            found = error_details_pb2.BadRequest()
            detail.Unpack(found)
            return found
    return None


def proc_status_kib(pid: int, key: str) -> int:
    """A /proc/PID/status figure in KiB: "VmRSS" (resident) or "VmSize" (address space)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} for pid {pid}")


def rss_kib(pid: int) -> int:
    """Resident set size of a process, in KiB."""
    return proc_status_kib(pid, "VmRSS")


def load_procs() -> types.ModuleType:
    """tests/fleet/procs.py (redis-server and nginx helpers), loaded by path."""
    name = "turnkeeper_tests_procs"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / "fleet" / "procs.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
