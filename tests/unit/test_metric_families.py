"""The RPC and trim metric families (per-thread cells summed at scrape, telemetry/metric_families.py)
expose exactly what prometheus-client's own Counter and Histogram expose for the same updates:
from the event loop's thread, from engine worker threads, and while being scraped."""

from __future__ import annotations

import os
import random
import threading
import uuid
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families
from turnkeeper.server.edge.access_log import new_request_id, request_id_of
from turnkeeper.server.telemetry import metrics
from turnkeeper.server.telemetry.metric_families import CounterFamily, HistogramFamily
from turnkeeper.v1 import trim_pb2

BUCKETS = (0.5, 1.0, 2.5, 10.0, 100.0)
LABELS = ("method", "code")


def families() -> tuple[CollectorRegistry, CounterFamily, HistogramFamily]:
    registry = CollectorRegistry()
    counter = CounterFamily("t_calls", "Calls.", LABELS)
    histogram = HistogramFamily("t_sizes", "Sizes.", ("method",), BUCKETS)
    registry.register(counter)
    registry.register(histogram)
    return registry, counter, histogram


def oracle() -> tuple[CollectorRegistry, Counter, Histogram]:
    registry = CollectorRegistry()
    counter = Counter("t_calls", "Calls.", LABELS, registry=registry)
    histogram = Histogram("t_sizes", "Sizes.", ("method",), buckets=BUCKETS, registry=registry)
    return registry, counter, histogram


def without_created(exposition: bytes) -> list[str]:
    """The exposition's lines, `_created` values blanked (they are times)."""
    lines = []
    for line in exposition.decode().splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.endswith("_created"):
            line = line.rsplit(" ", 1)[0] + " <time>"
        lines.append(line)
    return lines


def updates(seed: int, count: int) -> list[tuple[str, str, float]]:
    rng = random.Random(seed)
    # Values on and around the bounds: `le` is inclusive.
    values = [*BUCKETS, 0.0, 0.25, 3.0, 99.0, 100.5, 1e9, 7.0]
    return [
        (rng.choice(("A", "B", "C")), rng.choice(("OK", "INTERNAL")), rng.choice(values))
        for _ in range(count)
    ]


def test_updates_from_one_thread_expose_what_prometheus_client_exposes() -> None:
    registry, counter, histogram = families()
    expected_registry, expected_counter, expected_histogram = oracle()
    # A family without labels shows its series at once and takes prometheus-client's `inc`.
    events = CounterFamily("t_events", "Events.", ())
    registry.register(events)
    expected_events = Counter("t_events", "Events.", registry=expected_registry)
    assert without_created(generate_latest(registry))[-3:] == [
        "# HELP t_events_created Events.",
        "# TYPE t_events_created gauge",
        "t_events_created <time>",
    ]
    with pytest.raises(ValueError):
        events.inc(-1)
    # A declared series shows at zero before any update, as a `.labels()` child does.
    counter.declare(("Z", "OK"))
    expected_counter.labels("Z", "OK")
    for method, code, value in updates(1, 2_000):
        counter.cell((method, code)).value += 1
        histogram.cell((method,)).observe(value)
        expected_counter.labels(method, code).inc()
        expected_histogram.labels(method).observe(value)
        events.inc(2 if code == "OK" else 1)
        expected_events.inc(2 if code == "OK" else 1)
    for expose in (generate_latest, openmetrics_latest):
        assert without_created(expose(registry)) == without_created(expose(expected_registry))
    assert registry.get_sample_value("t_calls_created", {"method": "Z", "code": "OK"})


def test_updates_from_many_threads_sum_exactly() -> None:
    registry, counter, histogram = families()
    expected_registry, expected_counter, expected_histogram = oracle()
    threads = 6
    per_thread = [updates(seed, 3_000) for seed in range(threads)]
    start = threading.Barrier(threads)

    def work(batch: list[tuple[str, str, float]]) -> None:
        start.wait()
        for method, code, value in batch:
            counter.cell((method, code)).value += 1
            histogram.cell((method,)).observe(value)

    workers = [threading.Thread(target=work, args=(batch,)) for batch in per_thread]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    # The oracle in one thread, series in the same first-use order (the first thread's).
    order = [(method, code) for method, code, _ in per_thread[0]]
    for method, code in dict.fromkeys(order):
        expected_counter.labels(method, code)
        expected_histogram.labels(method)
    for batch in per_thread:
        for method, code, value in batch:
            expected_counter.labels(method, code).inc()
            expected_histogram.labels(method).observe(value)
    assert sum(c.value for _, c in counter._cells) == threads * 3_000
    actual = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }
    expected = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in expected_registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }
    assert actual == expected


