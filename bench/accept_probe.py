"""How fast a bare grpc.aio server accepts calls (issue 19 item 4): figures, never pass/fail.

One registered trivial unary method (raw bytes in, b"ok" out) on a grpc.aio server with no
interceptors, driven by N closed-loop clients spread over client processes. Per contender:
calls/s, client-side p50/p99, the server's CPU (from /proc), and grpc core's queue of calls no
handler has asked for yet (channelz's calls started minus the calls the handler has seen,
sampled every 5 ms), the event-loop thread's time on a CPU and runnable but waiting for one
(/proc/<pid>/task/<pid>/schedstat) and the machine's busy share. Contenders, run interleaved round
after round: `default` (grpc's one outstanding request for the registered method), `extra:N` (N
outstanding, the N - 1 more through grpc's private per-call coroutines, as its own accept loop
does), `generic` (the method served through a generic handler); `+NAME=value` sets an environment
variable for the server (`default+GRPC_POLL_STRATEGY=poll`).

    python bench/accept_probe.py --clients 192 --seconds 4 --rounds 3 default extra:32 generic
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
from harness import cpu_seconds, machine_jiffies

METHOD = "/probe.Probe/Echo"
_CALLS_STARTED = re.compile(rb'"callsStarted":"(\d+)"')


def _serve(mode: str) -> None:
    """The server process: prints its port, serves until SIGINT, prints its queue samples."""
    import importlib

    cy: Any = importlib.import_module("grpc._cython.cygrpc")

    async def main() -> None:
        seen = 0
        samples: list[int] = []

        async def echo(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            nonlocal seen
            seen += 1
            return b"ok"

        handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(echo)
        before = {
            int(s["ref"]["serverId"])
            for s in json.loads(cy.channelz_get_servers(0)).get("server", [])
        }
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        if mode == "generic":
            server.add_generic_rpc_handlers(
                [grpc.method_handlers_generic_handler("probe.Probe", {"Echo": handler})]
            )
        else:
            server.add_registered_method_handlers("probe.Probe", {"Echo": handler})
        port = server.add_insecure_port("127.0.0.1:0")
        server_id = (
            {
                int(s["ref"]["serverId"])
                for s in json.loads(cy.channelz_get_servers(0)).get("server", [])
            }
            - before
        ).pop()
        await server.start()
        loop = asyncio.get_running_loop()
        extra: list[asyncio.Task[None]] = []
        if mode.startswith("extra:"):
            # More outstanding registered-method requests than grpc's one, each re-armed by its
            # own task; the calls they get go through grpc's own per-call coroutines.
            aio = server._server  # type: ignore[attr-defined]
            resolver = cy._MethodResolver([], {METHOD: handler})
            rpc_tasks: set[asyncio.Task[None]] = set()

            async def acceptor() -> None:
                while True:
                    try:
                        state = await aio._make_request_call_future(METHOD.encode())
                    except (cy._RequestCallError, asyncio.CancelledError):
                        return
                    coro = cy._handle_rpc(METHOD, resolver, (), state, loop, False)
                    task = loop.create_task(cy._schedule_rpc_coro(coro, state, loop, METHOD))
                    rpc_tasks.add(task)
                    task.add_done_callback(rpc_tasks.discard)

            extra = [loop.create_task(acceptor()) for _ in range(int(mode.split(":")[1]) - 1)]
        print(port, flush=True)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        while not stop.is_set():
            found = _CALLS_STARTED.search(cy.channelz_get_server(server_id))
            if found and seen:
                samples.append(int(found.group(1)) - seen)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.005)
        print(json.dumps({"queue": samples, "seen": seen}), flush=True)
        await server.stop(0)
        for task in extra:
            task.cancel()

    asyncio.run(main())


def _client(address: str, clients: int, per_channel: int, seconds: float, out: Any) -> None:
    async def main() -> list[float]:
        channels = [
            grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(max(1, clients // per_channel))
        ]
        for channel in channels:
            await channel.channel_ready()
        out.put("ready")
        latencies: list[float] = []
        end = time.perf_counter() + seconds

        async def one(k: int) -> None:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channels[
                k % len(channels)
            ].unary_unary(METHOD)
            while time.perf_counter() < end:
                start = time.perf_counter()
                await call(b"x", timeout=30)
                latencies.append(time.perf_counter() - start)

        await asyncio.gather(*(one(k) for k in range(clients)))
        return latencies

    out.put(asyncio.run(main()))


def _loop_thread(pid: int) -> tuple[float, float]:
    """The server's main (event-loop) thread: seconds on a CPU, seconds runnable but waiting."""
    ran, waited, _ = (int(v) for v in Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split())
    return ran / 1e9, waited / 1e9


