"""A call's cost on the event-loop thread, in instructions (issue 19 item 1): 20-row TrimHistory calls
at 16 in flight against the suffix floor (bench/floor_server.py) and turnkeeper, each server run
under valgrind's callgrind with a profile per thread.

Prints figures, never pass/fail. Timings on a shared machine move by 10-20 % between two identical
servers; the count of user-space instructions the event loop's thread (the one that serves every
call, thread 1) executes does not: two runs agree to about 2k instructions a call. Each contender
is run twice, with CALLS_BEFORE and CALLS_BEFORE + CALLS calls after the same start-up and warm-up,
and the difference over CALLS is its instructions per call (start-up, imports and the warm-up
cancel out). turnkeeper runs with `--shed-queue-ms 0`: the shedder's channelz reads are paid per
second, not per call, and under valgrind a second holds a fiftieth of the calls.
`BENCH_BASELINE=<checkout>/service` adds another build; `BENCH_CALLS` (800). Skipped without
valgrind. About two minutes a contender.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from harness import FLOOR_SERVER, OPTIONS, SERVICE_DIR, TRIM, server_argv, trim_request, workload

CALLS = int(os.environ.get("BENCH_CALLS", "800"))
CALLS_BEFORE = 200
IN_FLIGHT = 16
_TOTAL = re.compile(r"^(?:summary|totals):\s+(\d+)", re.M)


async def _drive(address: str, raw: bytes, calls: int) -> None:
    async with grpc.aio.insecure_channel(address, options=OPTIONS) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(TRIM)
        for _ in range(20):  # warm-up: the same in both runs
            await call(raw)
        left = calls

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await call(raw)

        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))


def loop_thread_instructions(argv: list[str], env: dict[str, str], raw: bytes, calls: int) -> int:
    """Instructions the server's first thread executed, start to end, serving `calls` calls."""
    tmp = tempfile.mkdtemp(prefix="tk-loop-")
    ready = os.path.join(tmp, "ready.json")
    out = os.path.join(tmp, "callgrind.out")
    valgrind = ["valgrind", "--tool=callgrind", "--separate-threads=yes"]
    process = subprocess.Popen(
        [*valgrind, f"--callgrind-out-file={out}", *argv, "--ready-file", ready],
        env={**os.environ, "PYTHONPATH": str(SERVICE_DIR), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 300
        while not os.path.exists(ready):
            if time.time() > deadline or process.poll() is not None:
                raise RuntimeError(f"{argv} did not start under valgrind")
            time.sleep(0.2)
        time.sleep(1)
        address = json.loads(Path(ready).read_text())["tcp"][0]
        asyncio.run(_drive(address, raw, calls))
    finally:
        process.terminate()
        process.wait(timeout=300)
    # callgrind names each thread's profile `<out>-NN`; thread 1 is the main one (the loop's).
    for path in glob.glob(out + "-*"):
        if path.endswith("-01"):
            match = _TOTAL.search(Path(path).read_text())
            if match:
                shutil.rmtree(tmp, ignore_errors=True)
                return int(match.group(1))
    raise RuntimeError(f"no profile of the main thread in {tmp}")


def main() -> None:
    if shutil.which("valgrind") is None:
        print("== event-loop instructions per call: skipped (no valgrind)")
        return
    raw = trim_request(workload(20))
    floor = [sys.executable, str(FLOOR_SERVER), "--mode", "suffix"]
    turnkeeper = server_argv()
    contenders: list[tuple[str, list[str], dict[str, str]]] = [
        ("floor suffix", floor, {}),
        ("turnkeeper", [*turnkeeper, "--shed-queue-ms", "0"], {}),
    ]
    baseline = os.environ.get("BENCH_BASELINE")
    if baseline:
        contenders.append(
            ("baseline", [*turnkeeper, "--shed-queue-ms", "0"], {"PYTHONPATH": baseline})
        )
    print(
        f"== a 20-row TrimHistory on the event-loop thread: user-space instructions per call, "
        f"{IN_FLIGHT} in flight, ({CALLS_BEFORE} + {CALLS}) - {CALLS_BEFORE} calls, callgrind"
    )
    counts: dict[str, float] = {}
    for name, argv, env in contenders:
        before = loop_thread_instructions(argv, env, raw, CALLS_BEFORE)
        after = loop_thread_instructions(argv, env, raw, CALLS_BEFORE + CALLS)
        counts[name] = (after - before) / CALLS
        line = f"{name}: {counts[name] / 1e3:.0f}k"
        if name != "floor suffix":
            line += f" = {counts[name] / counts['floor suffix']:.2f}x the floor"
        print(line)


if __name__ == "__main__":
    main()
