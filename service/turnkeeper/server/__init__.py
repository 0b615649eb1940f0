"""The turnkeeper sidecar: gRPC adapters over the turnkeeper engine (ARCHITECTURE.md maps it).

`Sidecar(config).start()` / `.stop()` run one in-process; `python -m turnkeeper.server` runs one
until SIGTERM.
"""

from turnkeeper.server.app import Sidecar, StartupError, serve
from turnkeeper.server.config import ServerConfig

__all__ = ["ServerConfig", "Sidecar", "StartupError", "serve"]
