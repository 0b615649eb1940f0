"""Connection targets, channel options and deadline defaults shared by both clients."""

from __future__ import annotations

import enum
import os
import weakref
from collections.abc import Sequence
from typing import Literal

import grpc

# The server accepts messages up to 64 MiB; a long history with inline images gets close to that.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Per-call deadline for unary RPCs unless overridden; every RPC is CPU-bound and fast.
DEFAULT_TIMEOUT = 10.0

ChannelOption = tuple[str, int | str]
Metadata = Sequence[tuple[str, str | bytes]]
MetadataTuple = tuple[tuple[str, str | bytes], ...]


class _Default(enum.Enum):
    TOKEN = 0


# Sentinel for "use the client's default deadline"; `None` means no deadline at all.
DEFAULT = _Default.TOKEN
Timeout = float | None | _Default


def target(address: str | None = None, unix_path: str | None = None) -> str:
    """The gRPC target for a TCP `host:port` (or any gRPC target URI) or a Unix socket path."""
    if (address is None) == (unix_path is None):
        raise ValueError("give exactly one of address or unix_path")
    if unix_path is not None:
        if not unix_path:
            raise ValueError("unix_path is empty")
        return f"unix:{unix_path}"
    assert address is not None
    if not address:
        raise ValueError("address is empty")
    return address


def channel_options(extra: Sequence[ChannelOption] = ()) -> list[ChannelOption]:
    """Message-size limits raised to the server's 64 MiB, then the caller's options (which win)."""
    options: dict[str, int | str] = {
        "grpc.max_send_message_length": MAX_MESSAGE_BYTES,
        "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
    }
    options.update(dict(extra))
    return list(options.items())


def resolve_timeout(timeout: Timeout, default: float | None) -> float | None:
    return default if isinstance(timeout, _Default) else timeout


# How a client connects, for the hint of a connection the server closed (errors.py).
Transport = Literal["plaintext", "tls", "mtls", "secure"]
# Whether credentials made by tls_credentials carry a client certificate (grpc does not say).
_MUTUAL: weakref.WeakKeyDictionary[grpc.ChannelCredentials, bool] = weakref.WeakKeyDictionary()


def transport_of(credentials: grpc.ChannelCredentials | None) -> Transport:
    """plaintext, tls, mtls, or secure for credentials not made by `tls_credentials`."""
    if credentials is None:
        return "plaintext"
    mutual = _MUTUAL.get(credentials)
    return "secure" if mutual is None else "mtls" if mutual else "tls"


def tls_credentials(
    ca: str | os.PathLike[str] | None = None,
    *,
    client_cert: str | os.PathLike[str] | None = None,
    client_key: str | os.PathLike[str] | None = None,
) -> grpc.ChannelCredentials:
    """TLS channel credentials from PEM files: trust `ca` (None: the system roots), and present
    `client_cert` + `client_key` for a server that requires mTLS (--tls-client-ca)."""
    if (client_cert is None) != (client_key is None):
        raise ValueError("give client_cert and client_key together")

    def read(path: str | os.PathLike[str] | None) -> bytes | None:
        if path is None:
            return None
        with open(path, "rb") as file:
            return file.read()

    credentials = grpc.ssl_channel_credentials(
        root_certificates=read(ca),
        private_key=read(client_key),
        certificate_chain=read(client_cert),
    )
    _MUTUAL[credentials] = client_cert is not None
    return credentials


def with_token(metadata: Metadata, token: str | None) -> MetadataTuple:
    """`metadata` plus the bearer token a server with --auth-tokens requires, if given."""
    if token is None:
        return tuple(metadata)
    if not token.strip():
        raise ValueError("token is empty")
    return (*metadata, ("authorization", f"Bearer {token.strip()}"))
