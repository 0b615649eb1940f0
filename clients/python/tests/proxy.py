"""A loopback TCP proxy whose connections a test can cut, to simulate a network disconnect."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from typing import Self


class CuttableProxy:
    """Forwards 127.0.0.1:<port> to `upstream` ("host:port").

    `cut()` closes every open connection and refuses new ones (accept, then close at once)
    until `restore()`, which is how a client sees a server that went away and came back.
    """

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._refusing = False
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._accept_thread = threading.Thread(target=self._accept, daemon=True)
        self._accept_thread.start()

    def cut(self) -> None:
        with self._lock:
            self._refusing = True
            doomed = list(self._sockets)
            self._sockets.clear()
        for sock in doomed:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._refusing = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)
        self._accept_thread.join(5)
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                _close(downstream)
                continue
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(downstream)
                continue
            with self._lock:
                self._sockets.update((downstream, upstream))
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                thread = threading.Thread(target=_pump, args=(source, sink), daemon=True)
                self._threads.append(thread)
                thread.start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
