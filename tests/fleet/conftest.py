"""The fleet tests: several sidecars sharing one Redis, behind nginx."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fleet: several sidecar processes, redis-server and nginx (tests/fleet)"
    )
