"""Prometheus metrics of the sidecar: RPCs, trims, the event feed, the engine and the build.

The RPC families follow the go-grpc-prometheus names (`grpc_server_*`), so stock gRPC
dashboards work; everything else is `turnkeeper_*`. Labels never carry message text or ids,
only bounded sets (method, code, reason, path, cause). Collectors live in one module-level
registry, as prometheus-client intends, and are thread-safe: engine workers record into them.
The feed's counters are recorded by `events/metered.py`, each RPC's by `edge/access_log.py`.

The families every call and every trim updates are `CounterFamily` / `HistogramFamily`
(`metric_families.py`: per-thread cells, no lock per update), the rest prometheus-client's own
collectors; both expose the same way.
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Sequence

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

from turnkeeper.server.telemetry.metric_families import (
    CounterCell,
    CounterFamily,
    HistogramFamily,
)
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

# Counted per event and per delivery (one per subscriber a trim reaches), so per-thread cells too.
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
        cells.seconds.observe(seconds)
        cells.request_bytes.observe(request_bytes)
        cells.response_bytes.observe(response_bytes)
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
    """One trim that dropped history, or a §13.4 clearing. `reason`: token_budget, turn_limit,
    row_limit or tool_results_cleared. Engine workers call it as well as the event loop: each
    thread adds to its own cells."""
    try:
        cells: _TrimCells = _trim_cells.by_series[reason, caller_path]
    except (AttributeError, KeyError):
        cells = _new_trim_cells(reason, caller_path)
    cells.trims.value += 1
    cells.dropped_turns.value += dropped_turns
    cells.dropped_messages.value += dropped_messages
    cells.tokens_before.observe(tokens_before)
    cells.tokens_after.observe(tokens_after)


def observe_feed_health(healthy: bool) -> None:
    FEED_HEALTHY.set(1 if healthy else 0)
