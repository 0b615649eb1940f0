"""The request-item limit: the peak RSS one amplifying request raises the sidecar by, per engine.

Prints figures, never pass/fail. Each request of bench/harness/expansion.py is sent once
to a fresh server of each engine; the growth is the high-water mark after the call (reset with
/proc/PID/clear_refs before it) minus the resident size before, next to the call's outcome and
the bound the limit is meant to keep (20x the request's size plus 64 MiB). Extra arguments go to
the server, e.g. `--max-request-items 9223372036854775807` for the figures without the limit.
`BENCH_QUICK=1` sends requests a tenth the size.
"""

from __future__ import annotations

import sys
import time

import grpc
from harness import OPTIONS, QUICK, Sidecar
from harness.expansion import amplifications

MIB = 1024 * 1024


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} for pid {pid}")


def main() -> None:
    scale = 0.1 if QUICK else 1.0
    extra = sys.argv[1:]
    print(f"server flags: {' '.join(extra) or '(defaults)'}")
    print(f"{'engine':<7} {'request':<40} {'MB':>6} {'outcome':<17} {'+MiB':>7} {'bound':>6}")
    for engine in ("native", "python"):
        for case in amplifications(scale):
            server = Sidecar("--engine", engine, *extra)
            try:
                time.sleep(1.0)
                before = _status_kib(server.pid, "VmRSS")
                with open(f"/proc/{server.pid}/clear_refs", "w") as refs:
                    refs.write("5")  # resets VmHWM to the current RSS
                with grpc.insecure_channel(server.address, options=OPTIONS) as channel:
                    try:
                        send: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                            case.path
                        )
                        send(case.body, timeout=300)
                        outcome = "OK"
                    except grpc.RpcError as error:
                        outcome = error.code().name
                try:
                    grown = (_status_kib(server.pid, "VmHWM") - before) // 1024
                except (OSError, RuntimeError):
                    grown, outcome = -1, f"died ({outcome})"
                bound = 20 * len(case.body) // MIB + 64
                size = len(case.body) / 1e6
                print(
                    f"{engine:<7} {case.name:<40} {size:>6.1f} {outcome:<17} {grown:>7} {bound:>6}"
                )
            finally:
                server.stop()


if __name__ == "__main__":
    main()
