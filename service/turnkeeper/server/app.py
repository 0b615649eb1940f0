"""The sidecar process: binds, serves HistoryService + health + reflection, stops cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import stat
import tempfile
from collections.abc import Sequence
from typing import TypeAlias
from urllib.parse import urlsplit

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.sdk.trace import TracerProvider

from turnkeeper.core.overflow import OverflowClassifier
from turnkeeper.server.api.servicer import SERVICE_NAME, HistoryServicer
from turnkeeper.server.config import ServerConfig, is_loopback
from turnkeeper.server.edge.access_log import AccessLogInterceptor
from turnkeeper.server.edge.admission import Admission, AdmissionInterceptor, AdmissionLimits
from turnkeeper.server.edge.auth import TokenAuthInterceptor, TokenFileError, load_tokens
from turnkeeper.server.edge.tls import CertificateError, server_credentials
from turnkeeper.server.engine import NATIVE, EngineUnavailableError, create_engine
from turnkeeper.server.events import create_feed
from turnkeeper.server.events.feed import EventFeed, FeedStatus
from turnkeeper.server.ops.http import OpsContext, OpsRoutes, OpsServer, create_ops_app
from turnkeeper.server.telemetry import tracing
from turnkeeper.server.telemetry.metrics import ENGINE, MeteredFeed, observe_feed_status
from turnkeeper.server.version import server_version

log = logging.getLogger("turnkeeper.server")

# Health of the TrimEvents feed alone: NOT_SERVING while the backend is degraded, so that
# trims (which never depend on the feed) stay SERVING under "" and SERVICE_NAME.
EVENTS_HEALTH_NAME = f"{SERVICE_NAME}/events"
FEED_POLL_SECONDS = 1.0
DRAIN_SETTLE_SECONDS = 0.1

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


# The health stubs type ServingStatus values as plain ints.
_Status: TypeAlias = int


class HealthService(health_pb2_grpc.HealthServicer):
    """grpc.health.v1 whose Watch streams end once shutdown's NOT_SERVING is sent.

    The stock aio servicer keeps Watch streams open forever, so every watcher would hold
    server.stop() for the whole grace period.
    """

    def __init__(self) -> None:
        self._status: dict[str, _Status] = {}
        self._changed = asyncio.Condition()
        self._shutting_down = False

    def get(self, service: str) -> _Status | None:
        return self._status.get(service)

    async def set(self, service: str, status: _Status) -> None:
        """Ignored after enter_graceful_shutdown: nothing may report SERVING again."""
        async with self._changed:
            if self._shutting_down:
                return
            self._status[service] = status
            self._changed.notify_all()

    async def enter_graceful_shutdown(self) -> None:
        async with self._changed:
            self._shutting_down = True
            for service in self._status:
                self._status[service] = _NOT_SERVING
            self._changed.notify_all()

    async def Check(  # noqa: N802 (gRPC method name)
        self,
        request: health_pb2.HealthCheckRequest,
        context: grpc.aio.ServicerContext[
            health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse
        ],
    ) -> health_pb2.HealthCheckResponse:
        status = self._status.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(  # noqa: N802 (gRPC method name)
        self,
        request: health_pb2.HealthCheckRequest,
        context: grpc.aio.ServicerContext[
            health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse
        ],
    ) -> None:
        unknown = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        last: _Status | None = None
        while True:
            async with self._changed:
                # Intermediate statuses may be skipped: watchers want the latest one.
                while (
                    current := self._status.get(request.service, unknown)
                ) == last and not self._shutting_down:
                    await self._changed.wait()
                ending = self._shutting_down
            # Written outside the lock so a slow watcher cannot stall status updates.
            if current != last:
                await context.write(health_pb2.HealthCheckResponse(status=current))
                last = current
            if ending:
                return


class StartupError(Exception):
    """The sidecar cannot start; the message tells the operator why."""


class _UnixSocketLock:
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


def _write_ready_file(path: str, tcp: list[str], unix: list[str], http: str | None) -> None:
    """Atomic: a reader sees either no file or the whole JSON document."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".ready-", dir=directory)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump({"tcp": tcp, "unix": unix, "http": http, "pid": os.getpid()}, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _server_options(config: ServerConfig) -> list[tuple[str, int]]:
    """gRPC channel arguments: message sizes, stream and connection limits, keepalive policy."""
    options = [
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", config.max_receive_bytes),
        ("grpc.max_send_message_length", config.max_send_bytes),
        ("grpc.max_concurrent_streams", config.max_concurrent_streams),
        # No flow-control window growth: a request the server has not started to read (admission
        # refused it, or it waits) stays in the client instead of piling up in this process.
        ("grpc.http2.bdp_probe", 0),
        # A client may ping (keepalive) at most every min_client_ping_seconds, with or without
        # calls; the second ping too early ends its connection (GOAWAY "too_many_pings").
        (
            "grpc.http2.min_ping_interval_without_data_ms",
            int(config.min_client_ping_seconds * 1000),
        ),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.keepalive_permit_without_calls", 1),
        # The server pings quiet peers so that a vanished one (host down, network cut) is
        # noticed and its streams end.
        ("grpc.keepalive_time_ms", int(config.keepalive_seconds * 1000)),
        ("grpc.keepalive_timeout_ms", int(config.keepalive_timeout_seconds * 1000)),
        # A connection that never completes the HTTP/2 handshake is closed after this.
        ("grpc.server_handshake_timeout_ms", int(config.handshake_timeout_seconds * 1000)),
    ]
    if config.max_connections:
        options.append(("grpc.max_allowed_incoming_connections", config.max_connections))
    if config.max_connection_idle_seconds:
        options.append(
            ("grpc.max_connection_idle_ms", int(config.max_connection_idle_seconds * 1000))
        )
    if config.max_connection_age_seconds:
        options.append(
            ("grpc.max_connection_age_ms", int(config.max_connection_age_seconds * 1000))
        )
        options.append(("grpc.max_connection_age_grace_ms", int(config.grace_seconds * 1000)))
    return options


