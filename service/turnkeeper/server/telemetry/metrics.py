"""Prometheus metrics of the sidecar: RPCs, trims, the event feed, the engine and the build.

The RPC families follow the go-grpc-prometheus names (`grpc_server_*`), so stock gRPC
dashboards work; everything else is `turnkeeper_*`. Labels never carry message text or ids,
only bounded sets (method, code, reason, path, cause). Collectors live in one module-level
registry, as prometheus-client intends, and are thread-safe: engine workers record into them.
The feed's counters are recorded by `events/metered.py`, each RPC's by `edge/access_log.py`.

The families every call updates (the RPC ones) and every trim updates are not prometheus-client
collectors but `CounterFamily` / `HistogramFamily`: plain per-thread cells that only their own
thread writes (no lock; a prometheus-client child takes one per update, and a histogram walks its
buckets in Python), summed into the same families when scraped. The exposition is the same:
names, help, labels, buckets, values and `_created` samples (each label set's first use).
"""

from __future__ import annotations

import bisect
import math
import platform
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from turnkeeper.server.version import distribution_version, server_version
from turnkeeper.v1 import trim_pb2

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)  # collections by generation (startup's objects are frozen)

_RPC_LABELS = ("grpc_service", "grpc_method", "grpc_type")
# Seconds: 0.5 ms (a small estimate) to 30 s (a large history on a busy pool).
_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
# Bytes: 256 B to the 64 MiB default receive limit and beyond.
_SIZE_BUCKETS = tuple(float(256 * 4**k) for k in range(11))
# Tokens: small chats to the largest context windows.
_TOKEN_BUCKETS = (
    256.0, 1_000.0, 4_000.0, 8_000.0, 16_000.0, 32_000.0, 64_000.0, 128_000.0, 200_000.0,
    400_000.0, 1_000_000.0, 2_000_000.0,
)  # fmt: skip


Labels = tuple[str, ...]


def _created_samples() -> bool:
    """Whether `_created` samples are exposed: prometheus-client's own switch
    (PROMETHEUS_DISABLE_CREATED_SERIES, `disable_created_metrics()`), read as its collectors do."""
    return bool(getattr(prometheus_metrics, "_use_created", True))


