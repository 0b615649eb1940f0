"""Start and stop a real turnkeeper server subprocess, as docs/conventions.md describes.

Used by tests/support/with_server.py and by the pytest fixtures in tests/conftest.py.
Standard library only, so that it runs under any Python that can run the server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERVICE_DIR = REPO / "service"
CONFORMANCE_DIR = REPO / "tests" / "conformance" / "vectors"
START_TIMEOUT_SECONDS = float(os.environ.get("TURNKEEPER_START_TIMEOUT", "30"))


def server_python() -> str:
    """The repo's venv interpreter when present (a clone elsewhere has its own), else ours."""
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _short_tmpdir() -> str:
    # Unix socket paths are limited to ~104 bytes; $TMPDIR can be long (macOS), /tmp is not.
    base = "/tmp" if os.path.isdir("/tmp") and os.access("/tmp", os.W_OK) else None
    return tempfile.mkdtemp(prefix="tk-", dir=base)


class ServerStartError(RuntimeError):
    """The server exited or did not become ready; the message includes its log."""


@dataclass
class LiveServer:
    """A running server subprocess. `address` is "127.0.0.1:PORT"; `unix_path` a filesystem path."""

    process: subprocess.Popen[bytes]
    address: str
    unix_path: str | None
    tcp: list[str]
    unix: list[str]
    workdir: Path
    log_path: Path
    http: str | None = None  # the ops HTTP address when started with --http
    owns_workdir: bool = True
    args: list[str] = field(default_factory=list)
    final_log: str | None = None  # kept by stop(), which removes the work directory

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def unix_target(self) -> str | None:
        """The gRPC target for the Unix socket ("unix:/path")."""
        return f"unix:{self.unix_path}" if self.unix_path else None

    def log_text(self) -> str:
        """The server's stdout+stderr so far (all of it once stopped)."""
        if self.final_log is not None:
            return self.final_log
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def terminate(self) -> None:
        """Sends SIGTERM (graceful shutdown) without waiting."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait up to `timeout`, SIGKILL if still running; returns the exit code."""
        self.terminate()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if self.final_log is None:
            self.final_log = self.log_text()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return code


def server_command(*args: str) -> list[str]:
    return [server_python(), "-m", "turnkeeper.server", *args]


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Our environment without TURNKEEPER_* settings, so only the given flags configure it.

    (with_server.py exports TURNKEEPER_UNIX for clients; a server inheriting it would try to bind
    the same socket.)
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(SERVICE_DIR), os.environ.get("PYTHONPATH", "")) if p
    )
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def start_server(
    *extra_args: str,
    unix: bool = True,
    workdir: str | os.PathLike[str] | None = None,
    unix_path: str | None = None,
    timeout: float = START_TIMEOUT_SECONDS,
    env: dict[str, str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> LiveServer:
    """Starts `python -m turnkeeper.server --listen 127.0.0.1:0 [--unix ...] --ready-file ...`.

    Waits for the ready file; raises ServerStartError (with the server's log) when the process
    exits first or the timeout passes. `extra_args` are appended, e.g. ("--ring-size", "5").
    `preexec` runs in the child before the server starts (e.g. to join a cgroup).
    """
    owns = workdir is None
    directory = Path(workdir if workdir is not None else _short_tmpdir())
    directory.mkdir(parents=True, exist_ok=True)
    ready = directory / f"ready-{time.monotonic_ns()}.json"
    log_path = directory / f"server-{time.monotonic_ns()}.log"
    args = ["--listen", "127.0.0.1:0", "--ready-file", str(ready)]
    if unix:
        args += ["--unix", unix_path or str(directory / "tk.sock")]
    args += list(extra_args)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            server_command(*args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=server_env(env),
            cwd=str(REPO),
            start_new_session=True,  # a terminal ^C reaches the caller, who stops us gracefully
            preexec_fn=preexec,
        )
    deadline = time.monotonic() + timeout
    while True:
        if ready.exists():
            info = json.loads(ready.read_text())
            break
        code = process.poll()
        if code is not None or time.monotonic() > deadline:
            if code is None:
                process.kill()
                process.wait()
            text = log_path.read_text(errors="replace") if log_path.exists() else ""
            if owns:
                shutil.rmtree(directory, ignore_errors=True)
            why = f"exited with code {code}" if code is not None else f"not ready in {timeout} s"
            raise ServerStartError(f"turnkeeper server {why}; its log:\n{text}")
        time.sleep(0.02)
    return LiveServer(
        process=process,
        address=info["tcp"][0],
        unix_path=info["unix"][0] if info["unix"] else None,
        tcp=list(info["tcp"]),
        unix=list(info["unix"]),
        workdir=directory,
        log_path=log_path,
        http=info.get("http"),
        owns_workdir=owns,
        args=args,
    )
