"""The one error a sidecar that cannot start raises; its message tells the operator why."""

from __future__ import annotations


class StartupError(Exception):
    """The sidecar cannot start; the message tells the operator why."""
