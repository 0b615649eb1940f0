"""Issue 9 "descriptors and sockets": silent connections cannot exhaust descriptors or lock clients
out for long, and the Unix socket is created with --unix-mode (0660) whatever the umask."""

from __future__ import annotations

import os
import resource
import socket
import stat
import time
from collections.abc import Callable
from typing import Any

import grpc
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _call(target: str, timeout: float) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)
        stub.ResolveBudget(svc.ResolveBudgetRequest(), timeout=timeout)


def test_silent_connections_stay_under_the_connection_cap_and_clients_get_back_in(
    server_factory: Callable[..., Any], figures: Any
) -> None:
    """The probe: 1,011 silent TCP connections locked new clients out at a 1,024 fd limit."""
    server = server_factory(
        "--max-connections", "64", "--handshake-timeout-seconds", "1", unix=False
    )
    resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (256, 256))
    baseline = _open_fds(server.pid)
    host, port = server.address.rsplit(":", 1)
    silent: list[socket.socket] = []
    try:
        for _ in range(400):
            silent.append(socket.create_connection((host, int(port)), timeout=5))
        time.sleep(0.3)
        peak = _open_fds(server.pid)
        assert peak <= baseline + 64 + 8, (baseline, peak)
        started = time.monotonic()
        deadline = started + 10
        while True:  # the handshake timeout frees the slots the silent connections hold
            try:
                _call(server.address, timeout=1.0)
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline, "a new client never got back in"
        waited = time.monotonic() - started
        assert server.alive()
    finally:
        for sock in silent:
            sock.close()
    figures.add("silent connections opened", len(silent))
    figures.add("server fds baseline / peak", f"{baseline} / {peak}")
    figures.add("new client served after s", f"{waited:.2f}")


def test_the_unix_socket_is_0660_under_umask_000(server_factory: Callable[..., Any]) -> None:
    previous = os.umask(0)
    try:
        default = server_factory()
        narrow = server_factory("--unix-mode", "600")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(default.unix_path).st_mode) == 0o660
    assert stat.S_IMODE(os.stat(narrow.unix_path).st_mode) == 0o600
