"""Issue 19 item 6: memory bounded by configuration, under a real cgroup memory limit.

The sidecar runs in a memory cgroup of its own limited to 768 MiB (what the Kubernetes examples
give it), with default flags but what the deployment files set, so its in-flight budget follows
that limit. A wave of 16 concurrent 60 MB EstimateTokens requests, or TrimHistory ones that keep
half of it, must end in OK and RESOURCE_EXHAUSTED (OVERLOADED + RetryInfo) answers, with no OOM
kill, and RSS must come back near idle afterwards. Needs a writable memory cgroup (root, cgroup v1 or v2); skipped without one.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from harness import chat
from robustness_support import ESTIMATE, burst, error_info, rich_status, rss_kib
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc, trim_pb2

MIB = 1024 * 1024
LIMIT_MIB = 768  # deploy/kubernetes: the sidecar's memory limit
WAVE = 16
TRIM = "/turnkeeper.v1.HistoryService/TrimHistory"
V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")


@dataclass
class MemoryCgroup:
    """A memory cgroup of our own: v1 (`memory.limit_in_bytes`) or v2 (`memory.max`)."""

    path: Path
    v2: bool

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def limit(self, limit_bytes: int) -> None:
        (self.path / ("memory.max" if self.v2 else "memory.limit_in_bytes")).write_text(
            str(limit_bytes)
        )

    def join(self) -> None:
        """Moves the calling process in (run in the sidecar's child before exec)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def oom_kills(self) -> int:
        for line in self._read("memory.events" if self.v2 else "memory.oom_control").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak_mib(self) -> int | None:
        """The cgroup's peak usage (page cache included), where the kernel reports it."""
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            return int(self._read(name)) // MIB
        except OSError:
            return None

    def failcnt(self) -> int | None:
        """How often usage hit the limit (v1 only)."""
        return None if self.v2 else int(self._read("memory.failcnt"))


def _create() -> MemoryCgroup | str:
    """A fresh memory cgroup, or why none can be made here."""
    name = f"turnkeeper-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        v2_controllers = (V2_ROOT / "cgroup.subtree_control").read_text().split()
    except OSError:
        v2_controllers = []
    if (V1_ROOT / "memory.limit_in_bytes").exists():
        candidate = MemoryCgroup(V1_ROOT / name, v2=False)
    elif "memory" in v2_controllers:
        candidate = MemoryCgroup(V2_ROOT / name, v2=True)
    else:
        return "no cgroup memory controller is mounted, or it is not enabled at the root"
    try:
        candidate.path.mkdir()
        candidate.limit(LIMIT_MIB * MIB)
    except OSError as error:
        with contextlib.suppress(OSError):
            candidate.path.rmdir()
        return f"cannot create a memory cgroup ({error.strerror}: {candidate.path})"
    return candidate


@pytest.fixture
def cgroup() -> Iterator[MemoryCgroup]:
    made = _create()
    if isinstance(made, str):
        pytest.skip(f"needs a writable memory cgroup: {made}")
    try:
        yield made
    finally:
        # The sidecar has been stopped by then; a cgroup with no process in it can be removed.
        deadline = time.monotonic() + 15
        while True:
            try:
                made.path.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def _outcome(error: grpc.RpcError) -> str:
    status = rich_status(error)
    if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and status is not None:
        info = error_info(status)
        retry = [d for d in status.details if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR)]
        if info is not None and info.reason == "ERROR_REASON_OVERLOADED" and len(retry) == 1:
            return "OVERLOADED"
    return error.code().name


def _wave_request(method: str, rows: int = 100_000) -> bytes:
    """60 MB of history; the trim keeps about half of it, so its responses are big too."""
    history = chat(rows, "y" * 590)
    if method == ESTIMATE:
        return svc.EstimateTokensRequest(history=history).SerializeToString()
    request = svc.TrimHistoryRequest(history=history, mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET)
    request.explicit_limits.budget_tokens = 75 * rows
    return request.SerializeToString()


@pytest.mark.parametrize("method", [ESTIMATE, TRIM], ids=["EstimateTokens", "TrimHistory"])
def test_a_wave_of_16_x_60_mb_under_a_768_mib_limit(
    method: str, cgroup: MemoryCgroup, server_factory: Callable[..., Any], figures: Any
) -> None:
    # What deploy/turnkeeper.toml and the image set that matters here (the rest is addresses).
    server = server_factory("--log-format", "json", unix=False, preexec=cgroup.join)
    body = _wave_request(method)
    assert len(body) >= 60_000_000
    # The default budget followed the limit.
    assert f"max_inflight_request_bytes={LIMIT_MIB // 4 * MIB} " in server.log_text()
    # Idle: after one small call of the same kind (what a serving sidecar holds anyway).
    with grpc.insecure_channel(server.address) as channel:
        channel.unary_unary(method)(_wave_request(method, rows=20), timeout=30)
    idle = rss_kib(server.pid) // 1024
    started = time.monotonic()
    outcomes, peak = burst(server.address, body, WAVE, _outcome, server.pid, 0.02, method)
    elapsed = time.monotonic() - started
    alive = server.alive()
    deadline = time.monotonic() + 15
    after = idle
    while alive and time.monotonic() < deadline:
        after = rss_kib(server.pid) // 1024
        if after <= idle + 64:
            break
        time.sleep(0.2)
    figures.add("limit MiB / in-flight budget MiB", f"{LIMIT_MIB} / {LIMIT_MIB // 4}")
    figures.add(f"{WAVE} x {len(body) // 10**6} MB by outcome", dict(outcomes))
    figures.add("RSS idle / peak / after MiB", f"{idle} / {peak} / {after}")
    figures.add("cgroup peak MiB / failcnt", f"{cgroup.peak_mib()} / {cgroup.failcnt()}")
    figures.add("wave s", f"{elapsed:.1f}")
    figures.add("OOM kills", cgroup.oom_kills())
    assert cgroup.oom_kills() == 0 and alive, (dict(outcomes), server.log_text()[-2000:])
    assert set(outcomes) <= {"OK", "OVERLOADED"} and outcomes["OK"] >= 1, outcomes
    with grpc.insecure_channel(server.address) as channel:  # still serving
        history_service_pb2_grpc.HistoryServiceStub(channel).EstimateTokens(
            svc.EstimateTokensRequest(history=chat(10)), timeout=30
        )
    assert after <= idle + 64, (idle, after)
