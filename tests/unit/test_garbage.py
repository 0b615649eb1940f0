"""The server freezes what startup made, after collecting startup's garbage (`server/garbage.py`),
so that no full collection visits it again. Each case runs in a child process: freezing is for the
whole process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import turnkeeper.server.garbage as garbage

SERVICE = Path(garbage.__file__).resolve().parents[2]

FREEZE = """
import gc, weakref
from turnkeeper.server.garbage import freeze_startup_objects

class Node:
    pass

cycle = Node(); cycle.self = cycle
dead = weakref.ref(cycle)
del cycle  # garbage only the cyclic collector can free
kept = Node()
kept.items = [Node() for _ in range(3)]
assert gc.get_freeze_count() == 0
freeze_startup_objects()
assert dead() is None, "startup's garbage was frozen instead of collected"
assert gc.get_freeze_count() > 1000, gc.get_freeze_count()
tracked = {id(obj) for obj in gc.get_objects()}
assert id(kept) not in tracked and id(kept.items) not in tracked, "a live object was not frozen"
later = [Node()]
assert id(later) in {id(obj) for obj in gc.get_objects()}, "objects made later are collected"
print("ok")
"""

MAIN = """
import asyncio, gc
import turnkeeper.server.__main__ as entry

seen = []

def run(coroutine):
    seen.append(gc.get_freeze_count())
    coroutine.close()

asyncio.run = run
assert entry.main(["--listen", "127.0.0.1:0"]) == 0
assert len(seen) == 1 and seen[0] > 10000, seen
print("ok")
"""


def _child(code: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(SERVICE), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_startup_garbage_is_collected_and_the_live_objects_frozen() -> None:
    _child(FREEZE)


def test_the_server_freezes_its_startup_objects_before_it_serves() -> None:
    _child(MAIN)
