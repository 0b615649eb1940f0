"""Connection targets, channel options and deadline defaults shared by both clients."""

from __future__ import annotations

import enum
from collections.abc import Sequence

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
