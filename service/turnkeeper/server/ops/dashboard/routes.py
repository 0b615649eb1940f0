"""The dashboard's routes on the ops HTTP app: the page, its static assets and the SSE stream."""

from __future__ import annotations

import logging
from pathlib import Path

from aiohttp import web

from turnkeeper.server.config import ServerConfig, is_loopback
from turnkeeper.server.edge.auth import load_tokens
from turnkeeper.server.events.feed import EventFeed
from turnkeeper.server.ops.http import OpsContext, OpsRoutes

from .access import DashboardAccess
from .stream import stream_feed

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
INDEX_PATH = "/"
EVENTS_PATH = "/dashboard/events"
SESSION_PATH = "/dashboard/session"
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


def add_dashboard_routes(
    app: web.Application, feed: EventFeed, access: DashboardAccess | None = None
) -> None:
    """Registers `/`, `/dashboard/session`, `/dashboard/events` and `/dashboard/static/` on `app`,
    serving `feed`; `access` decides who may watch (default: anyone who reaches the port)."""
    gate = access or DashboardAccess(None)

    async def index(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers=_PAGE_HEADERS)

    async def events(request: web.Request) -> web.StreamResponse:
        return await stream_feed(request, feed, runtime=gate.check(request))

    app.router.add_get(INDEX_PATH, index)
    app.router.add_get(SESSION_PATH, gate.status)
    app.router.add_post(SESSION_PATH, gate.sign_in)
    app.router.add_get(EVENTS_PATH, events)
    app.router.add_static(STATIC_PREFIX, STATIC_DIR)


def needs_login(config: ServerConfig) -> bool:
    """A page on a loopback ops address needs no login; elsewhere it follows `--auth-tokens`."""
    return (
        config.http is not None and not is_loopback(config.http) and config.auth_tokens is not None
    )


def dashboard_routes_for(config: ServerConfig) -> OpsRoutes:
    """The dashboard as ops-port routes on the sidecar's own feed, with the login policy of
    `needs_login`."""
    if config.http is not None and not is_loopback(config.http) and config.auth_tokens is None:
        log.warning(
            "the dashboard on http://%s/ shows every session's ids, routes and token counts to "
            "anyone who reaches it (set --auth-tokens to require a token)",
            config.http,
        )

    def add(app: web.Application, context: OpsContext) -> None:
        # Read when the ops port starts, after the sidecar itself validated the token file.
        tokens = config.auth_tokens if needs_login(config) else None
        add_dashboard_routes(
            app, context.feed, DashboardAccess(load_tokens(tokens) if tokens else None)
        )

    return add
