"""An overloaded turnkeeper server for the clients' retry tests (with_server.py --overloaded).

The server receives one request at a time and refuses at once any call over that
(`--max-receiving-calls 1 --receive-wait-seconds 0`); `hold` keeps that one slot taken by a call
whose request never arrives, so every other unary call gets RESOURCE_EXHAUSTED (reason OVERLOADED)
with a RetryInfo, as a sidecar under load answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import grpc
from live import ServerStartError  # type: ignore[import-not-found]

SERVER_FLAGS = ("--max-receiving-calls", "1", "--receive-wait-seconds", "0")
_METHOD = "/turnkeeper.v1.HistoryService/EstimateTokens"


def hold(address: str, timeout: float = 30.0) -> Callable[[], None]:
    """Takes the server's one receiving slot until the returned function is called; returns once
    a probe call is refused while the holding call is still open.

    The server may take calls in any order (it keeps several calls of a method requested from
    grpc core at once), so a probe can reach the slot before the holding call does, which is then
    refused: the holding call is sent again until it is the one holding the slot."""
    channel = grpc.insecure_channel(address, options=[("grpc.so_reuseport", 0)])
    released = threading.Event()

    def never() -> Iterator[bytes]:
        # The call's headers go out; its request message never does.
        released.wait()
        yield from ()

    holder: grpc.StreamUnaryMultiCallable[bytes, bytes] = channel.stream_unary(_METHOD)
    probe: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(_METHOD)
    held: grpc.Future[bytes] = holder.future(never())  # type: ignore[arg-type]

    def release() -> None:
        released.set()
        held.cancel()
        channel.close()

    end = time.monotonic() + timeout
    while True:
        try:
            probe(b"", timeout=5)
        except grpc.RpcError as error:
            refused = (
                isinstance(error, grpc.Call) and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            )
            if refused and not held.done():
                return release
        if held.done():
            held = holder.future(never())  # type: ignore[arg-type]
        if time.monotonic() > end:
            release()
            raise ServerStartError(f"the server at {address} does not refuse calls")
        time.sleep(0.05)
