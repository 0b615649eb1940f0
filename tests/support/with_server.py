#!/usr/bin/env python3
"""Run a command against a live turnkeeper server.

    with_server.py [--secure] [--overloaded] [SERVER FLAGS...] -- CMD ARGS...

Starts `python -m turnkeeper.server` on a free loopback port and a Unix socket in a temp dir,
exports TURNKEEPER_ADDRESS=127.0.0.1:PORT, TURNKEEPER_UNIX=/path/to.sock and
TURNKEEPER_CONFORMANCE_DIR=<repo>/tests/conformance/vectors, runs CMD, stops the server with
SIGTERM and exits with CMD's exit code. Works from any clone: paths come from this file's location.

--secure also issues certificates (support/certs.py, needs trustme) and starts two more servers
that require a bearer token: one with TLS and one with mTLS. It exports
TURNKEEPER_TLS_ADDRESS, TURNKEEPER_MTLS_ADDRESS (both 127.0.0.1:PORT), TURNKEEPER_TLS_CA,
TURNKEEPER_TLS_CLIENT_CERT, TURNKEEPER_TLS_CLIENT_KEY (PEM files), TURNKEEPER_TOKEN (a token
acting as TURNKEEPER_TOKEN_RUNTIME) and TURNKEEPER_TOKEN_NO_EVENTS (a token that may not
subscribe to TrimEvents).

--overloaded also starts a server that refuses every unary call with RESOURCE_EXHAUSTED
(OVERLOADED) + RetryInfo (support/overloaded.py, needs grpcio) and a scripted fake that refuses
as each request asks (support/flaky.py), for the clients' retry tests. It exports
TURNKEEPER_OVERLOADED_ADDRESS and TURNKEEPER_FLAKY_ADDRESS (both 127.0.0.1:PORT).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live import CONFORMANCE_DIR, LiveServer, ServerStartError, start_server

USAGE = "usage: with_server.py [--secure] [--overloaded] [SERVER FLAGS...] -- CMD [ARGS...]"


def _start_secure(servers: list[LiveServer], env: dict[str, str], directory: Path) -> None:
    """The TLS and mTLS servers of --secure, with their certificates and tokens in `env`."""
    from certs import write_credentials

    credentials = write_credentials(directory)
    tls = ["--tls-cert", str(credentials.server_cert), "--tls-key", str(credentials.server_key)]
    auth = ["--auth-tokens", str(credentials.tokens)]
    servers.append(start_server(*tls, *auth, unix=False))
    env["TURNKEEPER_TLS_ADDRESS"] = servers[-1].address
    servers.append(start_server(*tls, *auth, "--tls-client-ca", str(credentials.ca), unix=False))
    env["TURNKEEPER_MTLS_ADDRESS"] = servers[-1].address
    env["TURNKEEPER_TLS_CA"] = str(credentials.ca)
    env["TURNKEEPER_TLS_CLIENT_CERT"] = str(credentials.client_cert)
    env["TURNKEEPER_TLS_CLIENT_KEY"] = str(credentials.client_key)
    env["TURNKEEPER_TOKEN"] = credentials.token
    env["TURNKEEPER_TOKEN_RUNTIME"] = credentials.runtime_id
    env["TURNKEEPER_TOKEN_NO_EVENTS"] = credentials.events_denied_token


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(USAGE, file=sys.stderr)
        return 2
    split = argv.index("--")
    server_flags, command = argv[:split], argv[split + 1 :]
    if not command:
        print(USAGE, file=sys.stderr)
        return 2
    secure = "--secure" in server_flags
    overloaded = "--overloaded" in server_flags
    server_flags = [flag for flag in server_flags if flag not in ("--secure", "--overloaded")]
    env = dict(os.environ)
    extra: list[LiveServer] = []
    releases: list[Callable[[], None]] = []
    certificates = Path(tempfile.mkdtemp(prefix="tk-certs-"))
    try:
        server = start_server(*server_flags)
        if secure:
            _start_secure(extra, env, certificates)
        if overloaded:
            import flaky
            import overloaded as overload

            extra.append(start_server(*overload.SERVER_FLAGS, unix=False))
            releases.append(overload.hold(extra[-1].address))
            env["TURNKEEPER_OVERLOADED_ADDRESS"] = extra[-1].address
            fake, env["TURNKEEPER_FLAKY_ADDRESS"] = flaky.start()
            releases.append(lambda: fake.stop(None))
    except ServerStartError as error:
        print(f"with_server: {error}", file=sys.stderr)
        for release in releases:
            release()
        for started in extra:
            started.stop()
        shutil.rmtree(certificates, ignore_errors=True)
        return 1
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
        for release in releases:
            release()
        for started in extra:
            started.stop()
        shutil.rmtree(certificates, ignore_errors=True)
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