def _describe_events(url: str | None) -> str:
    if url is None:
        return "memory"
    parts = urlsplit(url)
    # Never log credentials embedded in the URL.
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _security(
    config: ServerConfig,
) -> tuple[grpc.ServerCredentials | None, list[grpc.aio.ServerInterceptor]]:
    """TLS credentials for the TCP listeners and the token interceptor, as configured."""
    credentials = None
    if config.tls_cert is not None and config.tls_key is not None:
        try:
            credentials = server_credentials(config.tls_cert, config.tls_key, config.tls_client_ca)
        except CertificateError as error:
            raise StartupError(str(error)) from None
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if config.auth_tokens is not None:
        try:
            interceptors.append(TokenAuthInterceptor(load_tokens(config.auth_tokens)))
        except TokenFileError as error:
            raise StartupError(str(error)) from None
    return credentials, interceptors


def exposure_warnings(config: ServerConfig) -> list[str]:
    """What an operator must hear about TCP listeners other machines can reach."""
    exposed = [address for address in config.listen if not is_loopback(address)]
    if not exposed:
        return []
    where = ", ".join(exposed)
    warnings = []
    if config.tls_cert is None:
        warnings.append(
            f"listening on {where} without TLS: histories cross the network in plaintext "
            "(set --tls-cert and --tls-key)"
        )
    if config.auth_tokens is None:
        warnings.append(
            f"listening on {where} without authentication: anyone who reaches the port can "
            "call every RPC (set --auth-tokens)"
        )
    return warnings


