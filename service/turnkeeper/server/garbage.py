"""Python's cyclic garbage collector in a long-running server: the objects startup made (modules,
classes, functions, configuration) are frozen, out of every later collection.

A full collection visits every tracked object and holds the event loop while it does, every call
in flight waiting it out; nearly all of that time went on the startup objects, which never become
garbage. Frozen, they are out of every collection, young or full (docs/benchmarks.md, "A fifth pass:
the collector's pauses", has the measurement).
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Collects what startup left as garbage, then moves every object still tracked to the
    collector's permanent generation. Called once, after imports and configuration, before the
    server starts; a frozen object is still freed when its last reference goes."""
    gc.collect()
    gc.freeze()
