"""The in-process cost of a call's two log lines (the access line and the trim line), µs a call.

Prints figures, never pass/fail. Each measurement runs in a child process whose stderr is a pipe
read by `cat` (as a container runtime reads it; the process's CPU time, not wall time,
which a shared machine inflates), logging configured as the server does
(`configure_logging`), in an asyncio loop: `PER_TURN` calls' lines (1: one call in flight; 16:
sixteen) then `await asyncio.sleep(0)`, the same loop without the lines subtracted. The two
statements are those of `edge/access_log.py` (`finish`, with its extras) and
`api/trim_telemetry.py` (`record_trim`), under a call's ids. `BENCH_BASELINE=<other
checkout>/service` measures that checkout too, interleaved round by round (before/after).
`BENCH_VIA=logger` makes the two statements `Logger.log` calls (what `log_line` saves).
`BENCH_ROUNDS`, `BENCH_CALLS`.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import harness
from harness import SERVICE_DIR

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
CALLS = int(os.environ.get("BENCH_CALLS", "20000"))
ACCESS = (
    "rpc method=%s status=%s duration_ms=%.2f request_bytes=%d response_bytes=%d requests=%d "
    "responses=%d"
)
TRIM = (
    "trimmed path=%s mode=%s reason=%s dropped_messages=%d dropped_turns=%d "
    "kept_turns=%d tokens_before=%d tokens_after=%d"
)
METHOD = harness.TRIM


def measure(log_format: str, per_turn: int) -> float:
    """µs of one call's two lines, `per_turn` calls an event-loop turn (in this process)."""
    from turnkeeper.server.telemetry.logs import configure_logging

    def telemetry(module: str) -> Any:
        """A telemetry module of the checkout measured, or its logs.py, which held the call ids
        and the handler before they were modules of their own."""
        try:
            return importlib.import_module(f"turnkeeper.server.telemetry.{module}")
        except ModuleNotFoundError:
            return importlib.import_module("turnkeeper.server.telemetry.logs")

    def logger_log(logger: logging.Logger, level: int, msg: str, *args: object, **kw: Any) -> None:
        logger.log(level, msg, *args, **kw)

    # As the two statements are written in the checkout measured (before log_line: Logger.log).
    log_line = getattr(telemetry("log_handler"), "log_line", logger_log)
    set_call_ids = telemetry("call_ids").set_call_ids
    if os.environ.get("BENCH_VIA") == "logger":
        log_line = logger_log

    configure_logging("INFO", log_format)  # type: ignore[arg-type]
    access = logging.getLogger("turnkeeper.access")
    trim = logging.getLogger("turnkeeper.trim")
    set_call_ids(
        {
            "request_id": "0b6c0f0e-2d6f-4c8e-9a51-5f1f3f0f5a7e",
            "session_id": "s-1",
            "runtime_id": "checkout-agent",
        }
    )

    def lines() -> None:
        if not access.isEnabledFor(logging.INFO):
            return
        extra = {
            "method": METHOD,
            "status": "OK",
            "duration_ms": 1.84,
            "request_bytes": 5123,
            "response_bytes": 2270,
            "requests": 1,
            "responses": 1,
        }
        log_line(access, logging.INFO, ACCESS, METHOD, "OK", 1.84, 5123, 2270, 1, 1, extra=extra)
        log_line(
            trim,
            logging.INFO,
            TRIM,
            "CALLER_PATH_AGENT",
            "TRIM_MODE_TOKEN_BUDGET",
            "token_budget",
            14,
            2,
            1,
            2408,
            924,
        )

    def nothing() -> None:
        pass

    async def turns(call: object, count: int) -> int:
        start = time.process_time_ns()
        for _ in range(count // per_turn):
            for _ in range(per_turn):
                call()  # type: ignore[operator]
            await asyncio.sleep(0)
        for handler in logging.getLogger().handlers:
            handler.flush()
        return time.process_time_ns() - start

    async def run() -> float:
        await turns(lines, 2000)  # warm
        best = min([await turns(lines, CALLS) - await turns(nothing, CALLS) for _ in range(3)])
        return best / CALLS / 1000

    return asyncio.run(run())


def child(service: str, log_format: str, per_turn: int) -> float:
    sink = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    env = {**os.environ, "PYTHONPATH": service}
    out = subprocess.run(
        [sys.executable, __file__, "--child", log_format, str(per_turn)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=sink.stdin,
        check=True,
        text=True,
    ).stdout
    assert sink.stdin is not None
    sink.stdin.close()
    sink.wait()
    return float(out)


def main() -> None:
    here = str(SERVICE_DIR)
    contenders = {"this": here}
    if os.environ.get("BENCH_BASELINE"):
        contenders = {"baseline": os.environ["BENCH_BASELINE"], **contenders}
    for log_format in ("text", "json"):
        for per_turn in (1, 16):
            figures: dict[str, list[float]] = {name: [] for name in contenders}
            for round_ in range(ROUNDS):
                names = list(contenders)
                names = names[round_ % len(names) :] + names[: round_ % len(names)]
                for name in names:
                    figures[name].append(child(contenders[name], log_format, per_turn))
            print(
                f"{log_format:4} {per_turn:2} calls a loop turn, load {os.getloadavg()[0]:.2f}: "
                + "; ".join(
                    f"{name} {statistics.median(values):.2f} µs a call (min {min(values):.2f})"
                    for name, values in figures.items()
                ),
                flush=True,
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(f"{measure(sys.argv[2], int(sys.argv[3])):.3f}")
    else:
        main()