class Sidecar:
    """One running turnkeeper server; `start` then `stop`. Reused by tests in-process.

    `ops_routes` add pages to the ops HTTP port (served when `config.http` is set).
    """

    def __init__(
        self,
        config: ServerConfig,
        ops_routes: Sequence[OpsRoutes] = (),
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.config = config
        # Given by tests and embedders; otherwise built from config.tracing at start.
        self._tracer_provider = tracer_provider
        self._own_provider: TracerProvider | None = None
        self.tcp_addresses: list[str] = []
        self.unix_paths: list[str] = []
        self.http_address: str | None = None
        self._ops_routes = tuple(ops_routes)
        self._ops: OpsServer | None = None
        self._locks: list[_UnixSocketLock] = []
        self._feed: EventFeed | None = None
        self._server: grpc.aio.Server | None = None
        self._servicer: HistoryServicer | None = None
        self._health = HealthService()
        self._poller: asyncio.Task[None] | None = None
        self._stopping = False
        self.admission = Admission(
            AdmissionLimits(
                max_inflight_bytes=config.max_inflight_request_bytes,
                heavy_call_bytes=config.heavy_call_bytes,
                max_heavy_calls=config.max_heavy_calls,
                max_receiving_calls=config.max_receiving_calls,
                receive_wait_seconds=config.receive_wait_seconds,
            )
        )

    @property
    def health(self) -> HealthService:
        return self._health

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self._teardown(grace=0)
            raise

    async def _start(self) -> None:
        config = self.config
        # Locks first: a second server on the same socket fails before touching anything.
        for path in config.unix:
            self._locks.append(_UnixSocketLock(path))
        if config.ready_file:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(config.ready_file)

        feed = MeteredFeed(create_feed(config))
        self._feed = feed
        await feed.start()

        credentials, auth = _security(config)
        if self._tracer_provider is None:
            try:
                self._tracer_provider = self._own_provider = tracing.tracer_provider(config.tracing)
            except tracing.TracingUnavailableError as error:
                raise StartupError(str(error)) from None
        traced = (
            [tracing.server_interceptor(self._tracer_provider)] if self._tracer_provider else []
        )
        server = grpc.aio.server(
            # The span opens first, so the access log and every line below carry its trace id;
            # the access log is next, so refused calls are logged with their status;
            # authentication comes before admission, so strangers use none of its budget.
            interceptors=[
                *traced,
                AccessLogInterceptor(),
                *auth,
                AdmissionInterceptor(self.admission),
            ],
            options=_server_options(config),
        )
        self._server = server
        try:
            engine = create_engine(config.engine)
        except EngineUnavailableError as error:
            raise StartupError(str(error)) from None
        if config.engine is None and engine.name != NATIVE:
            log.warning(
                "the native engine is not built (no cargo at install time?): serving with the "
                "Python engine"
            )
        self._servicer = HistoryServicer(
            feed=feed,
            max_history_rows=config.max_history_rows,
            engine=engine,
            workers=config.engine_workers,
            overflow=OverflowClassifier.of(
                config.overflow_phrase, config.provider_overflow_phrases
            ),
        )
        server.add_generic_rpc_handlers((self._servicer.generic_handler(),))
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        if config.reflection:
            reflection.enable_server_reflection(
                (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
            )

        for warning in exposure_warnings(config):
            log.warning("%s", warning)
        for address in config.listen:
            port = self._bind(server, address, credentials)
            self.tcp_addresses.append(f"{address.rpartition(':')[0]}:{port}")
        for lock in self._locks:
            lock.remove_stale_socket()
            # The umask keeps the socket from ever existing with wider permissions; chmod then
            # sets exactly the configured mode.
            previous_umask = os.umask(0o777 & ~config.unix_permissions)
            try:
                self._bind(server, f"unix:{lock.path}")
            finally:
                os.umask(previous_umask)
            os.chmod(lock.path, config.unix_permissions)
            self.unix_paths.append(lock.path)

        await server.start()
        ENGINE.info({"engine": engine.name})
        if config.http is not None:
            self._ops = OpsServer(
                create_ops_app(
                    OpsContext(health=self._health, feed=feed, ready_service=SERVICE_NAME),
                    self._ops_routes,
                )
            )
            try:
                self.http_address = await self._ops.start(config.http)
            except OSError as error:
                raise StartupError(f"cannot listen on {config.http} (http): {error}") from None
        for name in ("", SERVICE_NAME):
            await self._health.set(name, _SERVING)
        initial = feed.status()
        await self._publish_feed_status(initial, None)
        self._poller = asyncio.create_task(self._watch_feed(feed, initial), name="feed-health")

        if config.ready_file:
            try:
                _write_ready_file(
                    config.ready_file, self.tcp_addresses, self.unix_paths, self.http_address
                )
            except OSError as error:
                raise StartupError(
                    f"cannot write ready file {config.ready_file}: {error.strerror}"
                ) from None
        log.info(
            "turnkeeper serving version=%s tcp=%s unix=%s http=%s events=%s engine=%s "
            "engine_workers=%d max_receive_bytes=%d max_history_rows=%d pid=%d",
            server_version(),
            ",".join(self.tcp_addresses) or "-",
            ",".join(self.unix_paths) or "-",
            self.http_address or "-",
            _describe_events(config.events_url),
            self._servicer.engine.name,
            config.engine_workers,
            config.max_receive_bytes,
            config.max_history_rows,
            os.getpid(),
        )

    @staticmethod
    def _bind(
        server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None = None
    ) -> int:
        try:
            port = (
                server.add_secure_port(address, credentials)
                if credentials is not None
                else server.add_insecure_port(address)
            )
        except RuntimeError as error:
            raise StartupError(f"cannot listen on {address}: {error}") from None
        if port == 0:
            raise StartupError(f"cannot listen on {address}")
        return port

    async def _publish_feed_status(self, status: FeedStatus, previous: FeedStatus | None) -> None:
        await self._health.set(EVENTS_HEALTH_NAME, _SERVING if status.healthy else _NOT_SERVING)
        observe_feed_status(status)
        if previous is None or status.healthy != previous.healthy:
            if status.healthy:
                log.info("event feed healthy")
            else:
                log.warning("event feed degraded: %s", status.detail or "no detail")

    async def _watch_feed(self, feed: EventFeed, previous: FeedStatus) -> None:
        while True:
            await asyncio.sleep(FEED_POLL_SECONDS)
            try:
                status = feed.status()
            except Exception as error:  # a broken status() must not end health reporting
                status = FeedStatus(healthy=False, detail=f"status check failed: {error!r}")
            if status != previous:
                await self._publish_feed_status(status, previous)
                previous = status

    async def stop(self, grace: float | None = None) -> None:
        """Health NOT_SERVING, end event streams, drain in-flight RPCs for the grace period."""
        if self._stopping:
            return
        self._stopping = True
        await self._teardown(self.config.grace_seconds if grace is None else grace)

    async def _teardown(self, grace: float) -> None:
        try:
            await self._teardown_serving(grace)
        finally:
            if self._own_provider is not None:
                # Exports the spans still batched (bounded by the exporter's own timeout).
                self._own_provider.shutdown()
                self._own_provider = None

    async def _teardown_serving(self, grace: float) -> None:
        await self._health.enter_graceful_shutdown()
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        if self.config.ready_file:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.config.ready_file)
        stopping: asyncio.Future[None] | None = None
        try:
            if self._server is not None:
                # Calls the clients sent before the signal must reach their handlers first:
                # grpc cancels the calls it has received but not handed to us yet.
                await self.admission.wait_quiet(DRAIN_SETTLE_SECONDS, grace / 2)
                # No new calls from here; running ones continue for up to `grace`.
                stopping = asyncio.ensure_future(self._server.stop(grace))
                # The unary calls finish (and publish their events) before the feed closes.
                await self.admission.wait_idle(grace)
            if self._feed is not None:
                # Streams get what was published, then a heartbeat with their resume cursor.
                await self._feed.close()
        finally:
            self._feed = None
            if stopping is not None:
                await stopping
            self._server = None
            if self._servicer is not None:
                self._servicer.close()
                self._servicer = None
            # After the drain, so that probes see NOT_SERVING for all of it.
            if self._ops is not None:
                await self._ops.stop()
                self._ops = None
                self.http_address = None
            for lock in self._locks:
                if lock.path in self.unix_paths:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(lock.path)
                lock.release()
            self._locks.clear()
            self.unix_paths.clear()

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()


async def serve(config: ServerConfig, ops_routes: Sequence[OpsRoutes] = ()) -> None:
    """Runs until SIGTERM or SIGINT, then shuts down gracefully. Raises StartupError."""
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop_requested.set)
    sidecar = Sidecar(config, ops_routes)
    try:
        await sidecar.start()
        await stop_requested.wait()
        log.info("shutting down: draining for up to %.1f s", config.grace_seconds)
        await sidecar.stop()
        log.info("stopped")
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
