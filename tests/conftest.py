"""Shared fixtures: a real turnkeeper server subprocess (see tests/support/live.py)."""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _load(relative: str, name: str) -> types.ModuleType:
    # Loaded by path so it works whether or not tests/ is a package.
    path = Path(__file__).resolve().parent / relative
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


live = _load("support/live.py", "turnkeeper_tests_live")
procs = _load("fleet/procs.py", "turnkeeper_tests_procs")
browsers = _load("support/browser.py", "turnkeeper_tests_browser")
certs = _load("support/certs.py", "turnkeeper_tests_certs")
LiveServer = live.LiveServer
start_server = live.start_server


@pytest.fixture
def credentials(tmp_path: Path) -> object:
    """A fresh CA, server and client certificates and a token file (support/certs.py)."""
    return certs.write_credentials(tmp_path / "credentials")


@pytest.fixture(scope="session")
def live_server() -> Iterator[LiveServer]:
    """One server for the whole session: `.address` ("127.0.0.1:PORT"), `.unix_path`,
    `.unix_target` ("unix:/path"), `.log_text()`. Do not stop it; use `server_factory`
    for servers with custom flags or ones a test shuts down."""
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def python_engine_server() -> Iterator[LiveServer]:
    """Like `live_server`, on the Python engine (`live_server` runs the default: native when
    built). Suites that pin behaviour run against both (issue 8)."""
    server = start_server("--engine", "python")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["native", "python"])
def engine_server(request: pytest.FixtureRequest) -> LiveServer:
    """The session server of each engine in turn: a test using it runs once per engine."""
    if request.param == "python":
        server: LiveServer = request.getfixturevalue("python_engine_server")
    else:
        server = request.getfixturevalue("live_server")
    return server


@pytest.fixture
def server_factory() -> Iterator[Callable[..., LiveServer]]:
    """`server_factory("--ring-size", "5", unix=False)` starts an extra server with custom
    flags (same keyword arguments as support/live.py start_server); each is stopped after the
    test unless the test stopped it first."""
    started: list[LiveServer] = []

    def start(*args: str, **kwargs: object) -> LiveServer:
        server = start_server(*args, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[object]:
    """A throwaway redis-server on a free loopback port (`.url`), stopped after the test."""
    server = procs.start_redis(tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def http() -> str:
    """A free loopback address for a sidecar's ops port (`--http`), stable across its restarts."""
    return f"127.0.0.1:{procs.free_port()}"


@pytest.fixture
def browser() -> Iterator[object]:
    """Headless Debian chromium under Playwright (support/browser.py), closed after the test."""
    try:
        with browsers.chromium() as context:
            yield context
    except browsers.ChromiumMissingError as error:
        pytest.fail(str(error))
