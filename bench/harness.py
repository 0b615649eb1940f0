"""What bench scripts share: a real sidecar in a subprocess, and what /proc says about a process.

Standard library only. A bench script imports it as `harness` (Python puts the script's own
directory first on the path), so no script needs to touch `sys.path`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SERVICE_DIR = REPO / "service"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class SidecarStartError(RuntimeError):
    """The sidecar exited or did not write its ready file in time; the message has its log."""


class Sidecar:
    """`python -m turnkeeper.server` on a free loopback port with the given extra flags, started
    from this checkout's `service/`; `stop` sends SIGTERM (a graceful shutdown) and waits."""

    def __init__(self, *flags: str, python: str = sys.executable) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="tk-bench-", dir="/tmp"))
        ready = self._workdir / "ready.json"
        self.log_path = self._workdir / "server.log"
        command = [python, "-m", "turnkeeper.server", "--listen", "127.0.0.1:0"]
        command += ["--ready-file", str(ready), *flags]
        # The server reads only its flags: TURNKEEPER_* settings of this shell would change it.
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env["PYTHONPATH"] = str(SERVICE_DIR)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(REPO),
                start_new_session=True,  # a terminal ^C reaches the script, which stops it
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SidecarStartError(f"the sidecar did not start; its log:\n{self.log()}")
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        self.address: str = info["tcp"][0]

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it has not exited in STOP_TIMEOUT_S; returns its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        shutil.rmtree(self._workdir, ignore_errors=True)
        return code


def rss_bytes(pid: int) -> int:
    """The resident set size of a process (VmRSS of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """The CPU time a process has used so far, user and system (from /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    # The command name, in parentheses, may hold spaces: the fields after it are split safely.
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def percentile(ordered: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of an already sorted list; NaN when it is empty."""
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(len(ordered), rank) - 1]