class CounterCell:
    """One thread's part of one counter series; only that thread adds to it."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class HistogramCell:
    """One thread's part of one histogram series: a count per bucket (not cumulative; the last is
    +Inf) and the sum. Only that thread observes into it."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        # The first bucket whose bound is >= amount, as prometheus-client's `amount <= bound`.
        self.counts[bisect.bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class _Family(Collector):
    """A family of series, each the sum of its threads' cells. `declare` shows a series (at zero)
    before its first update; a series' `_created` is its first declaration or cell."""

    kind = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._created: dict[Labels, float] = {}  # in first-use order, as prometheus-client's
        self._cells: list[tuple[Labels, Any]] = []
        self._local = threading.local()
        if not self.labelnames:  # its one series shows from the start, as prometheus-client's
            self.declare(())

    def declare(self, labels: Labels) -> None:
        with self._lock:
            self._created.setdefault(labels, time.time())

    def _cell(self, labels: Labels) -> Any:
        """The calling thread's cell of the series `labels` (made on its first use there)."""
        try:
            mine: dict[Labels, Any] = self._local.cells
        except AttributeError:
            mine = self._local.cells = {}
        cell = mine.get(labels)
        if cell is None:
            cell = mine[labels] = self._new_cell()
            with self._lock:
                self._created.setdefault(labels, time.time())
                self._cells.append((labels, cell))
        return cell

    def _new_cell(self) -> Any:
        raise NotImplementedError

    def _snapshot(self) -> tuple[list[tuple[Labels, float]], list[tuple[Labels, Any]]]:
        with self._lock:
            return list(self._created.items()), list(self._cells)

    def _family(self) -> Metric:
        raise NotImplementedError

    def describe(self) -> Iterable[Metric]:
        # The registry takes the names from here (clashes, `?name[]=` filtering) without a scrape.
        return [self._family()]


class CounterFamily(_Family):
    def cell(self, labels: Labels) -> CounterCell:
        cell: CounterCell = self._cell(labels)
        return cell

    def inc(self, amount: float = 1) -> None:
        """Adds to the one series of a family without labels (prometheus-client's `inc`)."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self._cell(()).value += amount

    def _new_cell(self) -> CounterCell:
        return CounterCell()

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterable[Metric]:
        created, cells = self._snapshot()
        totals = dict.fromkeys((labels for labels, _ in created), 0)
        for labels, cell in cells:
            totals[labels] += cell.value
        family = self._family()
        with_created = _created_samples()
        for labels, first in created:
            family.add_metric(labels, float(totals[labels]), first if with_created else None)
        return [family]


class HistogramFamily(_Family):
    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        super().__init__(name, documentation, labelnames)
        self.bounds = (*(float(bound) for bound in buckets), math.inf)
        # The `le` labels as prometheus-client writes them (it ships no hints for this one).
        self._les: list[str] = [
            floatToGoString(bound)  # type: ignore[no-untyped-call]
            for bound in self.bounds
        ]

    def cell(self, labels: Labels) -> HistogramCell:
        cell: HistogramCell = self._cell(labels)
        return cell

    def _new_cell(self) -> HistogramCell:
        return HistogramCell(self.bounds)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterable[Metric]:
        created, cells = self._snapshot()
        size = len(self.bounds)
        counts = {labels: [0] * size for labels, _ in created}
        sums = dict.fromkeys(counts, 0.0)
        for labels, cell in cells:
            sums[labels] += cell.sum
            total = counts[labels]
            for index, count in enumerate(list(cell.counts)):
                total[index] += count
        family = self._family()
        with_created = _created_samples()
        for labels, first in created:
            cumulative = 0.0
            buckets = []
            for le, count in zip(self._les, counts[labels], strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(labels, buckets, sums[labels])
            if with_created:
                series = dict(zip(self.labelnames, labels, strict=True))
                family.samples.append(Sample(f"{self.name}_created", series, first))
        return [family]


def _counter(name: str, documentation: str, labelnames: Sequence[str] = ()) -> CounterFamily:
    family = CounterFamily(name, documentation, labelnames)
    REGISTRY.register(family)
    return family


def _histogram(
    name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
) -> HistogramFamily:
    family = HistogramFamily(name, documentation, labelnames, buckets)
    REGISTRY.register(family)
    return family


RPCS_STARTED = _counter("grpc_server_started", "RPCs started on the server.", _RPC_LABELS)
RPCS_HANDLED = _counter(
    "grpc_server_handled",
    "RPCs completed on the server, by status code.",
    (*_RPC_LABELS, "grpc_code"),
)
RPC_SECONDS = _histogram(
    "grpc_server_handling_seconds",
    "Time from the handler's start to its completion.",
    _RPC_LABELS,
    _LATENCY_BUCKETS,
)
MESSAGES_RECEIVED = _counter("grpc_server_msg_received", "Request messages received.", _RPC_LABELS)
MESSAGES_SENT = _counter("grpc_server_msg_sent", "Response messages sent.", _RPC_LABELS)
REQUEST_BYTES = _histogram(
    "turnkeeper_rpc_request_bytes",
    "Size of each RPC's request messages on the wire.",
    ("grpc_method",),
    _SIZE_BUCKETS,
)
RESPONSE_BYTES = _histogram(
    "turnkeeper_rpc_response_bytes",
    "Size of each RPC's response messages, serialized.",
    ("grpc_method",),
    _SIZE_BUCKETS,
)
CAPACITY_FAILURES = Counter(
    "turnkeeper_capacity_failures",
    "Requests refused because the prepared call does not fit the model's context window "
    "(FAILED_PRECONDITION, ERROR_REASON_CONTEXT_WINDOW_EXCEEDED).",
    ("grpc_method",),
    registry=REGISTRY,
)
ADMISSION_REJECTIONS = Counter(
    "turnkeeper_admission_rejections",
    "RPCs refused before any work because the server is at a limit (RESOURCE_EXHAUSTED), "
    "by ErrorInfo reason.",
    ("grpc_method", "reason"),
    registry=REGISTRY,
)

ADMISSION_QUEUE_LENGTH = Gauge(
    "turnkeeper_admission_queue_length",
    "Calls waiting for a slot: queue heavy (over --max-heavy-calls) or receiving (over "
    "--max-receiving-calls).",
    ("queue",),
    registry=REGISTRY,
)
ADMISSION_WAIT_SECONDS = Histogram(
    "turnkeeper_admission_wait_seconds",
    "How long a call waited in an admission queue, by queue and outcome (admitted, refused, "
    "cancelled).",
    ("queue", "outcome"),
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
CALLS_SHED = Counter(
    "turnkeeper_calls_shed",
    "Calls refused at once (RESOURCE_EXHAUSTED, OVERLOADED, limit queue_delay) because calls "
    "had waited over --shed-queue-ms for this server for --shed-interval-ms.",
    registry=REGISTRY,
)
QUEUE_DELAY_SECONDS = Gauge(
    "turnkeeper_queue_delay_seconds",
    "The longest a call waited for this server to take it (in grpc core and on the event loop, "
    "before its interceptor) in the last sampling period (20-100 ms) while calls arrive.",
    registry=REGISTRY,
)
QUEUE_WAIT_SECONDS = Counter(
    "turnkeeper_queue_wait_seconds",
    "The time calls waited for this server to take it (as turnkeeper_queue_delay_seconds), "
    "summed over the calls; over grpc_server_started, the mean wait.",
    registry=REGISTRY,
)
CONNECTIONS_SHED = Counter(
    "turnkeeper_connections_shed",
    "Unused connections (no call yet) the connection guard closed: a peer over its share "
    "(peer_share) or the server at its connection cap (cap).",
    ("why",),
    registry=REGISTRY,
)

_TRIM_LABELS = ("reason", "caller_path")
TRIMS = _counter(
    "turnkeeper_trims", "Trims that dropped history, by reason and caller path.", _TRIM_LABELS
)
DROPPED_TURNS = _counter(
    "turnkeeper_dropped_turns", "Complete turns dropped by trims.", _TRIM_LABELS
)
DROPPED_MESSAGES = _counter(
    "turnkeeper_dropped_messages", "History messages dropped by trims.", _TRIM_LABELS
)
TOKENS_BEFORE = _histogram(
    "turnkeeper_trim_tokens_before",
    "Estimated history tokens before each trim.",
    ("reason",),
    _TOKEN_BUCKETS,
)
TOKENS_AFTER = _histogram(
    "turnkeeper_trim_tokens_after",
    "Estimated history tokens after each trim.",
    ("reason",),
    _TOKEN_BUCKETS,
)

# Counted per event and per delivery (1,000 subscribers: 1,000 a trim), so per-thread cells too.
EVENTS_PUBLISHED = _counter(
    "turnkeeper_events_published", "HistoryTrimmed events handed to the feed."
)
EVENT_SUBSCRIBERS = Gauge(
    "turnkeeper_event_subscribers",
    "Open subscriptions of the event feed (TrimEvents streams and dashboard streams).",
    registry=REGISTRY,
)
EVENT_GAPS = Counter(
    "turnkeeper_event_gaps",
    "Gap notices delivered to subscribers, by cause (one per subscriber that saw it).",
    ("cause",),
    registry=REGISTRY,
)
EVENTS_DELIVERED = _counter(
    "turnkeeper_events_delivered", "Events delivered to subscribers (one per subscriber)."
)
FEED_HEALTHY = Gauge(
    "turnkeeper_event_feed_healthy",
    "1 while the event backend can publish and serve, else 0.",
    registry=REGISTRY,
)

ENGINE = Info("turnkeeper_engine", "The trimming engine serving requests.", registry=REGISTRY)
BUILD = Info("turnkeeper_build", "Versions of turnkeeper and what it runs on.", registry=REGISTRY)


BUILD.info(
    {
        "version": server_version(),
        "python": platform.python_version(),
        "grpcio": distribution_version("grpcio"),
        "protobuf": distribution_version("protobuf"),
    }
)


def split_method(full_method: str) -> tuple[str, str]:
    """'/pkg.Service/Method' -> ('pkg.Service', 'Method')."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service, method


_RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.name


class _RpcCells:
    """One thread's cells of one method's RPC series."""

    __slots__ = ("handled", "received", "request_bytes", "response_bytes", "seconds", "sent",
                 "started")  # fmt: skip

    def __init__(self, series: RpcSeries) -> None:
        labels = series.labels
        self.started = RPCS_STARTED.cell(labels)
        self.seconds = RPC_SECONDS.cell(labels)
        self.received = MESSAGES_RECEIVED.cell(labels)
        self.sent = MESSAGES_SENT.cell(labels)
        self.request_bytes = REQUEST_BYTES.cell((series.method,))
        self.response_bytes = RESPONSE_BYTES.cell((series.method,))
        # By status code name: at most the 17 gRPC codes.
        self.handled: dict[str, CounterCell] = {}


class RpcSeries:
    """The series one method's calls update, resolved once per method (at registration) and
    thread (its cells), not per call. The series show (at zero) from registration on."""

    __slots__ = ("_local", "labels", "method")

    def __init__(self, full_method: str, rpc_type: str) -> None:
        service, method = split_method(full_method)
        labels = (service, method, rpc_type)
        self.labels = labels
        self.method = method
        for family in (RPCS_STARTED, RPC_SECONDS, MESSAGES_RECEIVED, MESSAGES_SENT):
            family.declare(labels)
        REQUEST_BYTES.declare((method,))
        RESPONSE_BYTES.declare((method,))
        self._local = threading.local()

    def _cells(self) -> _RpcCells:
        """The calling thread's cells (made on its first call there)."""
        try:
            cells: _RpcCells = self._local.cells
        except AttributeError:
            cells = self._local.cells = _RpcCells(self)
        return cells

    def start(self) -> None:
        """One RPC started."""
        self._cells().started.value += 1

    def finished(
        self,
        code: str,
        seconds: float,
        request_bytes: int,
        response_bytes: int,
        requests: int,
        responses: int,
        error_reason: str | None,
    ) -> None:
        """One finished RPC; `error_reason` is its ErrorInfo reason, if it failed with one."""
        cells = self._cells()
        handled = cells.handled.get(code)
        if handled is None:
            handled = cells.handled[code] = RPCS_HANDLED.cell((*self.labels, code))
        handled.value += 1
        cells.received.value += requests
        cells.sent.value += responses
        # HistogramCell.observe, inline (its three calls were a third of this method's time).
        histogram = cells.seconds
        histogram.counts[bisect.bisect_left(histogram.bounds, seconds)] += 1
        histogram.sum += seconds
        histogram = cells.request_bytes
        histogram.counts[bisect.bisect_left(histogram.bounds, request_bytes)] += 1
        histogram.sum += request_bytes
        histogram = cells.response_bytes
        histogram.counts[bisect.bisect_left(histogram.bounds, response_bytes)] += 1
        histogram.sum += response_bytes
        if error_reason == "ERROR_REASON_CONTEXT_WINDOW_EXCEEDED":
            CAPACITY_FAILURES.labels(self.method).inc()
        if code == _RESOURCE_EXHAUSTED:
            ADMISSION_REJECTIONS.labels(self.method, error_reason or "none").inc()


def enum_label(enum_name: str, prefix: str) -> str:
    """A label value from a protobuf enum name: TRIM_REASON_TURN_LIMIT -> turn_limit."""
    return enum_name.removeprefix(prefix).lower()


class _TrimCells:
    """One thread's cells of one (reason, caller path)'s trim series."""

    __slots__ = ("dropped_messages", "dropped_turns", "tokens_after", "tokens_before", "trims")

    def __init__(self, reason: str, caller_path: trim_pb2.CallerPath.ValueType) -> None:
        path = enum_label(
            trim_pb2.CallerPath.Name(caller_path or trim_pb2.CALLER_PATH_AGENT), "CALLER_PATH_"
        )
        self.trims = TRIMS.cell((reason, path))
        self.dropped_turns = DROPPED_TURNS.cell((reason, path))
        self.dropped_messages = DROPPED_MESSAGES.cell((reason, path))
        self.tokens_before = TOKENS_BEFORE.cell((reason,))
        self.tokens_after = TOKENS_AFTER.cell((reason,))


# Each thread's _TrimCells by (reason, caller path): bounded, three reasons and the CallerPath
# values.
_trim_cells = threading.local()


def _new_trim_cells(reason: str, caller_path: trim_pb2.CallerPath.ValueType) -> _TrimCells:
    """The calling thread's cells of (reason, caller path), made on their first use there."""
    try:
        mine: dict[tuple[str, int], _TrimCells] = _trim_cells.by_series
    except AttributeError:
        mine = _trim_cells.by_series = {}
    cells = mine[reason, caller_path] = _TrimCells(reason, caller_path)
    return cells


def observe_trim(
    caller_path: trim_pb2.CallerPath.ValueType,
    reason: str,
    *,
    dropped_turns: int,
    dropped_messages: int,
    tokens_before: int,
    tokens_after: int,
) -> None:
    """One trim that dropped history. `reason`: token_budget, turn_limit or row_limit. Engine
    workers call it as well as the event loop: each thread adds to its own cells."""
    try:
        cells: _TrimCells = _trim_cells.by_series[reason, caller_path]
    except (AttributeError, KeyError):
        cells = _new_trim_cells(reason, caller_path)
    cells.trims.value += 1
    cells.dropped_turns.value += dropped_turns
    cells.dropped_messages.value += dropped_messages
    # HistogramCell.observe, inline (as RpcSeries.finished: two calls fewer per trim).
    histogram = cells.tokens_before
    histogram.counts[bisect.bisect_left(histogram.bounds, tokens_before)] += 1
    histogram.sum += tokens_before
    histogram = cells.tokens_after
    histogram.counts[bisect.bisect_left(histogram.bounds, tokens_after)] += 1
    histogram.sum += tokens_after


def observe_feed_health(healthy: bool) -> None:
    FEED_HEALTHY.set(1 if healthy else 0)
