"""The installed server's version: the repository's VERSION file, as the package metadata has it.

`--version`, the startup line, the `turnkeeper_build` metric and the trace resource all read it
here.
"""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "turnkeeper"


def distribution_version(name: str) -> str:
    """The installed version of the distribution `name`, or "unknown" when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


def server_version() -> str:
    """The version of the installed `turnkeeper` distribution."""
    return distribution_version(DISTRIBUTION)
