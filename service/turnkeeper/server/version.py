"""The installed server's version: the repository's VERSION file, as the package metadata has it."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "turnkeeper"


def server_version() -> str:
    """The version of the installed `turnkeeper` distribution."""
    return metadata.version(DISTRIBUTION)
