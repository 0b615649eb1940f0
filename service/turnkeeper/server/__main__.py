"""`python -m turnkeeper.server [flags]`: run the sidecar until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import sys

from turnkeeper.server import allocator, garbage
from turnkeeper.server.app import StartupError, serve
from turnkeeper.server.config import cgroup_memory_limit, parse_config
from turnkeeper.server.ops.dashboard import dashboard_routes_for
from turnkeeper.server.telemetry.core_logs import route_core_logs
from turnkeeper.server.telemetry.logs import configure_logging


def main(argv: list[str] | None = None) -> int:
    config = parse_config(argv)
    allocator.configure(cgroup_memory_limit())  # before any thread of the server allocates
    configure_logging(config.log_level, config.log_format)
    # grpc core's C++ lines (TLS handshake failures among them) through the same logger.
    route_core_logs()
    # The ops port (--http) serves the live dashboard at / next to /metrics and the probes.
    ops_routes = (dashboard_routes_for(config),)
    garbage.freeze_startup_objects()  # last: no full collection visits what startup made
    try:
        asyncio.run(serve(config, ops_routes=ops_routes))
    except StartupError as error:
        logging.getLogger("turnkeeper.server").error("cannot start: %s", error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
