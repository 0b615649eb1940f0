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

A pass costs a few syscalls per descriptor, so an idle server does not pay it every SCAN_S: the
descriptors are only counted then, and the sockets looked at again when their number changed, when
the last pass left unused connections too fresh to judge where a limit is reached, or FULL_SCAN_S
after the last look. What a descriptor is (its endpoints, its port's security) is remembered while
it names the same socket, and a connection that carried a call is never read again: it stays used.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import os
import socket
import struct
import time
from collections import defaultdict
from collections.abc import Iterable

from turnkeeper.server.telemetry.metrics import CONNECTIONS_SHED

log = logging.getLogger("turnkeeper.server")

SCAN_S = 0.25
FULL_SCAN_S = 5.0
PEER_IDLE_S = 0.5
CAP_IDLE_S = 0.5
RESERVE = 16
UNUSED_BYTES = 160  # a client preface, SETTINGS, WINDOW_UPDATE and SETTINGS ack, with room
_TCP_INFO = getattr(socket, "TCP_INFO", 11)
# struct tcp_info (linux/tcp.h): tcpi_last_data_recv (u32, ms) and tcpi_bytes_received (u64).
_LAST_DATA_RECV, _BYTES_RECEIVED, _INFO_SIZE = 52, 128, 136


@dataclasses.dataclass(frozen=True)
class Accepted:
    """One accepted connection as the kernel sees it."""

    fd: int
    endpoints: tuple[object, object]  # (local, peer) socket addresses: who the fd is
    peer: str  # the address group: IPv4 address, or IPv6 /64
    idle_ms: int
    received: int
    tls: bool
    family: int = socket.AF_INET

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
        family=duplicate.family,
    )


def _reread(connection: Accepted) -> Accepted | None:
    """`connection` with its idle time and bytes received read again: one getsockopt on the
    descriptor itself, no duplicate (the socket object is detached, never closed)."""
    sock = socket.socket(connection.family, socket.SOCK_STREAM, 0, fileno=connection.fd)
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _INFO_SIZE)
    except OSError:
        return None
    finally:
        sock.detach()
    if len(info) < _INFO_SIZE:
        return None
    return dataclasses.replace(
        connection,
        idle_ms=struct.unpack_from("I", info, _LAST_DATA_RECV)[0],
        received=struct.unpack_from("Q", info, _BYTES_RECEIVED)[0],
    )


def accepted_connections(ports: dict[int, bool]) -> list[Accepted]:
    """The process's TCP connections accepted on `ports` (port -> has TLS)."""
    return SocketTable(ports).connections(os.listdir("/proc/self/fd"))


class SocketTable:
    """The accepted connections behind the process's descriptors, remembered by what each
    descriptor names (`socket:[inode]`): a descriptor that is not one of them is not looked at
    again while it names the same file, and a used connection is not read again (it cannot
    become unused)."""

    def __init__(self, ports: dict[int, bool]) -> None:
        self._ports = ports
        self._known: dict[int, tuple[str, Accepted | None]] = {}

    def connections(self, names: Iterable[str]) -> list[Accepted]:
        found = []
        known: dict[int, tuple[str, Accepted | None]] = {}
        for name in names:
            fd = int(name)
            try:
                target = os.readlink(f"/proc/self/fd/{name}")
            except OSError:  # closed meanwhile
                continue
            seen = self._known.get(fd)
            if seen is not None and seen[0] == target:
                connection = seen[1]
                if connection is not None and connection.unused:
                    connection = _reread(connection)
            elif target.startswith("socket:"):
                connection = _inspect(fd, self._ports)
            else:
                connection = None
            known[fd] = (target, connection)
            if connection is not None:
                found.append(connection)
        self._known = known
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


def too_fresh_to_judge(connections: list[Accepted], max_connections: int, per_peer: int) -> bool:
    """Whether a limit is reached (a peer over `per_peer`, the server within RESERVE of
    `max_connections`) where an unused connection is too fresh to shed yet: it may be shed on
    a later pass although nothing else changed."""
    idle_enough = min(PEER_IDLE_S, CAP_IDLE_S) * 1000
    fresh = [c for c in connections if c.unused and c.idle_ms < idle_enough]
    if not fresh:
        return False
    if max_connections and len(connections) >= max_connections - RESERVE:
        return True
    if per_peer:
        count: dict[str, int] = defaultdict(int)
        for connection in connections:
            count[connection.peer] += 1
        return any(count[c.peer] > per_peer for c in fresh)
    return False


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


def _descriptor_count() -> int:
    """How many descriptors the process has open: the size Linux (6.2 on) gives the directory,
    one stat where listing it reads every entry; the listing on older kernels, which give 0."""
    return os.stat("/proc/self/fd").st_size or len(os.listdir("/proc/self/fd"))


class ConnectionGuard:
    """Runs `to_shed` over the server's accepted connections every SCAN_S (when something may
    have changed) until `stop`."""

    def __init__(self, ports: dict[int, bool], max_connections: int, per_peer: int) -> None:
        self._ports = ports
        self._max = max_connections
        self._per_peer = per_peer
        self._task: asyncio.Task[None] | None = None
        self._table = SocketTable(ports)
        self._descriptors = -1  # how many there were at the last look at the sockets
        self._look_again = False  # whether it left connections too fresh to judge
        self._next_look = 0.0  # time.monotonic() by which the sockets are looked at anyway
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
        descriptors = _descriptor_count()
        if descriptors < self._quiet_below:
            self._descriptors = -1
            return 0
        now = time.monotonic()
        if descriptors == self._descriptors and not self._look_again and now < self._next_look:
            return 0  # nothing opened or closed, nothing waiting to be judged
        self._descriptors = descriptors
        self._next_look = now + FULL_SCAN_S
        connections = self._table.connections(os.listdir("/proc/self/fd"))
        chosen = to_shed(connections, self._max, self._per_peer)
        self._look_again = too_fresh_to_judge(connections, self._max, self._per_peer)
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
