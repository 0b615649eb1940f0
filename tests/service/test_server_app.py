"""The Sidecar in-process: binding, exclusivity, ready file, feed health, teardown."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from turnkeeper.server import app
from turnkeeper.server.app import Sidecar, StartupError
from turnkeeper.server.config import ServerConfig
from turnkeeper.server.contract.methods import SERVICE_NAME
from turnkeeper.server.events.feed import FeedStatus
from turnkeeper.server.ops import health as ops_health
from turnkeeper.server.ops.health import EVENTS_HEALTH_NAME
from turnkeeper.v1 import events_pb2, history_service_pb2, trim_pb2

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class ControlledFeed:
    """An EventFeed whose health the test sets; records its lifecycle."""

    def __init__(self) -> None:
        self.state = FeedStatus(healthy=True)
        self.started = False
        self.closed = False

    def publish(self, trimmed: trim_pb2.HistoryTrimmed) -> None:
        pass

    def publish_meter(self, update: events_pb2.MeterUpdate) -> None:
        pass

    def wants_meter_updates(self) -> bool:
        return False

    async def subscribe(
        self, request: history_service_pb2.TrimEventsRequest
    ) -> AsyncIterator[history_service_pb2.TrimEventsResponse]:
        for item in ():
            yield item

    async def oldest_cursor(self) -> str:
        return ""

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    def status(self) -> FeedStatus:
        return self.state


@pytest.fixture
def feed(monkeypatch: pytest.MonkeyPatch) -> ControlledFeed:
    controlled = ControlledFeed()
    monkeypatch.setattr(app, "create_feed", lambda config, calls: controlled)
    monkeypatch.setattr(ops_health, "FEED_POLL_SECONDS", 0.05)
    return controlled


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tk-app-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def health(target: str, service: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        request = health_pb2.HealthCheckRequest(service=service)
        response = await health_pb2_grpc.HealthStub(channel).Check(request, timeout=5)
        return int(response.status)


async def test_binds_tcp_and_unix_writes_ready_file_and_cleans_up(
    feed: ControlledFeed, workdir: Path
) -> None:
    sock, ready = workdir / "tk.sock", workdir / "ready.json"
    sidecar = Sidecar(
        ServerConfig(listen=("127.0.0.1:0",), unix=(str(sock),), ready_file=str(ready))
    )
    await sidecar.start()
    try:
        assert feed.started
        (address,) = sidecar.tcp_addresses
        assert address.startswith("127.0.0.1:") and not address.endswith(":0")
        assert json.loads(ready.read_text()) == {
            "tcp": [address],
            "unix": [str(sock)],
            "http": None,
            "pid": os.getpid(),
        }
        assert await health(address, "") == SERVING
        assert await health(f"unix:{sock}", SERVICE_NAME) == SERVING
    finally:
        await sidecar.stop(grace=1)
    assert feed.closed
    assert not ready.exists() and not sock.exists()
    assert sidecar.health.get(SERVICE_NAME) == NOT_SERVING


async def test_tcp_port_in_use_fails_because_so_reuseport_is_off(feed: ControlledFeed) -> None:
    first = Sidecar(ServerConfig(listen=("127.0.0.1:0",)))
    await first.start()
    try:
        second = Sidecar(ServerConfig(listen=first.tcp_addresses))
        with pytest.raises(StartupError, match=re.escape("cannot listen on 127.0.0.1:")):
            await second.start()
        assert await health(first.tcp_addresses[0], "") == SERVING
    finally:
        await first.stop(grace=1)


async def test_unix_lock_held_fails_before_the_feed_starts(
    feed: ControlledFeed, workdir: Path
) -> None:
    sock = str(workdir / "tk.sock")
    first = Sidecar(ServerConfig(listen=("127.0.0.1:0",), unix=(sock,)))
    await first.start()
    try:
        feed.started = False
        second = Sidecar(ServerConfig(listen=("127.0.0.1:0",), unix=(sock,)))
        with pytest.raises(StartupError, match=re.escape(f"unix socket {sock} is in use")):
            await second.start()
        assert not feed.started
        assert stat.S_ISSOCK(os.lstat(sock).st_mode), "the live server's socket is left alone"
        assert await health(f"unix:{sock}", "") == SERVING
    finally:
        await first.stop(grace=1)
    # Released on stop: the path can be served again.
    again = Sidecar(ServerConfig(listen=("127.0.0.1:0",), unix=(sock,)))
    await again.start()
    await again.stop(grace=1)


async def test_a_non_socket_file_at_the_unix_path_is_not_replaced(
    feed: ControlledFeed, workdir: Path
) -> None:
    path = workdir / "precious.txt"
    path.write_text("keep me")
    sidecar = Sidecar(ServerConfig(listen=("127.0.0.1:0",), unix=(str(path),)))
    with pytest.raises(StartupError, match="is not a socket"):
        await sidecar.start()
    assert path.read_text() == "keep me"
    assert feed.closed, "a failed start closes what it opened"


async def test_missing_socket_directory_is_a_clear_startup_error(feed: ControlledFeed) -> None:
    sidecar = Sidecar(ServerConfig(listen=("127.0.0.1:0",), unix=("/nonexistent-tk/x.sock",)))
    with pytest.raises(StartupError, match="does not exist"):
        await sidecar.start()


async def test_events_health_follows_the_feed_while_trims_stay_serving(
    feed: ControlledFeed,
) -> None:
    sidecar = Sidecar(ServerConfig(listen=("127.0.0.1:0",)))
    await sidecar.start()
    address = sidecar.tcp_addresses[0]
    try:
        assert await health(address, EVENTS_HEALTH_NAME) == SERVING
        feed.state = FeedStatus(healthy=False, detail="redis unreachable")
        async with grpc.aio.insecure_channel(address) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=EVENTS_HEALTH_NAME), timeout=5
            )
            statuses = [(await watch.read()).status]
            if statuses[0] == SERVING:
                statuses.append((await watch.read()).status)
            assert statuses[-1] == NOT_SERVING
            watch.cancel()
        assert await health(address, "") == SERVING
        assert await health(address, SERVICE_NAME) == SERVING
        feed.state = FeedStatus(healthy=True)
        async with grpc.aio.insecure_channel(address) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=EVENTS_HEALTH_NAME), timeout=5
            )
            while (await watch.read()).status != SERVING:
                pass
            watch.cancel()
    finally:
        await sidecar.stop(grace=1)


async def test_unknown_health_service_is_not_found(feed: ControlledFeed) -> None:
    sidecar = Sidecar(ServerConfig(listen=("127.0.0.1:0",)))
    await sidecar.start()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await health(sidecar.tcp_addresses[0], "no.such.Service")
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await sidecar.stop(grace=1)


async def test_unwritable_ready_file_is_a_startup_error_and_releases_everything(
    feed: ControlledFeed, workdir: Path
) -> None:
    sock = str(workdir / "tk.sock")
    config = ServerConfig(
        listen=("127.0.0.1:0",), unix=(sock,), ready_file=str(workdir / "missing" / "r.json")
    )
    with pytest.raises(StartupError, match="cannot write ready file"):
        await Sidecar(config).start()
    assert feed.closed
    again = Sidecar(ServerConfig(listen=("127.0.0.1:0",), unix=(sock,)))
    await again.start()
    await again.stop(grace=1)