def measure(
    mode: str, env: dict[str, str], clients: int, processes: int, seconds: float
) -> dict[str, float]:
    import multiprocessing

    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", mode],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    assert server.stdout is not None
    port = int(server.stdout.readline())
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [
        context.Process(
            target=_client,
            args=(f"127.0.0.1:{port}", clients // processes, 16, seconds, out),
        )
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:  # the clients' start-up (spawn, imports, connections) is not measured
        assert out.get() == "ready"
    cpu0 = cpu_seconds(server.pid)
    clients0 = sum(cpu_seconds(w.pid) for w in workers if w.pid)
    busy0, total0 = machine_jiffies()
    loop0 = _loop_thread(server.pid)
    t0 = time.perf_counter()
    time.sleep(seconds * 0.6)
    elapsed = time.perf_counter() - t0
    cpu = (cpu_seconds(server.pid) - cpu0) / elapsed
    client_cpu = (sum(cpu_seconds(w.pid) for w in workers if w.pid) - clients0) / elapsed
    busy1, total1 = machine_jiffies()
    loop1 = _loop_thread(server.pid)
    latencies = [x for _ in workers for x in out.get()]
    for worker in workers:
        worker.join()
    server.send_signal(signal.SIGINT)
    report = json.loads(server.stdout.readline())
    server.wait()
    latencies.sort()
    queue = report["queue"] or [0]
    return {
        "calls/s": len(latencies) / seconds,
        "p50 ms": 1000 * latencies[len(latencies) // 2],
        "p99 ms": 1000 * latencies[int(len(latencies) * 0.99)],
        "server cpu": cpu,
        "loop ran": (loop1[0] - loop0[0]) / elapsed,
        "loop waited": (loop1[1] - loop0[1]) / elapsed,
        "client cpu": client_cpu,
        "machine busy %": 100 * (busy1 - busy0) / (total1 - total0),
        "core queue p50": statistics.median(queue),
        "core queue max": max(queue),
    }


def _contender(name: str) -> tuple[str, dict[str, str]]:
    """`mode[+ENV=value...]`: a server mode and environment variables for the server."""
    mode, *assignments = name.split("+")
    return mode, dict(a.split("=", 1) for a in assignments)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--serve")
    parser.add_argument("--clients", type=int, default=192)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("contenders", nargs="*", default=["default"])
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve)
        return
    results: dict[str, list[dict[str, float]]] = {name: [] for name in args.contenders}
    for round_ in range(args.rounds):
        for name in args.contenders:
            mode, env = _contender(name)
            figures = measure(mode, env, args.clients, args.processes, args.seconds)
            results[name].append(figures)
            load = os.getloadavg()[0]
            print(
                f"round {round_ + 1} {name}: "
                + ", ".join(f"{k} {v:.1f}" for k, v in figures.items())
                + f" (load {load:.1f})",
                flush=True,
            )
    print("medians:")
    for name, rounds in results.items():
        keys = rounds[0].keys()
        print(
            f"  {name}: "
            + ", ".join(f"{k} {statistics.median(r[k] for r in rounds):.1f}" for k in keys)
        )


if __name__ == "__main__":
    main()
