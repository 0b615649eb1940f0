"""The ready file (`--ready-file`): the addresses a started sidecar listens on, for supervisors
and tests that bind port 0 and must learn the port. It exists only while the sidecar serves."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile


def write_ready_file(path: str, tcp: list[str], unix: list[str], http: str | None) -> None:
    """Atomic: a reader sees either no file or the whole JSON document."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".ready-", dir=directory)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump({"tcp": tcp, "unix": unix, "http": http, "pid": os.getpid()}, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def remove_ready_file(path: str | None) -> None:
    """Removes the ready file, if one is configured and present."""
    if path:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
