"""TLS, mTLS and bearer tokens against real servers (`with_server.py --secure`)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from turnkeeper.v1 import history_service_pb2 as svc

from turnkeeper_client import (
    AsyncTurnkeeperClient,
    TurnkeeperClient,
    TurnkeeperError,
    tls_credentials,
)

from .helpers import three_turns


@dataclass(frozen=True)
class Secure:
    tls: str
    mtls: str
    ca: str
    client_cert: str
    client_key: str
    token: str
    runtime: str
    no_events_token: str


@pytest.fixture(scope="module")
def secure() -> Secure:
    names = (
        "TLS_ADDRESS", "MTLS_ADDRESS", "TLS_CA", "TLS_CLIENT_CERT", "TLS_CLIENT_KEY",
        "TOKEN", "TOKEN_RUNTIME", "TOKEN_NO_EVENTS",
    )  # fmt: skip
    values = [os.environ.get(f"TURNKEEPER_{name}") for name in names]
    if None in values:
        if os.environ.get("TURNKEEPER_ADDRESS"):
            pytest.fail("with_server.py ran without --secure: TURNKEEPER_TLS_* are missing")
        pytest.skip("needs the secure servers of tests/support/with_server.py --secure")
    return Secure(*(str(value) for value in values))


def estimate() -> svc.EstimateTokensRequest:
    return svc.EstimateTokensRequest(history=three_turns())


def test_tls_with_a_token(secure: Secure) -> None:
    with TurnkeeperClient.connect(
        secure.tls, credentials=tls_credentials(ca=secure.ca), token=secure.token
    ) as client:
        assert client.estimate_tokens(estimate()).turns == 3


def test_tls_without_a_token_is_unauthenticated(secure: Secure) -> None:
    with (
        TurnkeeperClient.connect(secure.tls, credentials=tls_credentials(ca=secure.ca)) as client,
        pytest.raises(TurnkeeperError) as caught,
    ):
        client.estimate_tokens(estimate())
    assert caught.value.code.name == "UNAUTHENTICATED"
    assert caught.value.reason == "ERROR_REASON_UNAUTHENTICATED"
    # The server's id of the call, to find its log line.
    assert caught.value.request_id and caught.value.request_id in str(caught.value)
    assert not caught.value.hint


def test_mtls_with_a_client_certificate_and_a_token(secure: Secure) -> None:
    credentials = tls_credentials(
        ca=secure.ca, client_cert=secure.client_cert, client_key=secure.client_key
    )
    with TurnkeeperClient.connect(
        secure.mtls, credentials=credentials, token=secure.token
    ) as client:
        assert client.estimate_tokens(estimate()).turns == 3


def test_mtls_without_a_client_certificate_fails(secure: Secure) -> None:
    with (
        TurnkeeperClient.connect(
            secure.mtls, credentials=tls_credentials(ca=secure.ca), token=secure.token, timeout=5
        ) as client,
        pytest.raises(TurnkeeperError) as caught,
    ):
        client.estimate_tokens(estimate())
    assert caught.value.code.name == "UNAVAILABLE"
    # grpc says only "Socket closed"; the client knows it sent no certificate.
    assert "client_cert=" in caught.value.hint and "likely:" in str(caught.value)


def test_a_plaintext_client_on_a_tls_port_is_told_to_connect_with_tls(secure: Secure) -> None:
    with (
        TurnkeeperClient.connect(secure.tls, token=secure.token, timeout=5) as client,
        pytest.raises(TurnkeeperError) as caught,
    ):
        client.estimate_tokens(estimate())
    assert caught.value.code.name == "UNAVAILABLE"
    assert "credentials=tls_credentials(" in caught.value.hint


def test_a_tls_client_on_a_plaintext_port_is_told_so(secure: Secure) -> None:
    with (
        TurnkeeperClient.connect(
            os.environ["TURNKEEPER_ADDRESS"], credentials=tls_credentials(ca=secure.ca), timeout=5
        ) as client,
        pytest.raises(TurnkeeperError) as caught,
    ):
        client.estimate_tokens(estimate())
    assert "does not speak TLS" in caught.value.hint


async def test_asyncio_client_with_mtls_and_a_token(secure: Secure) -> None:
    credentials = tls_credentials(
        ca=secure.ca, client_cert=secure.client_cert, client_key=secure.client_key
    )
    async with AsyncTurnkeeperClient.connect(
        secure.mtls, credentials=credentials, token=secure.token
    ) as client:
        assert (await client.estimate_tokens(estimate())).turns == 3


def test_tls_credentials_need_cert_and_key_together(secure: Secure) -> None:
    with pytest.raises(ValueError, match="together"):
        tls_credentials(ca=secure.ca, client_cert=secure.client_cert)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TURNKEEPER_TOKEN"}
    return subprocess.run(
        [sys.executable, "-m", "turnkeeper_client", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_the_cli_connects_with_tls_mtls_and_a_token(secure: Secure, tmp_path: Path) -> None:
    history = tmp_path / "history.json"
    history.write_text('{"messages": [{"role": "user", "content": "hello"}]}')
    tls = ["--address", secure.tls, "--tls-ca", secure.ca, "--token", secure.token]
    result = run_cli("estimate", str(history), *tls)
    assert result.returncode == 0, result.stderr
    mtls = ["--address", secure.mtls, "--tls-ca", secure.ca, "--token", secure.token]
    client = ["--tls-cert", secure.client_cert, "--tls-key", secure.client_key]
    result = run_cli("estimate", str(history), *mtls, *client)
    assert result.returncode == 0, result.stderr
    refused = run_cli("estimate", str(history), "--address", secure.tls, "--tls-ca", secure.ca)
    assert refused.returncode != 0
    assert "UNAUTHENTICATED" in refused.stderr


def test_trim_events_with_a_token_and_a_token_without_that_right(secure: Secure) -> None:
    credentials = tls_credentials(ca=secure.ca)
    with TurnkeeperClient.connect(
        secure.tls, credentials=credentials, token=secure.token
    ) as client:
        watch = client.watch_trims()
        try:
            assert next(iter(watch)).WhichOneof("item") == "heartbeat"
        finally:
            watch.close()
    with TurnkeeperClient.connect(
        secure.tls, credentials=credentials, token=secure.no_events_token
    ) as client:
        watch = client.watch_trims()
        with pytest.raises(TurnkeeperError) as caught:
            next(iter(watch))
        watch.close()
    assert caught.value.reason == "ERROR_REASON_PERMISSION_DENIED"