def test_a_scrape_while_threads_update_sees_consistent_growing_series() -> None:
    registry, counter, histogram = families()
    threads, per_thread = 4, 20_000
    stop = threading.Event()
    scrapes: list[dict[str, float]] = []

    def scrape_once() -> None:
        seen: dict[str, float] = {}
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            for s in family.samples:
                seen[s.name + repr(sorted(s.labels.items()))] = s.value
        scrapes.append(seen)

    def scrape() -> None:
        while not stop.is_set():
            scrape_once()

    def work() -> None:
        for index in range(per_thread):
            counter.cell(("A", "OK")).value += 1
            histogram.cell(("A",)).observe(float(index % 200))

    scraper = threading.Thread(target=scrape)
    scraper.start()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    stop.set()
    scraper.join()
    scrape_once()  # once more, after every update
    assert len(scrapes) > 1
    calls = "t_calls_total" + repr(sorted({"method": "A", "code": "OK"}.items()))
    count = "t_sizes_count" + repr([("method", "A")])
    previous: dict[str, float] = {}
    for seen in scrapes:
        buckets = [seen.get(f"t_sizes_bucket{[('le', le), ('method', 'A')]!r}", 0.0)
                   for le in ("0.5", "1.0", "2.5", "10.0", "100.0", "+Inf")]  # fmt: skip
        assert buckets == sorted(buckets)  # cumulative
        assert seen.get(count, 0.0) == buckets[-1]
        for key, value in previous.items():
            if not key.endswith(("_created", "_sum")):
                assert seen[key] >= value, key
        previous = seen
    assert previous[calls] == threads * per_thread
    assert previous[count] == threads * per_thread
    # 0..199, each value 100 times per thread.
    assert previous["t_sizes_sum" + repr([("method", "A")])] == threads * 100 * sum(range(200))


def test_rpc_series_from_the_loop_and_trims_from_workers_are_exact() -> None:
    """The module's own families: an RPC method's series, and trims recorded on two threads."""
    series = metrics.RpcSeries("/test.v1.Meter/Exact", "unary")
    rpc = {"grpc_service": "test.v1.Meter", "grpc_method": "Exact", "grpc_type": "unary"}
    assert metrics.REGISTRY.get_sample_value("grpc_server_started_total", rpc) == 0.0
    for index in range(500):
        series.start()
        series.finished("OK" if index % 5 else "NOT_FOUND", 0.001 * index, 300, 20, 1, 1, None)

    def value(name: str, **labels: str) -> float | None:
        return metrics.REGISTRY.get_sample_value(name, labels)

    assert value("grpc_server_started_total", **rpc) == 500
    assert value("grpc_server_handled_total", **rpc, grpc_code="OK") == 400
    assert value("grpc_server_handled_total", **rpc, grpc_code="NOT_FOUND") == 100
    assert value("grpc_server_msg_received_total", **rpc) == 500
    assert value("grpc_server_handling_seconds_bucket", **rpc, le="0.005") == 6  # 0..5 ms
    assert value("grpc_server_handling_seconds_count", **rpc) == 500
    assert value("turnkeeper_rpc_request_bytes_bucket", grpc_method="Exact", le="256.0") == 0
    assert value("turnkeeper_rpc_request_bytes_bucket", grpc_method="Exact", le="1024.0") == 500
    assert value("turnkeeper_rpc_request_bytes_sum", grpc_method="Exact") == 500 * 300

    trims = {"reason": "row_limit", "caller_path": "channel_sender_cache"}
    before = value("turnkeeper_trims_total", **trims) or 0.0
    dropped = value("turnkeeper_dropped_messages_total", **trims) or 0.0
    tokens = value("turnkeeper_trim_tokens_after_sum", reason="row_limit") or 0.0

    def trim(times: int) -> None:
        for _ in range(times):
            metrics.observe_trim(
                trim_pb2.CALLER_PATH_CHANNEL_SENDER_CACHE,
                "row_limit",
                dropped_turns=2,
                dropped_messages=5,
                tokens_before=9_000,
                tokens_after=700,
            )

    workers = [threading.Thread(target=trim, args=(1_000,)) for _ in range(3)]
    for worker in workers:
        worker.start()
    trim(1_000)
    for worker in workers:
        worker.join()
    assert value("turnkeeper_trims_total", **trims) == before + 4_000
    # (Other tests in this process may have counted trims of other sizes in this series.)
    assert value("turnkeeper_dropped_messages_total", **trims) == dropped + 5 * 4_000
    assert value("turnkeeper_trim_tokens_after_sum", reason="row_limit") == tokens + 700 * 4_000


@pytest.fixture
def no_created_samples() -> Iterator[None]:
    prometheus_metrics.disable_created_metrics()
    try:
        yield
    finally:
        prometheus_metrics.enable_created_metrics()


def test_created_samples_follow_prometheus_clients_switch(no_created_samples: None) -> None:
    registry, counter, histogram = families()
    counter.cell(("A", "OK")).value += 1
    histogram.cell(("A",)).observe(1.0)
    exposition = generate_latest(registry).decode()
    assert "t_calls_total" in exposition and "t_sizes_count" in exposition
    assert "_created" not in exposition


def test_new_request_ids_are_canonical_random_uuid4s() -> None:
    ids = {new_request_id() for _ in range(20_000)}
    assert len(ids) == 20_000
    for value in list(ids)[:500]:
        parsed = uuid.UUID(value)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == value
    # Seeding the shared generator (tests and libraries do) does not repeat ids.
    random.seed(7)
    first = new_request_id()
    random.seed(7)
    assert new_request_id() != first


def test_a_usable_caller_request_id_passes_through() -> None:
    assert request_id_of((("x-request-id", "req-1:abc/DEF=+."),)) == "req-1:abc/DEF=+."
    for unusable in ("", "has space", "x" * 129, "é"):
        made = request_id_of((("x-request-id", unusable),))
        assert uuid.UUID(made).version == 4
    assert uuid.UUID(request_id_of(None)).version == 4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_draws_other_request_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 100).decode()
    os.close(read)
    assert uuid.UUID(child).version == 4
    assert child != new_request_id()
