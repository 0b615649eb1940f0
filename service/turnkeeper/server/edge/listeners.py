"""The sockets the sidecar listens on: TCP addresses and Unix sockets, each held exclusively.

grpc's SO_REUSEPORT is off (edge/server.py), so a second server on a TCP port fails to bind. A
Unix socket path is guarded by an flock on `<path>.lock`, taken before anything else starts.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
from typing import Any

import grpc

from turnkeeper.server.startup import StartupError


class UnixSocketLock:
    """An exclusive flock on "<socket>.lock", held for the server's life.

    The kernel drops it when the process dies, so a leftover socket file whose lock is free
    is stale and safe to remove, while a held lock means a live server owns the path.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock_path = f"{path}.lock"
        try:
            self._fd: int | None = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            raise StartupError(f"the directory of unix socket {path} does not exist") from None
        except OSError as error:
            raise StartupError(
                f"cannot open lock file {self.lock_path}: {error.strerror}"
            ) from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            self.release()
            raise StartupError(
                f"unix socket {path} is in use by another turnkeeper server (pid {owner}; "
                f"it holds {self.lock_path})"
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def remove_stale_socket(self) -> None:
        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise StartupError(f"{self.path} exists and is not a socket; refusing to replace it")
        os.unlink(self.path)

    def release(self) -> None:
        # The lock file itself stays: unlinking it would let a racing server lock a new inode.
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _bind(
    server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None = None
) -> int:
    try:
        port = (
            server.add_secure_port(address, credentials)
            if credentials is not None
            else server.add_insecure_port(address)
        )
    except RuntimeError:
        # grpc says only "Failed to bind to address"; the cause went to its C log.
        raise StartupError(f"cannot listen on {address}: {bind_failure_cause(address)}") from None
    if port == 0:
        raise StartupError(f"cannot listen on {address}: {bind_failure_cause(address)}")
    return port


def bind_failure_cause(address: str) -> str:
    """Why grpc could not bind `address`: the OS error of binding it here the way grpc does.

    When the OS lets the address be bound, grpc failed in its own setup of the port (for a TLS
    port, its credentials), and the message says so.
    """
    if address.startswith("unix:"):
        targets: list[tuple[socket.AddressFamily, Any]] = [
            (socket.AF_UNIX, address.removeprefix("unix:"))
        ]
    else:
        host, _, port = address.rpartition(":")
        try:
            found = socket.getaddrinfo(
                host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        except (socket.gaierror, UnicodeError) as error:
            return f"cannot resolve {host!r}: {error}"
        targets = [(info[0], info[4]) for info in found]
    for family, target in targets:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            if family != socket.AF_UNIX:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(target)
            except OSError as error:
                if error.errno is None:  # e.g. "AF_UNIX path too long"
                    return str(error)
                return f"{error.strerror} ({errno.errorcode.get(error.errno, error.errno)})"
            if family == socket.AF_UNIX:
                os.unlink(target)
    return (
        "the address itself can be bound, so grpc failed to set the port up "
        "(its own reason is the grpc log line just before)"
    )


def bind_tcp(
    server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None
) -> str:
    """Binds HOST:PORT (TLS when `credentials` are given); returns it with the port bound."""
    port = _bind(server, address, credentials)
    return f"{address.rpartition(':')[0]}:{port}"


def bind_unix(server: grpc.aio.Server, lock: UnixSocketLock, permissions: int) -> None:
    """Binds the locked path, replacing a stale socket, with exactly `permissions`."""
    lock.remove_stale_socket()
    # The umask keeps the socket from ever existing with wider permissions; chmod then
    # sets exactly the configured mode.
    previous_umask = os.umask(0o777 & ~permissions)
    try:
        _bind(server, f"unix:{lock.path}")
    finally:
        os.umask(previous_umask)
    os.chmod(lock.path, permissions)
