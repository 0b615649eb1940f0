"""grpc core's own log lines, rewritten as records of the sidecar's logger (text or JSON).

grpc core (C++, absl logging) writes its lines straight to file descriptor 2, past Python's
logging: `I1201 13:54:32.461335   29451 ssl_transport_security.cc:2563] Handshake failed ...`.
`route_core_logs` points descriptor 2 at a pipe read by a relay process forked from the sidecar
before it serves; the relay turns each line into a record of logger `grpc.core` (the level from
its letter, `source` file:line) written by the same handler and formatter, and lines in no absl
format (a crash report) into WARNING records of logger `stderr`. Python's own writes
(`sys.stderr`: the log handler, tracebacks, warnings) keep the original descriptor. The relay
ignores SIGINT and SIGTERM and ends when the pipe closes, so the lines of a crash still come
out; at a normal exit the sidecar hands descriptor 2 back and waits for it to drain.

A failed TLS handshake is only visible here, and the client cannot tell the causes apart (it
sees "Socket closed"), so the relay names them: the record's `cause` and a message saying what
the client did (`plaintext_client`, `no_client_certificate`, `untrusted_client_certificate`,
`client_rejected_server_certificate`). grpc does not log the peer's address with these lines.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import sys
import time

from turnkeeper.server.telemetry.log_handler import flush_logs

log = logging.getLogger("grpc.core")
_other = logging.getLogger("stderr")

# absl: severity letter, MMDD, time, thread id, file:line, "] ", message.
_ABSL_LINE = re.compile(
    r"(?P<severity>[IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ (?P<source>[^\]\s]+)\] "
    r"(?P<message>.*)"
)
_LEVELS = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}
# OpenSSL/BoringSSL reasons in grpc's "Handshake failed" line, as what the client did.
HANDSHAKE_CAUSES = (
    (
        ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "PACKET_LENGTH_TOO_LONG", "RECORD_TOO_LARGE"),
        "plaintext_client",
        "a client without TLS connected to this TLS port (it must connect with TLS)",
    ),
    (
        ("PEER_DID_NOT_RETURN_A_CERTIFICATE",),
        "no_client_certificate",
        "a TLS client sent no client certificate, which this port requires (--tls-client-ca)",
    ),
    (
        ("CERTIFICATE_VERIFY_FAILED",),
        "untrusted_client_certificate",
        "a TLS client sent a certificate not signed by --tls-client-ca",
    ),
    (
        (
            "TLSV1_ALERT_UNKNOWN_CA",
            "SSLV3_ALERT_BAD_CERTIFICATE",
            "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        ),
        "client_rejected_server_certificate",
        "the client does not trust this server's certificate (its CA or name)",
    ),
)
_DRAIN_SECONDS = 2.0


def handshake_cause(message: str) -> tuple[str, str] | None:
    """The cause code and explanation of a handshake-failure line, if it is one."""
    if "Handshake failed" not in message:
        return None
    upper = message.upper()
    for markers, cause, explanation in HANDSHAKE_CAUSES:
        if any(marker in upper for marker in markers):
            return cause, explanation
    return None


def relay_line(line: str) -> None:
    """Writes one line of grpc core's output as a log record."""
    match = _ABSL_LINE.fullmatch(line)
    if match is None:
        if line.strip():
            _other.warning("%s", line)
        return
    message = match["message"]
    extra: dict[str, str] = {"source": match["source"]}
    cause = handshake_cause(message)
    if cause is not None:
        extra["cause"] = cause[0]
        message = f"TLS handshake refused: {cause[1]} ({message})"
    log.log(_LEVELS[match["severity"]], "%s", message, extra=extra)


def _relay(read_fd: int) -> None:
    with os.fdopen(read_fd, "rb") as pipe:
        for raw in pipe:
            try:
                relay_line(raw.decode(errors="replace").rstrip("\r\n"))
            except Exception:  # a line is never lost to a bug here: out as it came
                os.write(2, raw)


def route_core_logs() -> None:
    """From here on, whatever is written to descriptor 2 comes out as log records.

    Call it once, after logging is configured and before the server starts (no other threads).
    """
    read_fd, write_fd = os.pipe()
    original = os.dup(2)
    flush_logs()  # nothing held for the old descriptor 2, nothing copied into the relay
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the relay
        code = 0
        try:
            os.close(write_fd)
            os.dup2(original, 2)
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_IGN)
            _relay(read_fd)
            logging.shutdown()
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(read_fd)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    stream = os.fdopen(original, "w", buffering=1, errors="backslashreplace")
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr:
            handler.setStream(stream)
    sys.stderr = stream
    atexit.register(_stop_relay, pid, original)


def _stop_relay(pid: int, original: int) -> None:
    flush_logs()  # the sidecar's last lines first (logging.shutdown runs after this)
    # Descriptor 2 back to the real stderr closes the pipe; the relay drains it and exits.
    os.dup2(original, 2)
    deadline = time.monotonic() + _DRAIN_SECONDS
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.01)
