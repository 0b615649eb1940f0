"""The edge's own work per call, in-process (issue 19 item 1): a 20-row TrimHistory through the
registered, edge-wrapped handler (`edge/wrapper.py`, `edge/pipeline.py`: load shedding's count, admission's
receiving slot and admit, the request read, CallerContext, request id and trailers, the RPC
metric series, the access log line) against the bare servicer handler, both driven with a
stand-in grpc.aio context and no gRPC; the difference is the edge's cost. Logging as the server
sets it up by default (text at INFO; `BENCH_LOG_FORMAT=json` for JSON), written to /dev/null a
block of 16 calls at a time, as a busy server's `TurnHandler` writes them.

Prints figures, never pass/fail: µs per call (the fastest of 40 blocks, and the median block)
and, when valgrind is on PATH, instructions per call under cachegrind (the difference between
two runs of `BENCH_INSTR_CALLS` apart, so start-up cancels out: deterministic to about 0.1k).
To compare two checkouts, run it once with each one's `service/` first on `PYTHONPATH`.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, NamedTuple, TextIO, cast

import grpc
from harness import TRIM, trim_request, workload
from turnkeeper.server.api.servicer import HistoryServicer
from turnkeeper.server.app import admission_limits
from turnkeeper.server.config import ServerConfig
from turnkeeper.server.contract.methods import OWN_ACCEPT_METHODS, SERVICE_NAME
from turnkeeper.server.edge.admission import Admission
from turnkeeper.server.edge.server import load_shedder
from turnkeeper.server.edge.wrapper import Edge
from turnkeeper.server.engine import create_engine
from turnkeeper.server.events.metered import MeteredFeed
from turnkeeper.server.events.ring import RingFeed
from turnkeeper.server.telemetry import log_handler, logs

CALLS = int(os.environ.get("BENCH_CALLS", "20000"))
INSTR_CALLS = int(os.environ.get("BENCH_INSTR_CALLS", "2000"))
LOG_FORMAT = os.environ.get("BENCH_LOG_FORMAT", "text")
BLOCKS = 40
BLOCK_CALLS = 16  # lines written together (TurnHandler batches a busy loop's lines)


class _Metadatum(NamedTuple):
    """As grpc.aio gives a header."""

    key: str
    value: str


# What a grpc-python client sends (harness's clients): no x-request-id.
METADATA = (_Metadatum("user-agent", "grpc-python-asyncio/1.85.3 grpc-c/58.0.0 (linux; chttp2)"),)


class _Context:
    """What the edge and the handler ask of a grpc.aio context on success: one per call, as
    grpc makes. A call that would abort or suspend is a bench error."""

    __slots__ = ("_raw", "_trailing")

    def __init__(self, raw: bytes) -> None:
        self._raw = raw
        self._trailing: object = ()

    def invocation_metadata(self) -> tuple[_Metadatum, ...]:
        return METADATA

    async def read(self) -> bytes:
        return self._raw

    def time_remaining(self) -> float | None:
        return None

    def set_trailing_metadata(self, metadata: object) -> None:
        self._trailing = metadata

    def trailing_metadata(self) -> object:
        return self._trailing

    def code(self) -> None:
        return None

    def add_done_callback(self, callback: object) -> None:
        raise RuntimeError("a 20-row call is not heavy")

    async def abort(self, *args: object) -> None:
        raise RuntimeError(f"the call aborted: {args}")

    async def abort_with_status(self, status: object) -> None:
        raise RuntimeError(f"the call aborted: {status}")


def _run(coroutine: Coroutine[Any, Any, Any]) -> None:
    """Drives a call that never suspends (an inline call) to its answer."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    raise RuntimeError("the call suspended: it was not served inline")


