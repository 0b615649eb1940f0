"""grpc.health.v1 for the sidecar: the servicer, and the feed's own health name kept current.

`""` and the HistoryService name turn SERVING once the sidecar serves and NOT_SERVING at
shutdown. The TrimEvents feed has a name of its own, so a degraded event backend never takes the
trims (which do not depend on it) out of rotation. The ops HTTP port mirrors these statuses.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TypeAlias

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from turnkeeper.server.contract.methods import SERVICE_NAME
from turnkeeper.server.events.feed import EventFeed, FeedStatus
from turnkeeper.server.telemetry.metrics import observe_feed_health

log = logging.getLogger("turnkeeper.server")

# Health of the TrimEvents feed alone: NOT_SERVING while the backend is degraded, so that
# trims (which never depend on the feed) stay SERVING under "" and SERVICE_NAME.
EVENTS_HEALTH_NAME = f"{SERVICE_NAME}/events"
# The names that are SERVING while the sidecar serves: the whole server and HistoryService.
SERVING_NAMES = ("", SERVICE_NAME)
FEED_POLL_SECONDS = 1.0

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

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
                self._status[service] = NOT_SERVING
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


async def _publish_feed_status(
    health: HealthService, status: FeedStatus, previous: FeedStatus | None
) -> None:
    await health.set(EVENTS_HEALTH_NAME, SERVING if status.healthy else NOT_SERVING)
    observe_feed_health(status.healthy)
    if previous is None or status.healthy != previous.healthy:
        if status.healthy:
            log.info("event feed healthy")
        else:
            log.warning("event feed degraded: %s", status.detail or "no detail")


async def _watch_feed(health: HealthService, feed: EventFeed, previous: FeedStatus) -> None:
    while True:
        await asyncio.sleep(FEED_POLL_SECONDS)
        try:
            status = feed.status()
        except Exception as error:  # a broken status() must not end health reporting
            status = FeedStatus(healthy=False, detail=f"status check failed: {error!r}")
        if status != previous:
            await _publish_feed_status(health, status, previous)
            previous = status


async def watch_feed_health(health: HealthService, feed: EventFeed) -> asyncio.Task[None]:
    """Publishes the feed's health under EVENTS_HEALTH_NAME now, and returns the task that
    publishes each change (polled every FEED_POLL_SECONDS) until it is cancelled."""
    initial = feed.status()
    await _publish_feed_status(health, initial, None)
    return asyncio.create_task(_watch_feed(health, feed, initial), name="feed-health")
