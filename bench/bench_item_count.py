"""What the request-item limit costs a normal request: in-process TrimHistory (harness's
workload, a token-budget trim) through the servicer's own work function, the one the event loop
or the engine pool runs per call, on the native engine by default. Prints figures, never
pass/fail. Wall time and the calling thread's CPU time (the engine works in that thread), the
latter steadier on a loaded machine.

The work function is the servicer's, so the same script times any tree: run it with that tree's
`service` first on PYTHONPATH (and its native module built) to compare, e.g. the branch point:
`PYTHONPATH=/path/to/base/service .venv/bin/python bench/bench_item_count.py`.
`--engine python` times the Python engine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import turnkeeper.server.api.servicer as servicer_module
from harness import trim_request, workload
from turnkeeper.server.api import rpcs
from turnkeeper.server.api.servicer import HistoryServicer
from turnkeeper.server.engine import create_engine
from turnkeeper.server.events.ring import RingFeed
from turnkeeper.v1 import history_service_pb2 as svc

SIZES = (1_000, 10_000, 100_000)
RUNS = {1_000: 200, 10_000: 40, 100_000: 9}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", default="native", choices=["native", "python"])
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--runs", type=int, default=0, help="timed calls per size (0: by size)")
    args = parser.parse_args()
    engine = create_engine(args.engine)
    servicer = HistoryServicer(
        feed=RingFeed(1000), max_history_rows=100_000, engine=engine, workers=1
    )
    work = servicer._with_history(svc.TrimHistoryRequest, rpcs.trim_history)
    print(f"tree {Path(servicer_module.__file__).parents[3]}, engine {engine.name}")
    for rows in args.sizes:
        raw = trim_request(workload(rows))
        work(raw)  # warm: the first call builds what is cached
        times, cpu = [], []
        for _ in range(args.runs or RUNS.get(rows, 20)):
            start, start_cpu = time.perf_counter(), time.thread_time()
            work(raw)
            cpu.append(time.thread_time() - start_cpu)
            times.append(time.perf_counter() - start)
        print(
            f"{rows:>7} rows {len(raw) / 1e6:6.1f} MB, {len(times)} runs: wall median "
            f"{statistics.median(times) * 1e3:8.3f} ms min {min(times) * 1e3:8.3f}, "
            f"cpu median {statistics.median(cpu) * 1e3:8.3f} ms min {min(cpu) * 1e3:8.3f}"
        )
    servicer.close()


if __name__ == "__main__":
    main()
