"""What bench scripts share: the servers they start, the workloads and requests they send, the
closed loops they drive, and what /proc says about a process.

Bench scripts import it as `harness` (Python puts a script's own directory, bench/, first on the
path); tests import it as a library, with bench/ on the path (pytest's `pythonpath`, see
bench/README.md). A bench script imports `harness` and its submodules, never another script.
Submodules: `harness.load` (the many-client closed loops), `harness.cache` (the prompt-cache
model of bench_cache.py), `harness.fanout` (the TrimEvents subscriber fleet),
`harness.expansion` (the amplifying requests the request-item limit bounds).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from turnkeeper.core.rows import price, rows_of
from turnkeeper.core.trimming import DEFAULT_BREADCRUMB_TEXT, layout
from turnkeeper.core.working import WorkingHistory, breadcrumb_cost
from turnkeeper.server.contract.methods import SERVICE_NAME, method_path
from turnkeeper.v1 import history_pb2 as h
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2, trim_pb2

BENCH_DIR = Path(__file__).resolve().parent.parent
REPO = BENCH_DIR.parent
SERVICE_DIR = REPO / "service"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
QUICK = os.environ.get("BENCH_QUICK") == "1"

# ---- the contract: method paths from the package, the breadcrumb from the core ------------------

SERVICE = SERVICE_NAME
TRIM = method_path("TrimHistory")
RESOLVE = method_path("ResolveBudget")
ESTIMATE = method_path("EstimateTokens")
PREPARE = method_path("PrepareModelCall")
EVENTS = method_path("TrimEvents")
BREADCRUMB_TEXT = DEFAULT_BREADCRUMB_TEXT
"""The breadcrumb row's text the sidecar inserts by default (the floors insert the same)."""
CRUMB = breadcrumb_cost(BREADCRUMB_TEXT)
"""What that breadcrumb costs, in tokens."""
BREADCRUMB_ROW = h.ChatMessage(role=h.ROLE_USER, content=BREADCRUMB_TEXT, breadcrumb=True)
"""The row a floor inserts where the cut history resumes."""
# Room for 100k-row histories both ways.
OPTIONS = [
    ("grpc.max_send_message_length", 256 << 20),
    ("grpc.max_receive_message_length", 256 << 20),
]
KEEP_METADATA = "floor-keep"
"""The metadata key a floor server (bench/floor_server.py) reads the first kept row's index from."""
FLOOR_SERVER = BENCH_DIR / "floor_server.py"


def child_env(service: str | Path = SERVICE_DIR) -> dict[str, str]:
    """This environment for a Python child that imports `harness` and `turnkeeper` (from
    `service`) by name."""
    path = [str(BENCH_DIR), str(service), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


class SidecarStartError(RuntimeError):
    """The sidecar exited or did not write its ready file in time; the message has its log."""


class Sidecar:
    """`python -m turnkeeper.server` on a free loopback port with the given extra flags, started
    from `service` (this checkout's `service/` by default) with no TURNKEEPER_* setting of this
    environment, its output in `log()`; `stop` sends SIGTERM (a graceful shutdown) and waits."""

    def __init__(
        self, *flags: str, python: str = sys.executable, service: str | Path = SERVICE_DIR
    ) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="tk-bench-", dir="/tmp"))
        ready = self._workdir / "ready.json"
        self.log_path = self._workdir / "server.log"
        command = [python, "-m", "turnkeeper.server", "--listen", "127.0.0.1:0"]
        command += ["--ready-file", str(ready), *flags]
        # The server reads only its flags: TURNKEEPER_* settings of this shell would change it.
        env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
        env["PYTHONPATH"] = str(service)
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


def machine_jiffies() -> tuple[int, int]:
    """All CPUs' busy and total jiffies since boot (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)


def percentile(ordered: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of an already sorted list; NaN when it is empty."""
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(len(ordered), rank) - 1]


# ---- servers ------------------------------------------------------------------------------------


