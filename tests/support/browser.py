"""Debian's chromium driven by Playwright, headless, with a fresh profile (its own browser
download is unreachable here). Used by tests/browser and scripts/dashboard_screenshot.py."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

from playwright.sync_api import BrowserContext, sync_playwright

CHROMIUM = os.environ.get("TURNKEEPER_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class ChromiumMissingError(RuntimeError):
    """The Debian package is not installed."""


@contextlib.contextmanager
def chromium(width: int = 1440, height: int = 1000) -> Iterator[BrowserContext]:
    if not os.access(CHROMIUM, os.X_OK):
        raise ChromiumMissingError(
            f"{CHROMIUM} is missing: run scripts/system-deps.sh (Debian package chromium)"
        )
    args = list(FLAGS)
    if os.geteuid() == 0:
        args.append("--no-sandbox")  # chromium refuses to start as root with its sandbox
    with tempfile.TemporaryDirectory(prefix="tk-chromium-") as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=args,
            headless=True,
            viewport={"width": width, "height": height},
        )
        try:
            yield context
        finally:
            context.close()