class _Registry:
    """Takes the handlers the edge registers, as grpc.aio.Server would."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def add_generic_rpc_handlers(self, generic_rpc_handlers: object) -> None:
        pass

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        for name, handler in method_handlers.items():
            self.handlers[f"/{service_name}/{name}"] = handler


async def _no_requests() -> AsyncIterator[bytes]:
    return
    yield  # pragma: no cover


def calls(servicer: HistoryServicer, raw: bytes) -> dict[str, Callable[[], None]]:
    """One call of each contender: the edge-wrapped handler and the bare one."""
    config = ServerConfig()
    admission = Admission(admission_limits(config))
    registry = _Registry()
    edge = Edge(admission, (), load_shedder(config, admission))
    edge.registry(registry, OWN_ACCEPT_METHODS).add_registered_method_handlers(
        SERVICE_NAME, servicer.method_handlers()
    )
    wrapped = cast(Callable[..., Coroutine[Any, Any, Any]], registry.handlers[TRIM].stream_unary)
    bare = cast(
        Callable[..., Coroutine[Any, Any, Any]],
        servicer.method_handlers()["TrimHistory"].unary_unary,
    )
    return {
        "edge": lambda: _run(wrapped(_no_requests(), _Context(raw))),
        "bare": lambda: _run(bare(raw, _Context(raw))),
    }


async def blocks(call: Callable[[], None], count: int, per_block: int) -> list[float]:
    """µs per call of each block of `per_block` calls; the log lines are written after each
    block of 16 (timed), and the write TurnHandler scheduled runs (untimed)."""
    handler = log_handler.installed
    assert handler is not None
    times = []
    for _ in range(count):
        start = time.perf_counter_ns()
        for done in range(1, per_block + 1):
            call()
            if not done % BLOCK_CALLS:
                handler.flush()
        handler.flush()
        times.append((time.perf_counter_ns() - start) / per_block / 1000)
        await asyncio.sleep(log_handler._WINDOW)
    return times


async def serve(contender: str | None, instr_calls: int, out: TextIO) -> None:
    logs.configure_logging("INFO", cast(logs.LogFormat, LOG_FORMAT))
    assert log_handler.installed is not None
    log_handler.installed.setStream(out)
    feed = MeteredFeed(RingFeed(10_000))
    await feed.start()
    servicer = HistoryServicer(feed, 100_000, create_engine(None), workers=1)
    contenders = calls(servicer, trim_request(workload(20)))
    try:
        if contender is not None:  # under cachegrind: a warm-up, then the counted calls
            await blocks(contenders[contender], 1, 500)
            if instr_calls:
                await blocks(contenders[contender], instr_calls // 500, 500)
            return
        print(
            f"engine {servicer.engine.name}, log {LOG_FORMAT}, {CALLS} calls each, "
            f"load {os.getloadavg()[0]:.2f}"
        )
        for name, call in contenders.items():
            await blocks(call, 1, 500)
            figures = await blocks(call, BLOCKS, CALLS // BLOCKS)
            print(
                f"{name:5} {min(figures):6.1f} µs per call "
                f"(median block {statistics.median(figures):.1f})"
            )
    finally:
        servicer.close()
        await feed.close()
        log_handler.installed.setStream(sys.stderr)


def instructions(contender: str, instr_calls: int) -> int:
    """User-space instructions of a whole run of this script under cachegrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/cachegrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                f"--cachegrind-out-file={out}",
                sys.executable,
                __file__,
                contender,
                str(instr_calls),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        found = re.search(r"^summary:\s+(\d+)", Path(out).read_text(), re.M)
        assert found is not None
        return int(found.group(1))


def main() -> None:
    with open(os.devnull, "w") as devnull:
        if len(sys.argv) == 3:  # a run under cachegrind
            asyncio.run(serve(sys.argv[1], int(sys.argv[2]), devnull))
            return
        asyncio.run(serve(None, 0, devnull))
    if shutil.which("valgrind") is None:
        return
    counted = {}
    for name in ("edge", "bare"):
        counted[name] = (instructions(name, INSTR_CALLS) - instructions(name, 0)) / INSTR_CALLS
        print(f"{name:5} {counted[name] / 1000:6.1f}k instructions per call (cachegrind)")
    print(f"the edge {(counted['edge'] - counted['bare']) / 1000:6.1f}k instructions per call")


if __name__ == "__main__":
    main()
