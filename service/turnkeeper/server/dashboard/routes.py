"""The dashboard's routes on the ops HTTP app: the page, its static assets and the SSE stream."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from turnkeeper.server.feed import EventFeed
from turnkeeper.server.ops import OpsContext

from .stream import stream_feed

STATIC_DIR = Path(__file__).resolve().parent / "static"
INDEX_PATH = "/"
EVENTS_PATH = "/dashboard/events"
STATIC_PREFIX = "/dashboard/static/"

# The page loads only its own scripts and styles: nothing inline, nothing from elsewhere.
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-cache",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def add_dashboard_routes(app: web.Application, feed: EventFeed) -> None:
    """Registers `/`, `/dashboard/events` and `/dashboard/static/` on `app`, serving `feed`."""

    async def index(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers=_PAGE_HEADERS)

    async def events(request: web.Request) -> web.StreamResponse:
        return await stream_feed(request, feed)

    app.router.add_get(INDEX_PATH, index)
    app.router.add_get(EVENTS_PATH, events)
    app.router.add_static(STATIC_PREFIX, STATIC_DIR)


def dashboard_routes(app: web.Application, context: OpsContext) -> None:
    """The dashboard as ops-port routes (an `OpsRoutes`), on the sidecar's own feed."""
    add_dashboard_routes(app, context.feed)
