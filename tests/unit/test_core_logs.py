"""grpc core's absl lines become log records; TLS handshake failures name their cause."""

from __future__ import annotations

import logging

import pytest
from turnkeeper.server.telemetry.core_logs import handshake_cause, relay_line

PREFIX = "I1201 13:54:32.461335   29451 ssl_transport_security.cc:2563] "


@pytest.mark.parametrize(
    ("reason", "cause"),
    [
        ("WRONG_VERSION_NUMBER", "plaintext_client"),
        ("HTTP_REQUEST", "plaintext_client"),
        ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "no_client_certificate"),
        ("CERTIFICATE_VERIFY_FAILED", "untrusted_client_certificate"),
        ("TLSV1_ALERT_UNKNOWN_CA", "client_rejected_server_certificate"),
    ],
)
def test_handshake_failures_name_their_cause(reason: str, cause: str) -> None:
    line = f"Handshake failed with error SSL_ERROR_SSL: error:1:SSL routines:X:{reason}: ctx"
    assert handshake_cause(line) is not None and handshake_cause(line)[0] == cause  # type: ignore[index]
    assert handshake_cause(f"Something else: {reason}") is None


def test_lines_become_records_at_their_level(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        relay_line("E1201 13:42:59.923228   17650 add_port.cc:83] Failed to add port to server")
        relay_line(PREFIX + "Handshake failed with error SSL_ERROR_SSL: x:WRONG_VERSION_NUMBER: y")
        relay_line("Fatal Python error: Segmentation fault")
        relay_line("")
    first, second, third = caplog.records
    assert (first.name, first.levelno, first.getMessage()) == (
        "grpc.core",
        logging.ERROR,
        "Failed to add port to server",
    )
    assert first.source == "add_port.cc:83"  # type: ignore[attr-defined]
    assert second.cause == "plaintext_client"  # type: ignore[attr-defined]
    assert second.levelno == logging.INFO
    assert (third.name, third.levelno) == ("stderr", logging.WARNING)
