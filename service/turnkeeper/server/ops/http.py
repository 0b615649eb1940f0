"""The ops HTTP port (`--http HOST:PORT`): /metrics, /healthz, /readyz and any added routes.

It runs on aiohttp in the sidecar's own asyncio loop, next to grpc.aio. Other modules add
pages to it with an `OpsRoutes` function, which gets the application and the `OpsContext`
(the health statuses and the event feed) and registers its routes.

It speaks HTTPS whenever the gRPC port has TLS (the same certificate, re-read when it changes, or
its own `--http-tls-cert`), unless `--http-plaintext`; `--metrics-auth` puts /metrics behind the
bearer tokens of `--auth-tokens`. The probes stay open, as gRPC health does.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from grpc_health.v1 import health_pb2
from prometheus_client.exposition import choose_encoder

from turnkeeper.server.config import ServerConfig, is_loopback
from turnkeeper.server.edge.auth import TokenGrant, grant_of_header, load_tokens
from turnkeeper.server.edge.tls import ReloadingSSLContext
from turnkeeper.server.events.feed import EventFeed
from turnkeeper.server.telemetry.metrics import REGISTRY

log = logging.getLogger("turnkeeper.server")

METRICS_PATH = "/metrics"
HEALTHZ_PATH = "/healthz"
READYZ_PATH = "/readyz"


class HealthStatuses(Protocol):
    """The grpc.health.v1 statuses, as the gRPC health service reports them."""

    def get(self, service: str) -> int | None: ...


@dataclass(frozen=True)
class OpsContext:
    """What routes on the ops port may read: health, the event feed, the readiness service."""

    health: HealthStatuses
    feed: EventFeed
    # The gRPC health service name /readyz mirrors; /healthz mirrors "" (the whole server).
    ready_service: str


OpsRoutes = Callable[[web.Application, OpsContext], None]


def _health_response(context: OpsContext, service: str) -> web.Response:
    """200 while SERVING; 503 otherwise; 404 for a name gRPC health does not know."""
    status = context.health.get(service)
    if status is None:
        return web.json_response(
            {"service": service, "status": "SERVICE_UNKNOWN"}, status=web.HTTPNotFound.status_code
        )
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    code = web.HTTPOk.status_code if status == health_pb2.HealthCheckResponse.SERVING else 503
    return web.json_response({"service": service, "status": name}, status=code)


def create_ops_app(
    context: OpsContext,
    extra_routes: Sequence[OpsRoutes] = (),
    metrics_grants: dict[bytes, TokenGrant] | None = None,
) -> web.Application:
    """The ops application: metrics (behind `metrics_grants`' tokens when given) and probes,
    then each of `extra_routes` adds its own."""
    app = web.Application()

    async def metrics(request: web.Request) -> web.Response:
        if metrics_grants is not None and (
            grant_of_header(metrics_grants, request.headers.get("Authorization", "")) is None
        ):
            return web.json_response(
                {"error": "send 'Authorization: Bearer <token>' with a token of --auth-tokens"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(REGISTRY), headers={"Content-Type": content_type})

    async def healthz(request: web.Request) -> web.Response:
        return _health_response(context, request.query.get("service", ""))

    async def readyz(request: web.Request) -> web.Response:
        return _health_response(context, request.query.get("service", context.ready_service))

    app.router.add_get(METRICS_PATH, metrics)
    app.router.add_get(HEALTHZ_PATH, healthz)
    app.router.add_get(READYZ_PATH, readyz)
    for add_routes in extra_routes:
        add_routes(app, context)
    return app


class OpsServer:
    """Serves an ops application on one TCP address until `stop`."""

    def __init__(self, app: web.Application, ssl_context: ssl.SSLContext | None = None) -> None:
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._ssl = ssl_context
        self.address: str | None = None

    async def start(self, address: str) -> str:
        """Binds HOST:PORT (IPv6 in brackets, port 0 for any free one); returns what it bound."""
        host, _, port = address.rpartition(":")
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, host.strip("[]"), int(port), reuse_port=False, ssl_context=self._ssl
        )
        await site.start()
        bound_port = self._runner.addresses[0][1]
        self.address = f"{host}:{bound_port}"
        return self.address

    async def stop(self) -> None:
        await self._runner.cleanup()


def ops_exposure_warnings(config: ServerConfig) -> list[str]:
    """What an operator must hear when tokens guard gRPC but the ops port is open off loopback."""
    if config.http is None or is_loopback(config.http) or config.auth_tokens is None:
        return []
    warnings = []
    if config.http_tls is None:
        warnings.append(
            f"the ops port on {config.http} is plain HTTP while --auth-tokens guards gRPC: "
            "metrics and probes cross the network in clear and the dashboard refuses to sign "
            "in beyond loopback (set --tls-cert, or --http-tls-cert)"
        )
    if not config.metrics_auth:
        warnings.append(
            f"the ops port on {config.http} answers /metrics to anyone who reaches it while "
            "--auth-tokens guards gRPC (set --metrics-auth, or bind --http to loopback)"
        )
    return warnings


def ops_server_for(
    config: ServerConfig, context: OpsContext, extra_routes: Sequence[OpsRoutes] = ()
) -> OpsServer:
    """The ops server as configured: TLS, /metrics auth, and the exposure warnings logged.
    Raises CertificateError or TokenFileError."""
    for warning in ops_exposure_warnings(config):
        log.warning("%s", warning)
    pair = config.http_tls
    grants = load_tokens(config.auth_tokens) if config.metrics_auth and config.auth_tokens else None
    app = create_ops_app(context, extra_routes, grants)
    return OpsServer(app, ReloadingSSLContext(*pair).context if pair else None)
