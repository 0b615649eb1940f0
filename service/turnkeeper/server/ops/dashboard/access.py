"""Who may watch the dashboard's stream.

On a loopback ops address, or without token auth (`--auth-tokens`), anyone who reaches the port
may. Otherwise the page asks for a token of the token file that may subscribe to TrimEvents (the
same rule as the gRPC TrimEvents call) and trades it for a browser session: an opaque,
HttpOnly, SameSite=Strict cookie, because EventSource cannot send an Authorization header.
The token itself is never stored in the browser or echoed back.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict

from aiohttp import web

from turnkeeper.server.edge.auth import TokenGrant, grant_for

COOKIE = "turnkeeper_dashboard"
SESSION_SECONDS = 12 * 3600
MAX_SESSIONS = 1000  # the oldest browser session is forgotten first


class DashboardAccess:
    """The login policy and the browser sessions opened under it."""

    def __init__(self, grants: dict[bytes, TokenGrant] | None) -> None:
        self._grants = grants
        self._sessions: OrderedDict[str, float] = OrderedDict()  # id -> expiry (monotonic)

    @property
    def login_required(self) -> bool:
        return self._grants is not None

    def signed_in(self, request: web.Request) -> bool:
        if self._grants is None:
            return True
        session = request.cookies.get(COOKIE, "")
        expiry = self._sessions.get(session)
        if expiry is None:
            return False
        if expiry < time.monotonic():
            del self._sessions[session]
            return False
        return True

    async def status(self, request: web.Request) -> web.Response:
        """GET: whether the page must sign in first."""
        return web.json_response(
            {"loginRequired": self.login_required, "signedIn": self.signed_in(request)}
        )

    async def sign_in(self, request: web.Request) -> web.Response:
        """POST with `Authorization: Bearer <token>`: opens a browser session for the token."""
        if self._grants is None:
            return web.Response(status=204)
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        grant = grant_for(self._grants, token.strip()) if scheme.lower() == "bearer" else None
        if grant is None:
            return web.json_response({"error": "unknown token"}, status=401)
        if not grant.trim_events:
            return web.json_response(
                {"error": "this token may not subscribe to TrimEvents"}, status=403
            )
        session = secrets.token_urlsafe(32)
        self._sessions[session] = time.monotonic() + SESSION_SECONDS
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
            secure=request.secure,
        )
        return response

    def check(self, request: web.Request) -> None:
        """Raises 401 for a stream request without a browser session when one is required."""
        if not self.signed_in(request):
            raise web.HTTPUnauthorized(text="sign in with a token first (POST /dashboard/session)")
