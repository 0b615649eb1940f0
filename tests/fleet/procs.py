"""Throwaway redis-server and nginx processes for the event-feed tests.

Standard library only. Every process binds 127.0.0.1 on a free port and keeps its files in a temp
dir; `stop()` ends it. Loaded by path (see `load()`), so tests need not be a package.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def find_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for directory in ("/usr/sbin", "/usr/local/sbin", "/usr/bin"):
        candidate = Path(directory) / name
        if candidate.exists():
            return str(candidate)
    return None


def _read(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def _wait_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode}: {_read(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    process.kill()
    process.wait()
    raise RuntimeError(f"did not listen on {port} in {timeout}s: {_read(log)}")


def _end(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class RedisServer:
    """redis-server with no persistence, so a restart loses the stream (as in production without
    AOF/RDB)."""

    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    extra_args: tuple[str, ...] = ()  # e.g. ("--replicaof", "127.0.0.1", "6379")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = find_binary("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (run scripts/system-deps.sh)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "redis.log"
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir), "--logfile", str(log),
                "--daemonize", "no", *self.extra_args]  # fmt: skip
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        _wait_port(self.port, self.process, log, 10)

    def stop(self) -> None:
        _end(self.process)
        self.process = None

    def kill(self) -> None:
        _end(self.process, signal.SIGKILL)
        self.process = None


def start_redis(workdir: Path | None = None) -> RedisServer:
    directory = workdir or Path(tempfile.mkdtemp(prefix="tk-redis-", dir="/tmp"))
    server = RedisServer(free_port(), directory)
    server.start()
    return server


NGINX_TEMPLATE = HERE / "nginx.conf.template"


@dataclass
class Nginx:
    """nginx as a gRPC (HTTP/2 cleartext) load balancer, confined to its own prefix dir."""

    port: int
    prefix: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        _end(self.process, signal.SIGQUIT)  # graceful: finishes open streams
        _end(self.process)
        self.process = None


def start_nginx(upstreams: list[str], prefix: Path) -> Nginx:
    binary = find_binary("nginx")
    if binary is None:
        raise RuntimeError("nginx is not installed (run scripts/system-deps.sh)")
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / "logs").mkdir(exist_ok=True)
    port = free_port()
    config = NGINX_TEMPLATE.read_text()
    config = config.replace("@PREFIX@", str(prefix)).replace("@PORT@", str(port))
    config = config.replace("@UPSTREAMS@", "\n".join(f"    server {u};" for u in upstreams))
    conf_path = prefix / "nginx.conf"
    conf_path.write_text(config)
    log = prefix / "logs" / "error.log"
    # -e sets the error log before the config is read, so nothing is written to /var/log.
    process = subprocess.Popen(
        [binary, "-p", str(prefix), "-c", str(conf_path), "-e", str(log)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        env={**os.environ},
    )
    _wait_port(port, process, log, 10)
    return Nginx(port, prefix, process)
