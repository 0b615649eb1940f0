"""The services the sidecar serves, by name, and the method paths other rooms match calls on.

gRPC hands interceptors the full method path (`/package.Service/Method`): authentication,
admission and the access log decide by it, so the paths and prefixes are written here once.
"""

from __future__ import annotations

from grpc_health.v1 import health

from turnkeeper.v1 import history_service_pb2

SERVICE = history_service_pb2.DESCRIPTOR.services_by_name["HistoryService"]
SERVICE_NAME: str = SERVICE.full_name


def method_path(method: str) -> str:
    """The full path gRPC names a HistoryService method by: `/turnkeeper.v1.HistoryService/M`."""
    return f"/{SERVICE_NAME}/{method}"


TRIM_EVENTS_METHOD = method_path("TrimEvents")

# The methods grpc aio accepts through an outstanding request of their own (registered method
# handlers), so that a flood of one does not hold up the others: the per-call ones and the
# probe. Every other method (rare: subscriptions, sweeps, caps, classification, health's Watch
# and List, reflection) shares one generic accept. Each registered method costs every accepted
# call a little (grpc aio's serving loop waits on all the outstanding requests at once), so only
# the methods called per model call have their own (docs/benchmarks.md has the measurement).
OWN_ACCEPT_METHODS = frozenset(
    [
        *(method_path(name) for name in ("TrimHistory", "PrepareModelCall", "EstimateTokens")),
        method_path("ResolveBudget"),
        f"/{health.SERVICE_NAME}/Check",
    ]
)

# grpc.health.v1: probes (kubelet, load balancers) call it constantly, and never with a token.
HEALTH_PREFIX = f"/{health.SERVICE_NAME}/"
# Server reflection, v1alpha and v1 alike (`/grpc.reflection.v1alpha.ServerReflection/...`).
REFLECTION_PREFIX = "/grpc.reflection."
# The cheap introspection calls: admission never refuses them (a probe must see a busy server)
# and the access log writes them at DEBUG. Authentication exempts HEALTH_PREFIX alone.
PROBE_PREFIXES = (HEALTH_PREFIX, REFLECTION_PREFIX)
