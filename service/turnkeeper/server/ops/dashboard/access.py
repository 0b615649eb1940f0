"""Who may watch the dashboard's stream.

On a loopback ops address, or without token auth (`--auth-tokens`), anyone who reaches the port
may. Otherwise the page asks for a token of the token file that may subscribe to TrimEvents (the
same rule as the gRPC TrimEvents call) and trades it for a browser session: an opaque,
Secure, HttpOnly, SameSite=Strict cookie, because EventSource cannot send an Authorization header.
The token is taken over HTTPS only, or from a loopback peer.
The token itself is never stored in the browser or echoed back. A session sees what its token
may read over gRPC: a token bound to a runtime, that runtime's trims and meters only; a
`read_all_runtimes` token, every runtime's.
"""

from __future__ import annotations

import ipaddress
import secrets
import time
from collections import OrderedDict

from aiohttp import web

from turnkeeper.server.edge.auth import TokenGrant, grant_of_header

# What a browser session may read: one runtime's events, or every runtime's (None).
Scope = str | None

COOKIE = "turnkeeper_dashboard"
SESSION_SECONDS = 12 * 3600
MAX_SESSIONS = 1000  # the oldest browser session is forgotten first


def is_loopback_peer(request: web.Request) -> bool:
    try:
        return ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        return False


class DashboardAccess:
    """The login policy and the browser sessions opened under it."""

    def __init__(self, grants: dict[bytes, TokenGrant] | None) -> None:
        self._grants = grants
        # id -> (expiry (monotonic), the token's read scope)
        self._sessions: OrderedDict[str, tuple[float, Scope]] = OrderedDict()

    @property
    def login_required(self) -> bool:
        return self._grants is not None

    def session(self, request: web.Request) -> tuple[bool, Scope]:
        """(signed in, what it may read); without login everything is readable."""
        if self._grants is None:
            return True, None
        session = request.cookies.get(COOKIE, "")
        opened = self._sessions.get(session)
        if opened is None:
            return False, None
        expiry, scope = opened
        if expiry < time.monotonic():
            del self._sessions[session]
            return False, None
        return True, scope

    async def status(self, request: web.Request) -> web.Response:
        """GET: whether the page must sign in first, and which runtime it sees (null: all)."""
        signed_in, scope = self.session(request)
        return web.json_response(
            {"loginRequired": self.login_required, "signedIn": signed_in, "runtime": scope}
        )

    async def sign_in(self, request: web.Request) -> web.Response:
        """POST with `Authorization: Bearer <token>`: opens a browser session for the token."""
        if self._grants is None:
            return web.Response(status=204)
        if not request.secure and not is_loopback_peer(request):
            # The bearer token would cross the network in clear.
            return web.json_response(
                {"error": "sign in over HTTPS: the ops port has no TLS (see --http-tls-cert)"},
                status=403,
            )
        grant = grant_of_header(self._grants, request.headers.get("Authorization", ""))
        if grant is None:
            return web.json_response({"error": "unknown token"}, status=401)
        if not grant.trim_events:
            return web.json_response(
                {"error": "this token may not subscribe to TrimEvents"}, status=403
            )
        session = secrets.token_urlsafe(32)
        self._sessions[session] = (time.monotonic() + SESSION_SECONDS, grant.events_runtime)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        response = web.Response(status=204)
        response.set_cookie(
            COOKIE,
            session,
            max_age=SESSION_SECONDS,
            path="/",
            httponly=True,
            samesite="Strict",
            # Browsers treat http://localhost and 127.0.0.1 as secure origins: loopback works too.
            secure=True,
        )
        return response

    def check(self, request: web.Request) -> Scope:
        """The scope of the request's session; raises 401 for a stream request without a
        browser session when one is required."""
        signed_in, scope = self.session(request)
        if not signed_in:
            raise web.HTTPUnauthorized(text="sign in with a token first (POST /dashboard/session)")
        return scope
