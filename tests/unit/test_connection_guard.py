"""Which connections the connection guard closes (edge/connection_guard.py), and its scan of the
process's own sockets against a real listener."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable

import pytest
from turnkeeper.server.edge.connection_guard import (
    CAP_IDLE_S,
    RESERVE,
    UNUSED_BYTES,
    Accepted,
    ConnectionGuard,
    SocketTable,
    accepted_connections,
    to_shed,
    too_fresh_to_judge,
)


def conn(fd: int, peer: str, idle_ms: int = 5000, received: int = 0, tls: bool = False) -> Accepted:
    return Accepted(fd, (("::1", 1), (peer, fd)), peer, idle_ms, received, tls)


def test_a_peer_keeps_its_share_and_loses_its_most_idle_unused_connections() -> None:
    mine = [conn(i, "10.0.0.1", idle_ms=1000 + i) for i in range(6)]
    busy = [conn(10 + i, "10.0.0.1", received=UNUSED_BYTES + 1) for i in range(3)]
    fresh = [conn(20, "10.0.0.1", idle_ms=100)]  # still handshaking: left alone
    other = [conn(30 + i, "10.0.0.2") for i in range(3)]
    shed = to_shed(mine + busy + fresh + other, max_connections=100, per_peer=4)
    # 10 connections for a share of 4: the 6 idle unused ones go, most idle first, never a used
    # one (which carried calls) or one too fresh to judge.
    assert sorted(c.fd for c, _ in shed) == list(range(6))
    assert {why for _, why in shed} == {"peer_share"}


def test_at_the_cap_every_idle_unused_connection_goes() -> None:
    unused = [conn(i, f"10.0.0.{i}") for i in range(10)]
    used = [conn(100 + i, "10.0.1.1", received=5000) for i in range(10)]
    tls_hello = [conn(200, "10.0.2.1", received=40, tls=True)]  # a TLS handshake began: keep
    everything = unused + used + tls_hello
    assert to_shed(everything, max_connections=100, per_peer=0) == []
    shed = to_shed(everything, max_connections=len(everything) + 10, per_peer=0)
    assert sorted(c.fd for c, _ in shed) == list(range(10))
    assert {why for _, why in shed} == {"cap"}


def test_the_scan_finds_the_accepted_side_only_and_shutting_down_frees_it() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    try:
        time.sleep(0.05)
        (seen,) = accepted_connections({port: False})
        assert seen.fd == accepted.fileno() and seen.received == 0 and seen.unused
        guard = ConnectionGuard({port: False}, max_connections=1, per_peer=0)
        guard._quiet_below = 0  # scan whatever the descriptor count
        time.sleep(CAP_IDLE_S + 0.2)
        assert guard.scan() == 1
        assert client.recv(1) == b""  # the peer sees the hang-up
        assert accepted.recv(1) == b""  # and the owner of the descriptor, which then closes it
    finally:
        for sock in (client, accepted, listener):
            sock.close()


def test_a_fresh_unused_connection_is_judged_again_only_where_a_limit_is_reached() -> None:
    fresh = conn(1, "10.0.0.1", idle_ms=10)
    settled = [conn(10 + i, "10.0.0.1") for i in range(3)]
    assert not too_fresh_to_judge([fresh, *settled], max_connections=100, per_peer=8)
    assert too_fresh_to_judge([fresh, *settled], max_connections=100, per_peer=3)
    assert too_fresh_to_judge([fresh, *settled], max_connections=RESERVE + 4, per_peer=0)
    used = conn(1, "10.0.0.1", idle_ms=10, received=UNUSED_BYTES + 1)
    assert not too_fresh_to_judge([used, *settled], max_connections=RESERVE + 4, per_peer=3)


def test_an_idle_server_counts_its_descriptors_and_looks_at_its_sockets_only_on_a_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    looks = []
    guard = ConnectionGuard({port: False}, max_connections=1000, per_peer=0)
    guard._quiet_below = 0
    original = SocketTable.connections

    def counted(table: SocketTable, names: Iterable[str]) -> list[Accepted]:
        looks.append(1)
        return original(table, names)

    monkeypatch.setattr(SocketTable, "connections", counted)
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    try:
        for _ in range(5):
            assert guard.scan() == 0
        assert len(looks) == 1  # nothing opened or closed since the first look
        another = socket.create_connection(("127.0.0.1", port))
        assert guard.scan() == 0
        assert len(looks) == 2  # a descriptor more: looked at again
        another.close()
    finally:
        for sock in (client, accepted, listener):
            sock.close()


def test_a_remembered_unused_connection_is_read_again_and_its_traffic_makes_it_used() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    table = SocketTable({port: False})
    try:
        (first,) = table.connections(os.listdir("/proc/self/fd"))
        assert first.unused
        client.sendall(b"x" * (UNUSED_BYTES + 1))
        time.sleep(0.05)
        (again,) = table.connections(os.listdir("/proc/self/fd"))
        assert again.received == UNUSED_BYTES + 1 and not again.unused
        assert accepted.recv(1) == b"x"  # the descriptor is still open and its owner's
    finally:
        for sock in (client, accepted, listener):
            sock.close()