class Server:
    """A server process (`argv` plus `--ready-file`) with a blocking channel to it: turnkeeper
    (`turnkeeper`, `turnkeeper_server`) or a floor (`floor`). `env` is added to this
    environment, whose PYTHONPATH becomes this checkout's `service/` unless `env` names one."""

    def __init__(
        self, name: str, argv: list[str], is_floor: bool = False, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.is_floor = is_floor
        self.tmp = tempfile.mkdtemp(prefix="tk-bench-")
        ready = os.path.join(self.tmp, "ready.json")
        self.process = subprocess.Popen(
            [*argv, "--ready-file", ready],
            env={**os.environ, "PYTHONPATH": str(SERVICE_DIR), **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + START_TIMEOUT_S
        while not os.path.exists(ready):
            if time.time() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.05)
        self.ready: dict[str, Any] = json.loads(Path(ready).read_text())
        self.address: str = self.ready["tcp"][0]
        self.channel = grpc.insecure_channel(self.address, options=OPTIONS)
        self._trim: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(TRIM)
        self.resolve: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(RESOLVE)

    @property
    def pid(self) -> int:
        return self.process.pid

    def metadata(self, keep: int) -> tuple[tuple[str, str], ...] | None:
        """What a floor is told so that it returns turnkeeper's rows without pricing them."""
        return ((KEEP_METADATA, str(keep)),) if self.is_floor else None

    def trim(self, raw: bytes, keep: int) -> bytes:
        response: bytes = self._trim(raw, metadata=self.metadata(keep))
        return response

    def rss_kib(self, field: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
        return 0

    def stop(self) -> None:
        self.channel.close()
        self.process.terminate()
        self.process.wait(timeout=30)


def server_argv(*flags: str) -> list[str]:
    """`python -m turnkeeper.server` on a free loopback port with `flags`."""
    return [sys.executable, "-m", "turnkeeper.server", "--listen", "127.0.0.1:0", *flags]


def turnkeeper_server(name: str, *flags: str, env: dict[str, str] | None = None) -> Server:
    """Turnkeeper with `flags` (none: its defaults: INFO access and trim logs, metrics,
    admission)."""
    return Server(name, server_argv(*flags), env=env)


def turnkeeper(engine: str) -> Server:
    """Default flags but the engine."""
    return turnkeeper_server(f"turnkeeper {engine}", "--engine", engine)


def floor(mode: str) -> Server:
    """bench/floor_server.py in `mode` (echo, suffix, receive)."""
    argv = [sys.executable, str(FLOOR_SERVER), "--mode", mode]
    return Server(f"floor {mode}", argv, is_floor=True)


def keep_of(server: Server, raw: bytes) -> int:
    """The index of the first row turnkeeper keeps after the system row (1 when nothing is cut)."""
    response = svc.TrimHistoryResponse.FromString(server.trim(raw, 0))
    return 1 + response.outcome.dropped_messages


# ---- workloads and requests ---------------------------------------------------------------------


WORDS = ("alpha", "beta", "gamma", "delta", "tool", "result", "value", "ok", "the", "a")


def text(rng: random.Random, size: int, words: Sequence[str] = WORDS) -> str:
    """`size` characters of words drawn from `words` by `rng`."""
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(words)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def workload(rows: int, seed: int = 8) -> h.History:
    """A seeded synthetic tool-heavy history of `rows` rows: a ~1,500-character system row; turns
    of a ~200-character user row, 0-4 tool exchanges with ~90-character JSON arguments and
    ~800-character results, a ~400-character reply."""
    rng = random.Random(seed)
    messages = [h.ChatMessage(role=h.ROLE_SYSTEM, content=text(rng, 1500))]
    n = 0
    while len(messages) < rows:
        messages.append(h.ChatMessage(role=h.ROLE_USER, content=text(rng, 200)))
        for _ in range(rng.randint(0, 4)):
            cid = f"call_{n}"
            n += 1
            arguments = json.dumps({"query": text(rng, 70), "limit": rng.randint(1, 99)})
            messages.append(
                h.ChatMessage(
                    role=h.ROLE_ASSISTANT,
                    tool_calls=[h.ToolCall(id=cid, name="search", arguments=arguments)],
                )
            )
            messages.append(
                h.ChatMessage(role=h.ROLE_TOOL, tool_call_id=cid, content=text(rng, 800))
            )
        messages.append(h.ChatMessage(role=h.ROLE_ASSISTANT, content=text(rng, 400)))
    return h.History(chat=h.ChatHistory(messages=messages[:rows]))


def trim_request(history: h.History) -> bytes:
    """A serialized token-budget TrimHistory to 25 % of the history's estimate."""
    budget = WorkingHistory.of(history).pricing.total // 4
    return svc.TrimHistoryRequest(
        history=history,
        mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
        explicit_limits=svc.ExplicitLimits(budget_tokens=budget),
    ).SerializeToString()


def prepare_request() -> bytes:
    """A serialized 20-row PrepareModelCall with profiles and a caller."""
    history = workload(20)
    return svc.PrepareModelCallRequest(
        history=history,
        profiles=profile_pb2.Profiles(
            runtime=profile_pb2.RuntimeProfile(
                max_context_tokens=8_000, default_provider="provider"
            ),
            providers=[profile_pb2.ProviderProfile(alias="provider", context_window=200_000)],
        ),
        caller=trim_pb2.CallerContext(session_id="session-1", runtime_id="runtime-1"),
    ).SerializeToString()


def chat(n: int, text: str = "hello there") -> h.History:
    """A valid chat history of n alternating user/assistant rows."""
    roles = (h.ROLE_USER, h.ROLE_ASSISTANT)
    return h.History(
        chat=h.ChatHistory(
            messages=[h.ChatMessage(role=roles[i % 2], content=f"{text} {i}") for i in range(n)]
        )
    )


def agent_trim(history: h.History, budget: int = 50, session: str = "s") -> svc.TrimHistoryRequest:
    """A TrimHistory on the agent path that trims (and so publishes) when over `budget`."""
    request = svc.TrimHistoryRequest(history=history, mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET)
    request.explicit_limits.budget_tokens = budget
    request.caller.session_id = session
    return request


# ---- timing and closed loops --------------------------------------------------------------------


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of `fn` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    """The fewest seconds a call of `fn` took in `repeat` calls."""
    return min(timed(fn) for _ in range(repeat))


def naive_cut(history: h.History, budget: int) -> int:
    """Re-prices P + crumb + B[bj:] for every candidate j: the O(n x k) reading of §9."""
    rows = rows_of(history)
    lay = layout(rows)
    for j in range(1, lay.turns):
        if sum(price(rows[: lay.prefix] + rows[lay.boundaries[j] :]).tokens) + CRUMB <= budget:
            return j
    return lay.turns - 1


def quantile(values: list[float], share: float) -> float:
    """The value `share` (0-1) of the way up the sorted values; NaN when there is none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else float("nan")


def inclusive_percentile(samples: list[float], q: float) -> float:
    """The q-th percentile by statistics.quantiles' inclusive method (q in 1-99)."""
    if not samples:
        return float("nan")
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[max(0, min(98, int(q) - 1))]


def closed_loop(
    server: Server, method: str, raw: bytes, metadata: Any, in_flight: int, seconds: float
) -> tuple[int, float, float]:
    """(calls done, seconds taken, server CPU seconds) of `in_flight` callers sending `raw` to
    `method` back to back for `seconds`, after one call that brings the connection up."""

    async def run() -> tuple[int, float, float]:
        async with grpc.aio.insecure_channel(server.address, options=OPTIONS) as channel:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(method)
            await call(raw, metadata=metadata)
            done = 0
            cpu = cpu_seconds(server.pid)
            start = time.perf_counter()
            end = start + seconds

            async def worker() -> None:
                nonlocal done
                while time.perf_counter() < end:
                    await call(raw, metadata=metadata)
                    done += 1

            await asyncio.gather(*(worker() for _ in range(in_flight)))
            elapsed = time.perf_counter() - start
            return done, elapsed, cpu_seconds(server.pid) - cpu

    return asyncio.run(run())
