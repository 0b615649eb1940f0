"""tests/support/with_server.py, the harness every client's tests run under."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WITH_SERVER = REPO / "tests" / "support" / "with_server.py"

PROBE = textwrap.dedent(
    """
    import os, sys, grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    unix = os.environ["TURNKEEPER_UNIX"]
    assert not unix.startswith("unix:"), unix
    for target in (os.environ["TURNKEEPER_ADDRESS"], "unix:" + unix):
        with grpc.insecure_channel(target) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="turnkeeper.v1.HistoryService"), timeout=5
            ).status
            assert status == health_pb2.HealthCheckResponse.SERVING, (target, status)
    print(os.environ["TURNKEEPER_CONFORMANCE_DIR"])
    sys.exit(int(sys.argv[1]))
    """
)


def run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_exports_a_reachable_server_and_propagates_the_exit_code() -> None:
    result = run(WITH_SERVER, "--", sys.executable, "-c", PROBE, "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(REPO / "tests" / "conformance" / "vectors")
    failed = run(WITH_SERVER, "--", sys.executable, "-c", PROBE, "3")
    assert failed.returncode == 3, failed.stderr


def test_passes_server_flags_and_reports_a_server_that_cannot_start() -> None:
    result = run(WITH_SERVER, "--ring-size", "0", "--", "true")
    assert result.returncode == 1
    assert "exited with code 2" in result.stderr
    assert "--ring-size: Input should be greater than or equal to 1" in result.stderr


def test_usage_without_a_command() -> None:
    result = run(WITH_SERVER, "true")
    assert result.returncode == 2
    assert "usage: with_server.py" in result.stderr


def test_works_from_a_clone_elsewhere(tmp_path: Path) -> None:
    clone = tmp_path / "elsewhere"
    shutil.copytree(REPO / "service", clone / "service", ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copytree(REPO / "tests" / "support", clone / "tests" / "support")
    result = run(
        clone / "tests" / "support" / "with_server.py", "--", sys.executable, "-c", PROBE, "0"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(clone / "tests" / "conformance" / "vectors")
