"""The security the configuration asks for: TLS credentials, the token interceptor, warnings.

TLS (`tls.py`) covers the TCP listeners; a Unix socket is guarded by its file permissions.
Tokens (`auth.py`) apply to every listener.
"""

from __future__ import annotations

import grpc

from turnkeeper.server.config import ServerConfig, is_loopback
from turnkeeper.server.edge.auth import TokenAuthInterceptor, TokenFileError, load_tokens
from turnkeeper.server.edge.tls import CertificateError, server_credentials
from turnkeeper.server.startup import StartupError


def security(
    config: ServerConfig,
) -> tuple[list[grpc.ServerCredentials | None], list[grpc.aio.ServerInterceptor]]:
    """TLS credentials for each TCP listener (None: plaintext), in `config.listen` order, and
    the token interceptor, as configured."""
    credentials: list[grpc.ServerCredentials | None] = [None] * len(config.listen)
    if config.tls_cert is not None and config.tls_key is not None:
        cert, key, client_ca = config.tls_cert, config.tls_key, config.tls_client_ca
        try:
            # One object per port: grpc cannot share dynamic credentials between ports.
            credentials = [server_credentials(cert, key, client_ca) for _ in config.listen]
        except CertificateError as error:
            raise StartupError(str(error)) from None
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if config.auth_tokens is not None:
        try:
            interceptors.append(TokenAuthInterceptor(load_tokens(config.auth_tokens)))
        except TokenFileError as error:
            raise StartupError(str(error)) from None
    return credentials, interceptors


def exposure_warnings(config: ServerConfig) -> list[str]:
    """What an operator must hear about TCP listeners other machines can reach."""
    exposed = [address for address in config.listen if not is_loopback(address)]
    if not exposed:
        return []
    where = ", ".join(exposed)
    warnings = []
    if config.tls_cert is None:
        warnings.append(
            f"listening on {where} without TLS: histories cross the network in plaintext "
            "(set --tls-cert and --tls-key)"
        )
    if config.auth_tokens is None:
        warnings.append(
            f"listening on {where} without authentication: anyone who reaches the port can "
            "call every RPC (set --auth-tokens)"
        )
    return warnings
