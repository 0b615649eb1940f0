#!/usr/bin/env python3
"""Run a command against a live turnkeeper server.

    with_server.py [SERVER FLAGS...] -- CMD ARGS...

Starts `python -m turnkeeper.server` on a free loopback port and a Unix socket in a temp dir,
exports TURNKEEPER_ADDRESS=127.0.0.1:PORT, TURNKEEPER_UNIX=/path/to.sock and
TURNKEEPER_CONFORMANCE_DIR=<repo>/tests/conformance/vectors, runs CMD, stops the server with
SIGTERM and exits with CMD's exit code. Works from any clone: paths come from this file's location.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live import CONFORMANCE_DIR, ServerStartError, start_server

USAGE = "usage: with_server.py [SERVER FLAGS...] -- CMD [ARGS...]"


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(USAGE, file=sys.stderr)
        return 2
    split = argv.index("--")
    server_flags, command = argv[:split], argv[split + 1 :]
    if not command:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        server = start_server(*server_flags)
    except ServerStartError as error:
        print(f"with_server: {error}", file=sys.stderr)
        return 1
    env = dict(os.environ)
    env["TURNKEEPER_ADDRESS"] = server.address
    if server.unix_path:
        env["TURNKEEPER_UNIX"] = server.unix_path
    env["TURNKEEPER_CONFORMANCE_DIR"] = str(CONFORMANCE_DIR)
    code = 1
    try:
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as error:
            print(f"with_server: cannot run {command[0]}: {error}", file=sys.stderr)
            return 127
        try:
            code = child.wait()
        except KeyboardInterrupt:
            # A terminal ^C reached the command too; give it a moment, then end it.
            try:
                code = child.wait(5)
            except subprocess.TimeoutExpired:
                child.terminate()
                try:
                    code = child.wait(5)
                except subprocess.TimeoutExpired:
                    child.kill()
                    code = child.wait()
        if code < 0:  # killed by a signal: report it the way a shell does
            code = 128 - code
        return code
    finally:
        died_early = not server.alive()
        log = server.log_text()
        server_code = server.stop()
        if died_early:
            print(
                f"with_server: the server exited during the command (code {server_code}); "
                f"its log:\n{log}",
                file=sys.stderr,
            )
        elif server_code != 0:
            print(
                f"with_server: the server exited with code {server_code} on SIGTERM; "
                f"its log:\n{log}",
                file=sys.stderr,
            )
        elif code != 0 and os.environ.get("TURNKEEPER_SERVER_LOG") == "1":
            print(f"with_server: server log:\n{log}", file=sys.stderr)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the server on SIGTERM too
    sys.exit(main(sys.argv[1:]))
