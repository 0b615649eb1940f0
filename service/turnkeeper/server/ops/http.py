"""The ops HTTP port (`--http HOST:PORT`): /metrics, /healthz, /readyz and any added routes.

It runs on aiohttp in the sidecar's own asyncio loop, next to grpc.aio. Other modules add
pages to it with an `OpsRoutes` function, which gets the application and the `OpsContext`
(the health statuses and the event feed) and registers its routes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from grpc_health.v1 import health_pb2
from prometheus_client.exposition import choose_encoder

from turnkeeper.server.events.feed import EventFeed
from turnkeeper.server.telemetry.metrics import REGISTRY

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


def create_ops_app(context: OpsContext, extra_routes: Sequence[OpsRoutes] = ()) -> web.Application:
    """The ops application: metrics and probes, then each of `extra_routes` adds its own."""
    app = web.Application()

    async def metrics(request: web.Request) -> web.Response:
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

    def __init__(self, app: web.Application) -> None:
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self.address: str | None = None

    async def start(self, address: str) -> str:
        """Binds HOST:PORT (IPv6 in brackets, port 0 for any free one); returns what it bound."""
        host, _, port = address.rpartition(":")
        await self._runner.setup()
        site = web.TCPSite(self._runner, host.strip("[]"), int(port), reuse_port=False)
        await site.start()
        bound_port = self._runner.addresses[0][1]
        self.address = f"{host}:{bound_port}"
        return self.address

    async def stop(self) -> None:
        await self._runner.cleanup()
