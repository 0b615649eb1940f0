"""A soak: closed-loop clients of mixed calls and TrimEvents subscribers against a real sidecar.

Prints figures, never pass/fail. `--clients` closed-loop clients (default 40, each its own
connection, in `--client-processes` asyncio processes) send a mix of calls as a fleet of agent
runtimes would: 20-row and 200-row TrimHistory calls that trim (so each publishes a HistoryTrimmed
event), 60-row PrepareModelCall calls that trim, 20-row EstimateTokens and ResolveBudget calls;
histories are tool-heavy (results of ~800 characters). Meanwhile `--subscribers` TrimEvents streams
(default 50, in one process of their own) follow the feed: every other one takes the whole feed,
the rest one runtime's events each (a runtime_ids filter).

Once the load stops, one marker trim per runtime is published; a subscriber is done when it has
its markers (everything published before them has reached it or was announced lost), or when
`--drain-seconds` have passed. Figures: calls/s and call latency p50/p99 (all calls, and the
small ones: requests under 16 KiB), by kind of call; per subscriber, the share of the matching
events published that it received; the gaps it was sent and how many of them came right after a
gap (no event in between); delivery latency (the event's time to its receipt); the server's RSS
growth per minute (least squares over one sample a second, after the warm-up); the CPU each side
used, so the load the clients themselves put on the machine shows.

    .venv/bin/python bench/bench_soak.py --seconds 90
    BENCH_SOAK_SECONDS=300 BENCH_SOAK_CLIENTS=40 BENCH_SOAK_SUBSCRIBERS=50 make bench

Extra server flags go after `--`, e.g. `-- --engine python` or `-- --events redis://...`.
`BENCH_QUICK=1` shortens the run to 30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as MpEvent

import grpc
from harness import EVENTS, Sidecar, cpu_seconds, percentile, rss_bytes, workload
from turnkeeper.server.contract.methods import method_path
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2, trim_pb2

QUICK = os.environ.get("BENCH_QUICK") == "1"
OPTIONS = [
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
    # Each channel its own connection, as separate runtimes and consumers would have.
    ("grpc.use_local_subchannel_pool", 1),
]
RUNTIMES = 4
SUBSCRIBERS_PER_CONNECTION = 10
SMALL_REQUEST_BYTES = 16 * 1024
MARKER_SESSION = "soak-marker"
CALL_TIMEOUT_S = 30.0
# A refused call is not sent again at once: a closed loop would otherwise spin on refusals.
REFUSED_PAUSE_S = 0.05
REFUSALS = {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE}


@dataclass(frozen=True)
class Kind:
    """A kind of call in the mix: its method, its history size, and its share of every 20 calls."""

    name: str
    method: str
    rows: int
    per_twenty: int


KINDS = (
    Kind("trim-20", "TrimHistory", 20, 8),
    Kind("trim-200", "TrimHistory", 200, 2),
    Kind("prepare-60", "PrepareModelCall", 60, 4),
    Kind("estimate-20", "EstimateTokens", 20, 4),
    Kind("resolve", "ResolveBudget", 0, 2),
)


# -- requests ------------------------------------------------------------------------------------


def _profiles(budget: int) -> profile_pb2.Profiles:
    providers = [
        profile_pb2.ProviderProfile(alias=alias, model=f"{alias}-model", context_window=window)
        for alias, window in (("main", 128_000), ("fast", 32_000), ("long", 1_000_000))
    ]
    runtime = profile_pb2.RuntimeProfile(max_context_tokens=budget, default_provider="main")
    return profile_pb2.Profiles(runtime=runtime, providers=providers)


def runtime_id(client: int) -> str:
    return f"rt-{client % RUNTIMES}"


def request_bytes(kind: Kind, budgets: dict[str, int], client: int) -> bytes:
    """The serialized request a client sends for `kind`; its budget is a quarter of the history's
    estimate (`budgets`, by kind), so every TrimHistory and PrepareModelCall trims."""
    caller = trim_pb2.CallerContext(
        session_id=f"soak-{client}", runtime_id=runtime_id(client), agent_id="agent", turn_id="1"
    )
    history = workload(kind.rows, seed=client) if kind.rows else None
    budget = budgets.get(kind.name, 0)
    if kind.method == "TrimHistory":
        trim = svc.TrimHistoryRequest(
            history=history,
            mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
            explicit_limits=svc.ExplicitLimits(budget_tokens=budget),
            caller=caller,
        )
        return trim.SerializeToString()
    if kind.method == "PrepareModelCall":
        prepare = svc.PrepareModelCallRequest(
            history=history, profiles=_profiles(budget), caller=caller
        )
        return prepare.SerializeToString()
    if kind.method == "EstimateTokens":
        return svc.EstimateTokensRequest(history=history).SerializeToString()
    return svc.ResolveBudgetRequest(profiles=_profiles(100_000)).SerializeToString()


def events_published(method: str, response: bytes) -> int:
    """How many HistoryTrimmed events the call that answered `response` published."""
    if method == "TrimHistory":
        return int(svc.TrimHistoryResponse.FromString(response).HasField("history_trimmed"))
    if method == "PrepareModelCall":
        return len(svc.PrepareModelCallResponse.FromString(response).trims)
    return 0


# -- the load ------------------------------------------------------------------------------------


@dataclass
class LoadJob:
    address: str
    clients: list[int]
    budgets: dict[str, int]
    events_per_call: dict[str, int]
    begin: float  # time.monotonic() (one clock for every process): calls before are not measured
    end: float  # and none starts after


@dataclass
class LoadResult:
    latencies: dict[str, list[float]] = field(default_factory=dict)  # OK calls after the warm-up
    codes: Counter[str] = field(default_factory=Counter)
    published: Counter[str] = field(default_factory=Counter)  # events, by runtime id


async def _load(job: LoadJob) -> LoadResult:
    result = LoadResult(latencies={kind.name: [] for kind in KINDS})
    begin, end = job.begin, job.end

    async def client(number: int) -> None:
        async with grpc.aio.insecure_channel(job.address, options=OPTIONS) as channel:
            calls: dict[str, tuple[Kind, grpc.aio.UnaryUnaryMultiCallable[bytes, bytes], bytes]]
            calls = {
                kind.name: (
                    kind,
                    channel.unary_unary(method_path(kind.method)),
                    request_bytes(kind, job.budgets, number),
                )
                for kind in KINDS
            }
            mix = [kind.name for kind in KINDS for _ in range(kind.per_twenty)]
            random.Random(number).shuffle(mix)
            turn = 0
            while time.monotonic() < end:
                kind, call, request = calls[mix[turn % len(mix)]]
                turn += 1
                started = time.monotonic()
                try:
                    await call(request, timeout=CALL_TIMEOUT_S)
                except grpc.aio.AioRpcError as error:
                    result.codes[error.code().name] += 1
                    if error.code() in REFUSALS:
                        await asyncio.sleep(REFUSED_PAUSE_S)
                    continue
                finished = time.monotonic()
                result.codes["OK"] += 1
                result.published[runtime_id(number)] += job.events_per_call[kind.name]
                if started >= begin and finished <= end:
                    result.latencies[kind.name].append(finished - started)

    await asyncio.gather(*(client(number) for number in job.clients))
    return result


def load_process(job: LoadJob, out: Connection) -> None:
    out.send(asyncio.run(_load(job)))


# -- the subscribers -----------------------------------------------------------------------------


@dataclass
class SubscriberJob:
    address: str
    count: int
    drain_s: float
    batch: int  # max_batch_events of every subscription (0: one event a message)


@dataclass
class SubscriberResult:
    runtime: str | None  # the runtime_ids filter, None for the whole feed
    received: int = 0  # events, markers not counted
    gaps: int = 0
    gaps_after_gap: int = 0
    missed: int = 0  # the gaps' missed_events
    latency_ms: Counter[int] = field(default_factory=Counter)  # by whole milliseconds
    received_at: Counter[int] = field(default_factory=Counter)  # by tenth of a second, monotonic
    markers: int = 0
    ended: str = "drained"  # or "cut off" (drain time over) or the stream's error code


def subscriber_filter(index: int) -> str | None:
    """Every other subscriber takes the whole feed; the rest one runtime's events each."""
    return None if index % 2 == 0 else runtime_id(index // 2)


async def _follow(
    channel: grpc.aio.Channel,
    result: SubscriberResult,
    registered: asyncio.Event,
    markers_expected: int,
    batch: int,
) -> None:
    stream = channel.unary_stream(
        EVENTS,
        request_serializer=svc.TrimEventsRequest.SerializeToString,
        response_deserializer=svc.TrimEventsResponse.FromString,
    )
    request = svc.TrimEventsRequest(
        runtime_ids=[result.runtime] if result.runtime else [], max_batch_events=batch
    )
    last_was_gap = False
    try:
        async for message in stream(request):
            assert isinstance(message, svc.TrimEventsResponse)
            if message.HasField("heartbeat"):
                registered.set()  # the first heartbeat: the server has registered us
                continue
            now_ns = time.time_ns()
            tenth = int(time.monotonic() * 10)
            for item in message.batch.items if message.HasField("batch") else [message]:
                if item.HasField("gap"):
                    result.gaps += 1
                    result.gaps_after_gap += last_was_gap
                    result.missed += item.gap.missed_events
                    last_was_gap = True
                    continue
                if not item.HasField("event"):
                    continue
                last_was_gap = False
                event = item.event
                if event.trimmed.caller.session_id == MARKER_SESSION:
                    result.markers += 1
                    continue
                result.received += 1
                result.received_at[tenth] += 1
                result.latency_ms[(now_ns - event.time.ToNanoseconds()) // 1_000_000] += 1
            if result.markers >= markers_expected:
                return
    except grpc.aio.AioRpcError as error:
        result.ended = error.code().name
        registered.set()


async def _subscribe(job: SubscriberJob, ready: MpEvent, stop: MpEvent) -> list[SubscriberResult]:
    results = [SubscriberResult(subscriber_filter(index)) for index in range(job.count)]
    connections = max(1, -(-job.count // SUBSCRIBERS_PER_CONNECTION))
    channels = [grpc.aio.insecure_channel(job.address, options=OPTIONS) for _ in range(connections)]
    registered = [asyncio.Event() for _ in results]
    tasks = [
        asyncio.create_task(
            _follow(
                channels[index % connections],
                result,
                registered[index],
                1 if result.runtime else RUNTIMES,
                job.batch,
            )
        )
        for index, result in enumerate(results)
    ]
    for event in registered:
        await event.wait()
    ready.set()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, stop.wait)  # the load has ended and the markers are out
    _, pending = await asyncio.wait(tasks, timeout=job.drain_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for index, task in enumerate(tasks):
        if task in pending:
            results[index].ended = "cut off"
    for channel in channels:
        await channel.close()
    return results


def subscriber_process(job: SubscriberJob, ready: MpEvent, stop: MpEvent, out: Connection) -> None:
    out.send(asyncio.run(_subscribe(job, ready, stop)))


# -- the run -------------------------------------------------------------------------------------


def _unary(address: str) -> Callable[[str, bytes], bytes]:
    channel = grpc.insecure_channel(address, options=OPTIONS)

    def call(method: str, request: bytes) -> bytes:
        send: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(method_path(method))
        return send(request, timeout=CALL_TIMEOUT_S)

    return call


def plan(address: str) -> tuple[dict[str, int], dict[str, int]]:
    """Each kind's budget (a quarter of its history's estimate), and the events one of its calls
    publishes, found by sending it once (the engines are deterministic)."""
    call = _unary(address)
    budgets: dict[str, int] = {}
    for kind in KINDS:
        if kind.rows:
            estimate = svc.EstimateTokensRequest(history=workload(kind.rows, seed=0))
            answer = call("EstimateTokens", estimate.SerializeToString())
            total = svc.EstimateTokensResponse.FromString(answer).total_tokens
            budgets[kind.name] = max(1, total // 4)
    events = {
        kind.name: events_published(kind.method, call(kind.method, request_bytes(kind, budgets, 0)))
        for kind in KINDS
    }
    return budgets, events


def publish_markers(address: str, budgets: dict[str, int]) -> None:
    """One trim per runtime from the marker session, after every other event."""
    call = _unary(address)
    kind = KINDS[0]
    for runtime in range(RUNTIMES):
        request = svc.TrimHistoryRequest.FromString(request_bytes(kind, budgets, runtime))
        request.caller.session_id = MARKER_SESSION
        published = events_published(kind.method, call(kind.method, request.SerializeToString()))
        assert published == 1, "a marker trim must publish its event"


@dataclass
class Samples:
    times: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)


def sample_rss(pid: int, until: float, samples: Samples) -> None:
    while time.monotonic() < until:
        samples.times.append(time.monotonic())
        samples.rss.append(rss_bytes(pid))
        time.sleep(1.0)


def histogram_percentile(counts: Counter[int], q: float) -> int | str:
    """The q-th percentile (nearest rank) of the values counted in `counts`; "-" when none."""
    total = sum(counts.values())
    if not total:
        return "-"
    rank = max(1, math.ceil(q / 100 * total))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    return max(counts)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def pct(value: float) -> str:
    return f"{value:.1%}"


def main() -> None:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=float(env("BENCH_SOAK_SECONDS", 30 if QUICK else 180))
    )
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds not measured first")
    parser.add_argument("--clients", type=int, default=int(env("BENCH_SOAK_CLIENTS", 40)))
    parser.add_argument("--subscribers", type=int, default=int(env("BENCH_SOAK_SUBSCRIBERS", 50)))
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--drain-seconds", type=float, default=60.0)
    parser.add_argument(
        "--batch",
        type=int,
        default=100,
        help="max_batch_events of each subscription, as the clients' watch helpers ask (0: one "
        "event a message)",
    )
    parser.add_argument("server_flags", nargs="*", help="extra sidecar flags (after --)")
    args = parser.parse_args()

    server = Sidecar(*args.server_flags)
    context = multiprocessing.get_context("spawn")
    try:
        budgets, events_per_call = plan(server.address)
        ready, stop = context.Event(), context.Event()
        sub_out, sub_in = context.Pipe(duplex=False)
        subscribers = context.Process(
            target=subscriber_process,
            args=(
                SubscriberJob(server.address, args.subscribers, args.drain_seconds, args.batch),
                ready,
                stop,
            ),
            kwargs={"out": sub_in},
            daemon=True,  # a run that fails leaves none behind
        )
        subscribers.start()
        if not ready.wait(120):
            raise RuntimeError("the subscribers were not registered in 120 s")
        loads: list[tuple[BaseProcess, Connection]] = []
        begin = time.monotonic() + args.warmup
        end = begin + args.seconds
        for part in range(args.client_processes):
            job = LoadJob(
                server.address,
                list(range(part, args.clients, args.client_processes)),
                budgets,
                events_per_call,
                begin,
                end,
            )
            out, into = context.Pipe(duplex=False)
            process = context.Process(target=load_process, args=(job, into), daemon=True)
            process.start()
            loads.append((process, out))
        time.sleep(max(0.0, begin - time.monotonic()))
        watched = [server.pid, subscribers.pid or 0, *(p.pid or 0 for p, _ in loads)]
        cpu_before = [cpu_seconds(pid) for pid in watched]
        samples = Samples()
        sample_rss(server.pid, end, samples)
        cpu_after = [cpu_seconds(pid) for pid in watched]
        parts: list[LoadResult] = [out.recv() for _, out in loads]
        for loader, _ in loads:
            loader.join()
        publish_markers(server.address, budgets)
        stop.set()
        followed: list[SubscriberResult] = sub_out.recv()
        subscribers.join()
        rss_end = rss_bytes(server.pid)
        alive = server.alive()
    finally:
        server.stop()

    load = LoadResult(latencies={kind.name: [] for kind in KINDS})
    for share in parts:
        load.codes.update(share.codes)
        load.published.update(share.published)
        for name, values in share.latencies.items():
            load.latencies[name].extend(values)
    report(args, budgets, load, followed, samples, rss_end, cpu_before, cpu_after, end)
    if not alive:
        print("the server died during the run")


def report(
    args: argparse.Namespace,
    budgets: dict[str, int],
    load: LoadResult,
    followed: list[SubscriberResult],
    samples: Samples,
    rss_end: int,
    cpu_before: list[float],
    cpu_after: list[float],
    end: float,
) -> None:
    measured_s: float = args.seconds
    sizes = {kind.name: len(request_bytes(kind, budgets, 0)) for kind in KINDS}
    every = sorted(t for values in load.latencies.values() for t in values)
    small = sorted(
        t
        for name, values in load.latencies.items()
        if sizes[name] < SMALL_REQUEST_BYTES
        for t in values
    )
    calls_measured = len(every)
    total_published = sum(load.published.values())
    shares: list[float] = []
    shares_in_load: list[float] = []  # received before the load ended
    load_end = int(end * 10)
    latency: Counter[int] = Counter()
    for result in followed:
        expected = load.published[result.runtime] if result.runtime else total_published
        in_load = sum(n for tenth, n in result.received_at.items() if tenth < load_end)
        shares.append(result.received / expected if expected else float("nan"))
        shares_in_load.append(in_load / expected if expected else float("nan"))
        latency.update(result.latency_ms)
    shares.sort()
    shares_in_load.sort()
    minutes = [(t - samples.times[0]) / 60 for t in samples.times]
    growth = (
        statistics.linear_regression(minutes, [r / 2**20 for r in samples.rss]).slope
        if len(samples.rss) >= 2
        else float("nan")
    )
    cores = [
        (after - before) / measured_s for before, after in zip(cpu_before, cpu_after, strict=True)
    ]
    ended = Counter(result.ended for result in followed)
    errors = {code: n for code, n in load.codes.items() if code != "OK"}
    flags = " ".join(args.server_flags) or "defaults"
    average = os.getloadavg()

    print(
        f"\n## soak: {args.clients} clients, {args.subscribers} subscribers, "
        f"{args.seconds:.0f} s measured after {args.warmup:.0f} s warm-up (server: {flags}; "
        f"load average {average[0]:.1f} {average[1]:.1f} {average[2]:.1f})\n"
    )
    rows = [
        ("calls/s (OK, measured)", f"{calls_measured / measured_s:,.0f}"),
        ("calls not OK (whole run)", json.dumps(errors) if errors else "none"),
        ("call p50 / p99, all", f"{ms(percentile(every, 50))} / {ms(percentile(every, 99))} ms"),
        (
            f"call p50 / p99, small (< {SMALL_REQUEST_BYTES // 1024} KiB)",
            f"{ms(percentile(small, 50))} / {ms(percentile(small, 99))} ms",
        ),
        ("events published (whole run)", f"{total_published:,}"),
        (
            "delivered share per subscriber min / p10 / median / max",
            " / ".join(pct(percentile(shares, q)) for q in (0, 10, 50, 100)),
        ),
        (
            "share received before the load ended, same order",
            " / ".join(pct(percentile(shares_in_load, q)) for q in (0, 10, 50, 100)),
        ),
        ("subscribers with >= 99 %", f"{sum(s >= 0.99 for s in shares)} of {len(shares)}"),
        (
            "gaps / right after a gap / events announced missed",
            f"{sum(r.gaps for r in followed):,} / {sum(r.gaps_after_gap for r in followed):,} / "
            f"{sum(r.missed for r in followed):,}",
        ),
        (
            "delivery latency p50 / p99 / max",
            " / ".join(f"{histogram_percentile(latency, q):,}" for q in (50, 99, 100)) + " ms",
        ),
        (
            "server RSS start / end, growth",
            f"{samples.rss[0] / 2**20:.0f} / {rss_end / 2**20:.0f} MiB, {growth:+.2f} MiB/min",
        ),
        (
            "CPU cores used: server / subscribers / clients",
            f"{cores[0]:.2f} / {cores[1]:.2f} / {sum(cores[2:]):.2f}",
        ),
        ("subscriber streams ended", json.dumps(dict(ended))),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"| {'figure':<{width}} | value |")
    print(f"|{'-' * (width + 2)}|---|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    print("\n| kind | request bytes | calls/s | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for kind in KINDS:
        values = sorted(load.latencies[kind.name])
        print(
            f"| {kind.name} | {sizes[kind.name]:,} | {len(values) / measured_s:,.0f} "
            f"| {ms(percentile(values, 50))} | {ms(percentile(values, 99))} "
            f"| {ms(percentile(values, 100))} |"
        )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
