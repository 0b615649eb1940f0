"""Live-server fixtures.

Under `tests/support/with_server.py` (what `make test` uses) the server is the one it exported in
TURNKEEPER_ADDRESS / TURNKEEPER_UNIX. Run bare (`pytest`), a session server is started with the
repo's own test support, so the suite never needs a hand-started server.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from turnkeeper_client import AsyncTurnkeeperClient, TurnkeeperClient

REPO = Path(__file__).resolve().parents[3]
SUPPORT = REPO / "tests" / "support"


@dataclass(frozen=True)
class Endpoints:
    address: str
    unix_path: str


@pytest.fixture(scope="session")
def endpoints() -> Iterator[Endpoints]:
    address = os.environ.get("TURNKEEPER_ADDRESS")
    unix_path = os.environ.get("TURNKEEPER_UNIX")
    if address and unix_path:
        yield Endpoints(address, unix_path)
        return
    sys.path.insert(0, str(SUPPORT))
    from live import start_server  # type: ignore[import-not-found]

    server = start_server()
    try:
        yield Endpoints(server.address, server.unix_path)
    finally:
        server.stop()


@pytest.fixture
def client(endpoints: Endpoints) -> Iterator[TurnkeeperClient]:
    with TurnkeeperClient.connect(endpoints.address) as tk:
        yield tk


@pytest.fixture
def unix_client(endpoints: Endpoints) -> Iterator[TurnkeeperClient]:
    with TurnkeeperClient.connect(unix_path=endpoints.unix_path) as tk:
        yield tk


@pytest.fixture
async def aclient(endpoints: Endpoints) -> AsyncIterator[AsyncTurnkeeperClient]:
    async with AsyncTurnkeeperClient.connect(endpoints.address) as tk:
        yield tk


@pytest.fixture
async def unix_aclient(endpoints: Endpoints) -> AsyncIterator[AsyncTurnkeeperClient]:
    async with AsyncTurnkeeperClient.connect(unix_path=endpoints.unix_path) as tk:
        yield tk
