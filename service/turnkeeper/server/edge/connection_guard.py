"""Sheds unused TCP connections so that idle sockets cannot lock clients out (Linux).

grpc core enforces `--max-connections` (`grpc.max_allowed_incoming_connections`) by closing any
connection past the cap at once, and offers no per-peer limit and no way to reclaim a slot when
the cap is reached: a silent connection holds its slot until the handshake timeout, one that sent
only the HTTP/2 preface and SETTINGS until the SETTINGS-ACK timeout. So this guard looks at the
server's own accepted sockets a few times a second (only when there are enough of them to
matter): it reads each one's TCP_INFO from a duplicate of grpc's descriptor and shuts down (the
descriptor stays grpc's, which then closes the connection as after any hang-up):

- a peer's **unused** connections beyond `--max-connections-per-peer` (an IPv4 address, an IPv6
  /64), idle at least PEER_IDLE_S, most idle first;
- at the cap (within RESERVE of it), every unused connection idle at least CAP_IDLE_S.

Unused means the peer never sent more than an HTTP/2 preface, SETTINGS and their acks (UNUSED_BYTES)
on a plaintext port, nothing at all on a TLS port (the TLS handshake hides what it sent; grpc's
SETTINGS-ACK timeout closes a TLS connection that stops after the preface). A connection that
carried a call is never shed. What grpc core cannot do and this does not either: refuse at accept
time, so a peer that reopens connections as fast as they are shed still competes for the slots
freed between two scans (SCAN_S).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import struct
from collections import defaultdict
from dataclasses import dataclass

from turnkeeper.server.telemetry.metrics import CONNECTIONS_SHED

log = logging.getLogger("turnkeeper.server")

SCAN_S = 0.25
PEER_IDLE_S = 0.5
CAP_IDLE_S = 0.5
RESERVE = 16
UNUSED_BYTES = 160  # a client preface, SETTINGS, WINDOW_UPDATE and SETTINGS ack, with room
_TCP_INFO = getattr(socket, "TCP_INFO", 11)
# struct tcp_info (linux/tcp.h): tcpi_last_data_recv (u32, ms) and tcpi_bytes_received (u64).
_LAST_DATA_RECV, _BYTES_RECEIVED, _INFO_SIZE = 52, 128, 136


@dataclass(frozen=True)
class Accepted:
    """One accepted connection as the kernel sees it."""

    fd: int
    endpoints: tuple[object, object]  # (local, peer) socket addresses: who the fd is
    peer: str  # the address group: IPv4 address, or IPv6 /64
    idle_ms: int
    received: int
    tls: bool

    @property
    def unused(self) -> bool:
        return self.received == 0 if self.tls else self.received <= UNUSED_BYTES


def _peer_group(address: str) -> str:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _inspect(fd: int, ports: dict[int, bool]) -> Accepted | None:
    """The connection behind `fd` when it is one accepted on `ports` (port -> has TLS)."""
    try:
        duplicate = socket.socket(fileno=os.dup(fd))
    except OSError:  # closed meanwhile, or not a socket
        return None
    with duplicate:
        try:
            if duplicate.family not in (socket.AF_INET, socket.AF_INET6):
                return None
            local = duplicate.getsockname()
            if duplicate.type != socket.SOCK_STREAM or local[1] not in ports:
                return None
            peer = duplicate.getpeername()  # the listener itself has none
            info = duplicate.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _INFO_SIZE)
        except OSError:
            return None
    if len(info) < _INFO_SIZE:
        return None
    return Accepted(
        fd=fd,
        endpoints=(local, peer),
        peer=_peer_group(peer[0]),
        idle_ms=struct.unpack_from("I", info, _LAST_DATA_RECV)[0],
        received=struct.unpack_from("Q", info, _BYTES_RECEIVED)[0],
        tls=ports[local[1]],
    )


def accepted_connections(ports: dict[int, bool]) -> list[Accepted]:
    """The process's TCP connections accepted on `ports` (port -> has TLS)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile
            continue
        connection = _inspect(int(name), ports) if target.startswith("socket:") else None
        if connection is not None:
            found.append(connection)
    return found


PEER_SHARE, AT_CAP = "peer_share", "cap"


def to_shed(
    connections: list[Accepted], max_connections: int, per_peer: int
) -> list[tuple[Accepted, str]]:
    """The unused connections to close and why (PEER_SHARE, AT_CAP): a peer's beyond
    `per_peer`, then all idle ones at the cap (0 for either: no such limit)."""
    shed: dict[int, tuple[Accepted, str]] = {}
    if per_peer:
        by_peer: dict[str, list[Accepted]] = defaultdict(list)
        for connection in connections:
            by_peer[connection.peer].append(connection)
        for mine in by_peer.values():
            surplus = len(mine) - per_peer
            idle = sorted(
                (c for c in mine if c.unused and c.idle_ms >= PEER_IDLE_S * 1000),
                key=lambda c: -c.idle_ms,
            )
            for connection in idle[: max(0, surplus)]:
                shed[connection.fd] = (connection, PEER_SHARE)
    if max_connections and len(connections) - len(shed) >= max_connections - RESERVE:
        for connection in connections:
            if connection.unused and connection.idle_ms >= CAP_IDLE_S * 1000:
                shed.setdefault(connection.fd, (connection, AT_CAP))
    return list(shed.values())


def _shut_down(connection: Accepted, ports: dict[int, bool]) -> bool:
    """Hangs up the connection, if the descriptor still is that unused connection (grpc may
    have closed it and the number may name another socket by now)."""
    now = _inspect(connection.fd, ports)
    if now is None or now.endpoints != connection.endpoints or not now.unused:
        return False
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(connection.fd)) as duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)
        return True
    return False


class ConnectionGuard:
    """Runs `to_shed` over the server's accepted connections every SCAN_S until `stop`."""

    def __init__(self, ports: dict[int, bool], max_connections: int, per_peer: int) -> None:
        self._ports = ports
        self._max = max_connections
        self._per_peer = per_peer
        self._task: asyncio.Task[None] | None = None
        self.shed_total = 0
        # Below this many descriptors no limit can be reached: the scan is skipped.
        limits = [n for n in (max_connections - RESERVE, per_peer) if n > 0]
        self._quiet_below = min(limits) if limits else 0

    def start(self) -> None:
        if self._quiet_below and os.path.isdir("/proc/self/fd"):
            self._task = asyncio.create_task(self._run(), name="connection-guard")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def scan(self) -> int:
        """One pass; returns how many connections it shed."""
        if len(os.listdir("/proc/self/fd")) < self._quiet_below:
            return 0
        chosen = to_shed(accepted_connections(self._ports), self._max, self._per_peer)
        shed = []
        for connection, why in chosen:
            if _shut_down(connection, self._ports):
                CONNECTIONS_SHED.labels(why=why).inc()
                shed.append(connection)
        if shed:
            self.shed_total += len(shed)
            peers = sorted({c.peer for c in shed})
            log.info(
                "closed %d unused connections (from %s): the connection cap or a peer's share "
                "of it was reached",
                len(shed),
                ", ".join(peers[:5]) + (f" and {len(peers) - 5} more" if len(peers) > 5 else ""),
            )
        return len(shed)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SCAN_S)
            try:
                # Off the loop: a few syscalls per socket, a few ms for hundreds of them.
                await asyncio.to_thread(self.scan)
            except Exception:  # the guard must never take the server down
                log.exception("connection guard scan failed")
