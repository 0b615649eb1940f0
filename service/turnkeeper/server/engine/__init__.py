"""The history engines: `create_engine` picks one; both implement `protocol.Engine`.

`python.py` is the reference engine (the pure-Python core), `native.py` the adapter of the Rust
scanner (`service/turnkeeper-native`). They answer byte-identically.
"""

from __future__ import annotations

import importlib

from turnkeeper.server.engine.protocol import NATIVE, PYTHON, Engine
from turnkeeper.server.engine.python import PythonEngine


def native_available() -> bool:
    """Whether the Rust extension (`turnkeeper._native`) was built into this installation."""
    try:
        importlib.import_module("turnkeeper._native")
    except ImportError:
        return False
    return True


def default_engine_name() -> str:
    return NATIVE if native_available() else PYTHON


class EngineUnavailableError(Exception):
    """The configured engine cannot run in this installation."""


def create_engine(name: str | None) -> Engine:
    """The named engine; None picks the native one when it is built, else the Python one."""
    chosen = name or default_engine_name()
    if chosen == PYTHON:
        return PythonEngine()
    if not native_available():
        raise EngineUnavailableError(
            "the native engine is not built into this installation (it needs cargo when "
            "turnkeeper is installed); use --engine python"
        )
    # The extension is imported only here.
    from turnkeeper.server.engine.native import NativeEngine

    return NativeEngine()


__all__ = [
    "NATIVE",
    "PYTHON",
    "Engine",
    "EngineUnavailableError",
    "create_engine",
    "default_engine_name",
    "native_available",
]
