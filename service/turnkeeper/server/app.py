"""The sidecar process: its start, its serving and its stop, as short named steps.

Each step calls into the room that does the work: `edge/` (listeners, security, the gRPC server
and its interceptors), `api/` (the servicer), `engine/`, `events/` (the feed), `ops/` (health,
the HTTP port, the ready file) and `telemetry/`. ARCHITECTURE.md shows how a call flows through
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Sequence
from typing import cast

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider

from turnkeeper.core.overflow import OverflowClassifier
from turnkeeper.server.api.servicer import HistoryServicer
from turnkeeper.server.config import ServerConfig
from turnkeeper.server.contract.methods import OWN_ACCEPT_METHODS, SERVICE_NAME
from turnkeeper.server.edge.accept_ahead import AcceptAhead
from turnkeeper.server.edge.admission import Admission, AdmissionLimits
from turnkeeper.server.edge.auth import TokenFileError
from turnkeeper.server.edge.connection_guard import ConnectionGuard
from turnkeeper.server.edge.drain import CallsInService
from turnkeeper.server.edge.listeners import UnixSocketLock, bind_tcp, bind_unix
from turnkeeper.server.edge.security import exposure_warnings, security
from turnkeeper.server.edge.server import create_server, load_shedder, server_interceptors
from turnkeeper.server.edge.tls import CertificateError
from turnkeeper.server.edge.wrapper import Edge, HandlerRegistry
from turnkeeper.server.engine import NATIVE, EngineUnavailableError, create_engine
from turnkeeper.server.events import create_feed, describe_events_url
from turnkeeper.server.events.feed import EventFeed
from turnkeeper.server.events.metered import MeteredFeed
from turnkeeper.server.ops.health import SERVING, SERVING_NAMES, HealthService, watch_feed_health
from turnkeeper.server.ops.http import OpsContext, OpsRoutes, OpsServer, ops_server_for
from turnkeeper.server.ops.ready_file import remove_ready_file, write_ready_file
from turnkeeper.server.ops.reflection import enable_reflection
from turnkeeper.server.startup import StartupError
from turnkeeper.server.telemetry import tracing
from turnkeeper.server.telemetry.metrics import ENGINE
from turnkeeper.server.version import server_version

log = logging.getLogger("turnkeeper.server")

DRAIN_SETTLE_SECONDS = 0.1
# However short the grace, the calls already sent get this long to reach their handlers (and be
# served or refused UNAVAILABLE) before grpc would cancel them unseen.
SETTLE_SECONDS = 0.5
# How long the calls a drain ends at its grace's end have to send their UNAVAILABLE.
ANSWER_SECONDS = 1.0

__all__ = ["Sidecar", "StartupError", "admission_limits", "serve"]


def admission_limits(config: ServerConfig) -> AdmissionLimits:
    """What admission control enforces, from the configuration."""
    return AdmissionLimits(
        max_inflight_bytes=config.max_inflight_request_bytes,
        heavy_call_bytes=config.heavy_call_bytes,
        max_heavy_calls=config.max_heavy_calls,
        max_receiving_calls=config.max_receiving_calls,
        receive_wait_seconds=config.receive_wait_seconds,
        heavy_wait_seconds=config.heavy_wait_seconds,
        max_request_bytes=config.max_receive_bytes,
    )


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
        self._tls_ports: dict[int, bool] = {}  # each bound TCP port: whether it has TLS
        self.unix_paths: list[str] = []
        self.http_address: str | None = None
        self._ops_routes = tuple(ops_routes)
        self._ops: OpsServer | None = None
        self._guard: ConnectionGuard | None = None
        self._accept_ahead: AcceptAhead | None = None
        self._locks: list[UnixSocketLock] = []
        self._feed: EventFeed | None = None
        self._server: grpc.aio.Server | None = None
        self._in_service = CallsInService()
        self._servicer: HistoryServicer | None = None
        self._health = HealthService()
        self._poller: asyncio.Task[None] | None = None
        self._stopping = False
        self.admission = Admission(admission_limits(config))

    @property
    def health(self) -> HealthService:
        return self._health

    # --- start ----------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self._teardown(grace=0)
            raise

    async def _start(self) -> None:
        # Locks first: a second server on the same socket fails before touching anything.
        for path in self.config.unix:
            self._locks.append(UnixSocketLock(path))
        remove_ready_file(self.config.ready_file)
        feed = await self._start_feed()
        credentials, auth = security(self.config)
        shedder = load_shedder(self.config, self.admission)
        tracer_provider = self._tracing()
        server = self._server = create_server(self.config, shedder, tracer_provider)
        self._servicer = self._create_servicer(feed)
        edge = Edge(self.admission, auth, shedder)
        self._in_service = edge.in_service
        self._register_services(edge.registry(server, OWN_ACCEPT_METHODS), self._servicer)
        self._listen(server, credentials)
        await server.start()
        self._accept_ahead = AcceptAhead(
            server,
            edge.registered,
            server_interceptors(tracer_provider),
            self.config.accept_ahead,
        )
        self._accept_ahead.start()
        self._guard_connections()
        ENGINE.info({"engine": self._servicer.engine.name})
        await self._start_ops(feed)
        for name in SERVING_NAMES:
            await self._health.set(name, SERVING)
        self._poller = await watch_feed_health(self._health, feed)
        self._announce(self._servicer.engine.name)

    async def _start_feed(self) -> EventFeed:
        # Fan-out gives way to the unary calls the edge's admission counts.
        feed = self._feed = MeteredFeed(create_feed(self.config, self.admission))
        await feed.start()
        return feed

    def _tracing(self) -> TracerProvider | None:
        if self._tracer_provider is None:
            try:
                self._tracer_provider = self._own_provider = tracing.tracer_provider(
                    self.config.tracing
                )
            except tracing.TracingUnavailableError as error:
                raise StartupError(str(error)) from None
        return self._tracer_provider

    def _create_servicer(self, feed: EventFeed) -> HistoryServicer:
        config = self.config
        try:
            engine = create_engine(config.engine)
        except EngineUnavailableError as error:
            raise StartupError(str(error)) from None
        if config.engine is None and engine.name != NATIVE:
            log.warning(
                "the native engine is not built (no cargo at install time?): serving with the "
                "Python engine"
            )
        return HistoryServicer(
            feed=feed,
            max_history_rows=config.max_history_rows,
            max_request_items=config.max_request_items,
            engine=engine,
            workers=config.engine_workers,
            overflow=OverflowClassifier.of(
                config.overflow_phrase, config.provider_overflow_phrases
            ),
        )

    def _register_services(self, registry: HandlerRegistry, servicer: HistoryServicer) -> None:
        """Every service through the edge, which wraps each handler."""
        registry.add_registered_method_handlers(SERVICE_NAME, servicer.method_handlers())
        # The generated function only registers handlers: the two methods a registry has.
        health_pb2_grpc.add_HealthServicer_to_server(self._health, cast(grpc.aio.Server, registry))
        if self.config.reflection:
            enable_reflection(registry, (SERVICE_NAME, health.SERVICE_NAME))

    def _listen(
        self, server: grpc.aio.Server, credentials: list[grpc.ServerCredentials | None]
    ) -> None:
        for warning in exposure_warnings(self.config):
            log.warning("%s", warning)
        for address, port_credentials in zip(self.config.listen, credentials, strict=True):
            self.tcp_addresses.append(bind_tcp(server, address, port_credentials))
            self._tls_ports[int(self.tcp_addresses[-1].rpartition(":")[2])] = (
                port_credentials is not None
            )
        for lock in self._locks:
            bind_unix(server, lock, self.config.unix_permissions)
            self.unix_paths.append(lock.path)

    def _guard_connections(self) -> None:
        """Unused connections cannot hold every slot (edge/connection_guard.py). Each port is
        judged by its own security: a plaintext port's unused connections are told by the bytes
        they sent, which TLS hides."""
        config = self.config
        self._guard = ConnectionGuard(
            dict(self._tls_ports), config.max_connections, config.max_connections_per_peer
        )
        self._guard.start()

    async def _start_ops(self, feed: EventFeed) -> None:
        if self.config.http is None:
            return
        context = OpsContext(health=self._health, feed=feed, ready_service=SERVICE_NAME)
        try:
            self._ops = ops_server_for(self.config, context, self._ops_routes)
        except (CertificateError, TokenFileError) as error:
            raise StartupError(str(error)) from None
        try:
            self.http_address = await self._ops.start(self.config.http)
        except OSError as error:
            raise StartupError(f"cannot listen on {self.config.http} (http): {error}") from None

    def _announce(self, engine: str) -> None:
        """The ready file, then the startup line: both name what was bound."""
        config = self.config
        if config.ready_file:
            try:
                write_ready_file(
                    config.ready_file, self.tcp_addresses, self.unix_paths, self.http_address
                )
            except OSError as error:
                raise StartupError(
                    f"cannot write ready file {config.ready_file}: {error.strerror}"
                ) from None
        log.info(
            "turnkeeper serving version=%s tcp=%s unix=%s http=%s events=%s engine=%s "
            "engine_workers=%d max_receive_bytes=%d max_inflight_request_bytes=%d "
            "max_history_rows=%d pid=%d",
            server_version(),
            ",".join(self.tcp_addresses) or "-",
            ",".join(self.unix_paths) or "-",
            self.http_address or "-",
            describe_events_url(config.events_url),
            engine,
            config.engine_workers,
            config.max_receive_bytes,
            config.max_inflight_request_bytes,
            config.max_history_rows,
            os.getpid(),
        )

    # --- stop -----------------------------------------------------------------------------

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
        if self._guard is not None:
            await self._guard.stop()
            self._guard = None
        await self._stop_feed_health()
        remove_ready_file(self.config.ready_file)
        stopping: asyncio.Future[None] | None = None
        try:
            if self._server is not None:
                stopping = await self._stop_accepting(self._server, grace)
                # The unary calls finish (and publish their events) before the feed closes.
                await self.admission.wait_idle(grace)
                if len(self._in_service):
                    # The grace ran out: the calls still running, or still waiting to be read,
                    # are answered UNAVAILABLE (retry elsewhere) before grpc would cancel them.
                    ended = self._in_service.end_all()
                    log.warning(
                        "drain: the grace period ended; %d calls answered UNAVAILABLE", ended
                    )
                    await self._in_service.wait_empty(ANSWER_SECONDS)
            if self._feed is not None:
                # Streams get what was published, then a heartbeat with their resume cursor.
                await self._feed.close()
        finally:
            self._feed = None
            if stopping is not None:
                await stopping
            if self._accept_ahead is not None:
                await self._accept_ahead.stop()
                self._accept_ahead = None
            self._server = None
            await self._release()

    async def _stop_feed_health(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None

    async def _stop_accepting(self, server: grpc.aio.Server, grace: float) -> asyncio.Future[None]:
        """No new calls from here; running ones continue for up to `grace`."""
        # Calls that arrive from here on get UNAVAILABLE (SHUTTING_DOWN) at once. Those the
        # clients sent before the signal must reach their handlers first: grpc cancels the
        # calls it has received but not handed to us yet.
        self.admission.draining = True
        await self.admission.wait_quiet(DRAIN_SETTLE_SECONDS, max(grace / 2, SETTLE_SECONDS))
        # grpc's own cancellation comes after the drain has answered what was still running.
        return asyncio.ensure_future(server.stop(grace + ANSWER_SECONDS))

    async def _release(self) -> None:
        """The engine pool, then the ops port, then the sockets: whatever was started."""
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
