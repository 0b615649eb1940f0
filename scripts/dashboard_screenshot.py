"""Refreshes docs/dashboard.png: a real sidecar with --http, runtime-like traffic through gRPC
(examples/dashboard_traffic.py), the page in headless Debian chromium.

Run by `make dashboard-screenshot`.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def _load(relative: str) -> ModuleType:
    """The repo's test helpers and example, by path (neither is an installed package)."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(f"turnkeeper_screenshot_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


browser = _load("tests/support/browser.py")
live = _load("tests/support/live.py")
procs = _load("tests/fleet/procs.py")
dashboard_traffic = _load("examples/dashboard_traffic.py")


def main(out: Path) -> None:
    http = f"127.0.0.1:{procs.free_port()}"
    server = live.start_server("--http", http, unix=False)
    try:
        with browser.chromium(width=1440, height=1400) as context:
            page = context.new_page()
            page.goto(f"http://{http}/")
            page.wait_for_selector("#status[data-state=live]", timeout=5000)
            traffic = threading.Thread(
                target=dashboard_traffic.run, args=(server.address, 60, 30.0, 10.0, 11)
            )
            traffic.start()
            traffic.join()
            page.wait_for_timeout(1200)  # the throttled tables and charts catch up
            page.screenshot(path=str(out), full_page=False)
    finally:
        server.stop()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "dashboard.png")
