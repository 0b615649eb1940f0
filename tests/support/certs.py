"""Real certificates and a token file for TLS, mTLS and token tests, generated at test time.

`write_credentials(directory)` issues, with trustme (cryptography underneath), a CA, a server
certificate for 127.0.0.1, ::1 and localhost, and a client certificate, and writes them as PEM
files with a token file; the paths come back as a `Credentials`. Every client's tests get them
through `with_server.py --secure`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import trustme

TEST_RUNTIME = "tk-test-runtime"
# Random (128 bits and more, as the server requires), fixed so a failing test's log can be read.
TEST_TOKEN = "tk-test-token-5bfb03e10354276afc18e300da6c4a2e"
EVENTS_DENIED_TOKEN = "tk-no-events-token-553ea20211a281188866ac20af8e1c9e"
ANY_RUNTIME_TOKEN = "tk-operator-token-eb2c7b20973adf43291714143f226633"


@dataclass(frozen=True)
class Credentials:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    tokens: Path
    runtime_id: str = TEST_RUNTIME
    token: str = TEST_TOKEN
    events_denied_token: str = EVENTS_DENIED_TOKEN
    operator_token: str = ANY_RUNTIME_TOKEN

    def rotate_server_pair(self) -> Path:
        """Replaces the server certificate and key with ones from a new CA; returns its PEM."""
        ca = trustme.CA()
        new_ca = self.ca.with_name("rotated-ca.pem")
        ca.cert_pem.write_to_path(str(new_ca))
        issue_server_pair(ca, self.server_cert, self.server_key)
        return new_ca


def issue_server_pair(ca: trustme.CA, cert: Path, key: Path) -> None:
    """A server certificate for the loopback names, written so that its mtime moves."""
    issued = ca.issue_cert("127.0.0.1", "::1", "localhost")
    issued.private_key_pem.write_to_path(str(key))
    for index, pem in enumerate(issued.cert_chain_pems):
        pem.write_to_path(str(cert), append=index > 0)
    # A rotation within one mtime tick must still be seen as a change.
    stamp = cert.stat().st_mtime_ns + 1_000_000_000
    for path in (cert, key):
        os.utime(path, ns=(stamp, stamp))


def write_token_file(path: Path) -> None:
    path.write_text(
        "[[tokens]]\n"
        f'token = "{TEST_TOKEN}"\n'
        f'runtime_id = "{TEST_RUNTIME}"\n'
        "\n[[tokens]]\n"
        f'token = "{EVENTS_DENIED_TOKEN}"\n'
        f'runtime_id = "{TEST_RUNTIME}"\n'
        "trim_events = false\n"
        "\n[[tokens]]\n"
        f'token = "{ANY_RUNTIME_TOKEN}"\n'
        'runtime_id = "*"\n'
        "read_all_runtimes = true\n"
    )
    path.chmod(0o600)


def write_credentials(directory: Path) -> Credentials:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    credentials = Credentials(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        tokens=directory / "tokens.toml",
    )
    ca.cert_pem.write_to_path(str(credentials.ca))
    issue_server_pair(ca, credentials.server_cert, credentials.server_key)
    client = ca.issue_cert("tk-test-client@example.invalid")
    client.private_key_pem.write_to_path(str(credentials.client_key))
    client.cert_chain_pems[0].write_to_path(str(credentials.client_cert))
    write_token_file(credentials.tokens)
    return credentials
