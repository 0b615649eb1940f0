"""The live dashboard of the ops HTTP port: a static page at `/` and an SSE stream of the feed.

The page (static/) needs no build step; its charting library is vendored from npm at build time
(`make dashboard-vendor`). The stream (stream.py) serves the same feed object as TrimEvents.
"""

from __future__ import annotations

from .routes import STATIC_DIR, add_dashboard_routes, dashboard_routes_for

__all__ = ["STATIC_DIR", "add_dashboard_routes", "dashboard_routes_for"]
