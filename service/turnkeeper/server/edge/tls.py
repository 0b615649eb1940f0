"""TLS and mTLS for the TCP listeners, with certificates re-read when their files change.

grpc calls the fetcher before each new handshake; it compares the files' modification times
(three stats) and hands grpc a new certificate configuration only when one changed, so a
rotated certificate (cert-manager, a Kubernetes Secret update, certbot) applies to the next
connection without a restart. Established connections keep the certificate they started with.

Every port gets its own credentials and its own file stamps: grpc asks a credentials object
for its initial configuration once, and asks its fetcher when each further port starts, so a
fetcher shared by two ports would answer "unchanged" to the second, which then fails to start
("Failed loading SSL server credentials from fetcher"); and after a rotation the first port to
notice would be the only one to reload.
The ops port (aiohttp) gets the same behaviour from `ReloadingSSLContext`.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading

import grpc

log = logging.getLogger("turnkeeper.tls")


class CertificateError(Exception):
    """The certificate files cannot be used; the message says which and why."""


def _stamps(paths: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    try:
        return tuple((s.st_mtime_ns, s.st_size) for s in map(os.stat, paths))
    except OSError as error:
        raise CertificateError(f"{error.filename}: {error.strerror}") from None


class ReloadingSSLContext:
    """A server `ssl.SSLContext` (`.context`) whose certificate follows its files.

    OpenSSL calls the server-name callback on every ClientHello (with or without SNI); it swaps
    in a context loaded again when a file changed, and keeps the previous one mid-rotation.
    """

    def __init__(self, cert_path: str, key_path: str) -> None:
        self._paths = (cert_path, key_path)
        self._stamp = _stamps(self._paths)
        self._current = self._load()
        self.context = self._load()
        self.context.sni_callback = self._pick

    def _load(self) -> ssl.SSLContext:
        cert, key = self._paths
        try:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as error:
            raise CertificateError(f"cannot use {cert} / {key} for the ops port: {error}") from None
        return context

    def _pick(self, connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        try:
            stamp = _stamps(self._paths)
            if stamp != self._stamp:
                self._current = self._load()
                self._stamp = stamp
                log.info("reloaded the ops port's TLS certificate from %s", self._paths[0])
        except CertificateError as error:
            log.warning("keeping the ops port's current certificate: %s", error)
        connection.context = self._current


class RotatingCertificates:
    """The server certificate, key and optional client CA, reloaded when a file changes."""

    def __init__(self, cert_path: str, key_path: str, client_ca_path: str | None) -> None:
        self._paths = tuple(p for p in (cert_path, key_path, client_ca_path) if p is not None)
        self._cert_path, self._key_path, self._client_ca_path = cert_path, key_path, client_ca_path
        self._lock = threading.Lock()
        self._stamp = self._stamps()
        self.initial = self._load()

    def _stamps(self) -> tuple[tuple[int, int], ...]:
        return _stamps(self._paths)

    def _load(self) -> grpc.ServerCertificateConfiguration:
        # The ssl module checks that the key matches the certificate; grpc would only fail
        # at the first handshake.
        try:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self._cert_path, self._key_path)
            if self._client_ca_path is not None:
                context.load_verify_locations(self._client_ca_path)
        except (OSError, ssl.SSLError) as error:
            raise CertificateError(
                f"cannot use --tls-cert {self._cert_path} / --tls-key {self._key_path}"
                + (f" / --tls-client-ca {self._client_ca_path}" if self._client_ca_path else "")
                + f": {error}"
            ) from None
        with open(self._cert_path, "rb") as cert, open(self._key_path, "rb") as key:
            pair = (key.read(), cert.read())
        root = None
        if self._client_ca_path is not None:
            with open(self._client_ca_path, "rb") as ca:
                root = ca.read()
        return grpc.ssl_server_certificate_configuration([pair], root_certificates=root)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """grpc's certificate_configuration_fetcher: a new configuration, or None to keep it."""
        with self._lock:
            try:
                stamp = self._stamps()
                if stamp == self._stamp:
                    return None
                config = self._load()
            except CertificateError as error:
                # Mid-rotation (key written, cert not yet): keep serving with the old pair.
                log.warning("keeping the current certificate: %s", error)
                return None
            self._stamp = stamp
            log.info("reloaded the TLS certificate from %s", self._cert_path)
            return config


def server_credentials(
    cert_path: str, key_path: str, client_ca_path: str | None
) -> grpc.ServerCredentials:
    """TLS credentials for one port; with a client CA, clients must present a certificate it
    signed (mTLS). Call it once per port (see the module's docstring)."""
    certificates = RotatingCertificates(cert_path, key_path, client_ca_path)
    return grpc.dynamic_ssl_server_credentials(
        certificates.initial,
        # grpc documents None as "keep the current configuration"; the stubs omit it.
        certificates.fetch,  # type: ignore[arg-type]
        require_client_authentication=client_ca_path is not None,
    )
