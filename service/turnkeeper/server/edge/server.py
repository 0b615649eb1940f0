"""The grpc.aio server: its channel options (limits, keepalive) and its one optional interceptor."""

from __future__ import annotations

import grpc
from opentelemetry.sdk.trace import TracerProvider

from turnkeeper.server.config import ServerConfig
from turnkeeper.server.edge.admission import Admission
from turnkeeper.server.edge.load_shed import LoadShedder, channelz_id
from turnkeeper.server.telemetry import tracing

RECEIVE_HEADROOM_BYTES = 1024 * 1024


def server_options(config: ServerConfig) -> list[tuple[str, int]]:
    """gRPC channel arguments: message sizes, stream and connection limits, keepalive policy."""
    options = [
        ("grpc.so_reuseport", 0),
        # gRPC's own refusal of a bigger message carries no details, so it is set a little above
        # the limit, and admission refuses what is between them with ErrorInfo.
        ("grpc.max_receive_message_length", config.max_receive_bytes + RECEIVE_HEADROOM_BYTES),
        ("grpc.max_send_message_length", config.max_send_bytes),
        ("grpc.max_concurrent_streams", config.max_concurrent_streams),
        # No flow-control window growth: a request the server has not started to read (admission
        # refused it, or it waits) stays in the client instead of piling up in this process.
        ("grpc.http2.bdp_probe", 0),
        # A client may ping (keepalive) at most every min_client_ping_seconds, with or without
        # calls; the second ping too early ends its connection (GOAWAY "too_many_pings").
        (
            "grpc.http2.min_ping_interval_without_data_ms",
            int(config.min_client_ping_seconds * 1000),
        ),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.keepalive_permit_without_calls", 1),
        # The server pings quiet peers so that a vanished one (host down, network cut) is
        # noticed and its streams end.
        ("grpc.keepalive_time_ms", int(config.keepalive_seconds * 1000)),
        ("grpc.keepalive_timeout_ms", int(config.keepalive_timeout_seconds * 1000)),
        # A connection that never completes the HTTP/2 handshake is closed after this; one that
        # sent its preface and SETTINGS but never acknowledges ours, too.
        ("grpc.server_handshake_timeout_ms", int(config.handshake_timeout_seconds * 1000)),
        ("grpc.http2.settings_timeout", int(config.handshake_timeout_seconds * 1000)),
    ]
    if config.max_connections:
        options.append(("grpc.max_allowed_incoming_connections", config.max_connections))
    if config.max_connection_idle_seconds:
        options.append(
            ("grpc.max_connection_idle_ms", int(config.max_connection_idle_seconds * 1000))
        )
    if config.max_connection_age_seconds:
        options.append(
            ("grpc.max_connection_age_ms", int(config.max_connection_age_seconds * 1000))
        )
        options.append(("grpc.max_connection_age_grace_ms", int(config.grace_seconds * 1000)))
    return options


def load_shedder(config: ServerConfig, admission: Admission) -> LoadShedder:
    """The load shedder of `config` (edge/load_shed.py); `create_server` shows it the server."""
    return LoadShedder(
        config.shed_queue_ms / 1000,
        config.shed_queue_calls,
        config.shed_interval_ms / 1000,
        admission.limits.retry_after_seconds,
    )


def server_interceptors(
    tracer_provider: TracerProvider | None,
) -> list[grpc.aio.ServerInterceptor]:
    """The server's interceptors: tracing's, when it is on."""
    return [tracing.server_interceptor(tracer_provider)] if tracer_provider else []


def create_server(
    config: ServerConfig, shedder: LoadShedder, tracer_provider: TracerProvider | None
) -> grpc.aio.Server:
    """The server; nothing is registered or bound yet. The edge (authentication, load shedding,
    admission, access log, metrics) wraps each handler as it is registered (`edge/wrapper.py`,
    its stages in `edge/pipeline.py`): a grpc.aio interceptor costs every call. Tracing alone is
    one, so the span is open before the edge runs and the access log and every line below carry
    its trace id."""
    traced = server_interceptors(tracer_provider)
    server, server_id = channelz_id(
        lambda: grpc.aio.server(interceptors=traced, options=server_options(config))
    )
    # The shedder tells how long calls waited from channelz's count of the server's calls.
    shedder.watch(server_id)
    return server
