"""Server configuration: command-line flags with TURNKEEPER_* environment fallbacks."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn, TypeVar

T = TypeVar("T")

MIB = 1024 * 1024
# gRPC channel args are C ints.
_MAX_MESSAGE_BYTES = 2**31 - 1
# sun_path is 108 bytes on Linux (104 on macOS), including the terminating NUL.
_MAX_UNIX_PATH_BYTES = 103
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class ServerConfig:
    """Everything the sidecar needs to start; immutable once parsed."""

    listen: tuple[str, ...] = ("127.0.0.1:50051",)
    unix: tuple[str, ...] = ()
    max_receive_bytes: int = 64 * MIB
    max_history_rows: int = 100_000
    # None selects the in-process ring buffer; "redis://host:port" selects Redis.
    events_url: str | None = None
    ring_size: int = 10_000
    subscriber_queue_size: int = 1_000
    grace_seconds: float = 10.0
    ready_file: str | None = None
    log_level: str = "INFO"

    @property
    def max_send_bytes(self) -> int:
        return self.max_receive_bytes


def _int_in(low: int, high: int) -> Callable[[str], int]:
    def convert(raw: str) -> int:
        try:
            value = int(raw.strip().replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside [{low}, {high}]")
        return value

    return convert


def _grace(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{raw!r} must be a finite number >= 0")
    return value


def _tcp_address(raw: str) -> str:
    address = raw.strip()
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"{raw!r} is not host:port (IPv6 as [::1]:port)")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise argparse.ArgumentTypeError(f"{raw!r}: write an IPv6 host in brackets, as [::1]:port")
    if not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{raw!r}: port must be 0..65535 (0 picks a free port)")
    return address


def _unix_path(raw: str) -> str:
    path = raw.strip()
    if path.startswith("unix:"):
        raise argparse.ArgumentTypeError(f"{raw!r}: give a filesystem path, without 'unix:'")
    if not path:
        raise argparse.ArgumentTypeError("a Unix socket path must not be empty")
    if len(os.fsencode(os.path.abspath(path))) > _MAX_UNIX_PATH_BYTES:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is too long for a Unix socket (max {_MAX_UNIX_PATH_BYTES} bytes)"
        )
    return os.path.abspath(path)


def _events(raw: str) -> str:
    url = raw.strip()
    if url == "memory":
        return url
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise argparse.ArgumentTypeError(
            f"{raw!r}: use 'memory' (in-process ring buffer), redis://host:port or unix:///redis.sock"
        )
    return url


def _log_level(raw: str) -> str:
    level = raw.strip().upper()
    if level not in _LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{raw!r}: choose one of {', '.join(_LOG_LEVELS)}")
    return level


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m turnkeeper.server",
        description="turnkeeper: LLM conversation-history sidecar (gRPC). Every flag falls back to "
        "the TURNKEEPER_* environment variable named in its help, then to the default.",
    )
    p.add_argument(
        "--listen",
        action="append",
        type=_tcp_address,
        metavar="HOST:PORT",
        help="TCP address to serve on, repeatable; port 0 picks a free port "
        "(env TURNKEEPER_LISTEN, comma-separated; default 127.0.0.1:50051)",
    )
    p.add_argument(
        "--unix",
        action="append",
        type=_unix_path,
        metavar="PATH",
        help="Unix socket path to serve on, repeatable (env TURNKEEPER_UNIX, comma-separated)",
    )
    p.add_argument(
        "--max-receive-bytes",
        type=_int_in(1024, _MAX_MESSAGE_BYTES),
        metavar="N",
        help="largest request (and response) in bytes (env TURNKEEPER_MAX_RECEIVE_BYTES; "
        "default 64 MiB)",
    )
    p.add_argument(
        "--max-history-rows",
        type=_int_in(1, 2**32 - 1),
        metavar="N",
        help="most history rows accepted per request (env TURNKEEPER_MAX_HISTORY_ROWS; "
        "default 100000)",
    )
    p.add_argument(
        "--events",
        type=_events,
        metavar="URL",
        help="TrimEvents backend: 'memory' or redis://host:port (env TURNKEEPER_EVENTS; "
        "default memory)",
    )
    p.add_argument(
        "--ring-size",
        type=_int_in(1, 10_000_000),
        metavar="N",
        help="events kept for resume (env TURNKEEPER_RING_SIZE; default 10000)",
    )
    p.add_argument(
        "--subscriber-queue",
        type=_int_in(1, 10_000_000),
        metavar="N",
        help="events buffered per slow subscriber (env TURNKEEPER_SUBSCRIBER_QUEUE; default 1000)",
    )
    p.add_argument(
        "--grace-seconds",
        type=_grace,
        metavar="S",
        help="how long in-flight RPCs may drain on shutdown (env TURNKEEPER_GRACE_SECONDS; "
        "default 10)",
    )
    p.add_argument(
        "--ready-file",
        metavar="PATH",
        help="write {tcp, unix, pid} JSON here once serving (env TURNKEEPER_READY_FILE)",
    )
    p.add_argument(
        "--log-level",
        type=_log_level,
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING, ERROR or CRITICAL (env TURNKEEPER_LOG_LEVEL; default INFO)",
    )
    return p


def parse_config(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> ServerConfig:
    """Flags win over the environment, which wins over the defaults.

    Bad values end the process through argparse (usage + message, exit 2), never a traceback.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    env = os.environ if environ is None else environ

    def fail(message: str) -> NoReturn:
        parser.error(message)

    def from_env(name: str, convert: Callable[[str], T]) -> T | None:
        raw = env.get(name, "").strip()
        if not raw:
            return None
        try:
            return convert(raw)
        except argparse.ArgumentTypeError as error:
            fail(f"environment variable {name}: {error}")

    def list_from_env(name: str, convert: Callable[[str], str]) -> tuple[str, ...] | None:
        raw = env.get(name, "").strip()
        if not raw:
            return None
        try:
            return tuple(convert(part) for part in raw.split(",") if part.strip())
        except argparse.ArgumentTypeError as error:
            fail(f"environment variable {name}: {error}")

    defaults = ServerConfig()
    listen = (
        tuple(args.listen)
        if args.listen
        else list_from_env("TURNKEEPER_LISTEN", _tcp_address) or defaults.listen
    )
    unix = tuple(args.unix) if args.unix else list_from_env("TURNKEEPER_UNIX", _unix_path) or ()
    for name, values in (("--listen", listen), ("--unix", unix)):
        if len(set(values)) != len(values):
            fail(f"{name}: the same address is given twice")

    def pick(flag: T | None, env_name: str, convert: Callable[[str], T], default: T) -> T:
        if flag is not None:
            return flag
        value = from_env(env_name, convert)
        return default if value is None else value

    events = pick(args.events, "TURNKEEPER_EVENTS", _events, "memory")
    ready_file = args.ready_file or env.get("TURNKEEPER_READY_FILE", "").strip() or None
    return ServerConfig(
        listen=listen,
        unix=unix,
        max_receive_bytes=pick(
            args.max_receive_bytes,
            "TURNKEEPER_MAX_RECEIVE_BYTES",
            _int_in(1024, _MAX_MESSAGE_BYTES),
            defaults.max_receive_bytes,
        ),
        max_history_rows=pick(
            args.max_history_rows,
            "TURNKEEPER_MAX_HISTORY_ROWS",
            _int_in(1, 2**32 - 1),
            defaults.max_history_rows,
        ),
        events_url=None if events == "memory" else events,
        ring_size=pick(
            args.ring_size,
            "TURNKEEPER_RING_SIZE",
            _int_in(1, 10_000_000),
            defaults.ring_size,
        ),
        subscriber_queue_size=pick(
            args.subscriber_queue,
            "TURNKEEPER_SUBSCRIBER_QUEUE",
            _int_in(1, 10_000_000),
            defaults.subscriber_queue_size,
        ),
        grace_seconds=pick(
            args.grace_seconds, "TURNKEEPER_GRACE_SECONDS", _grace, defaults.grace_seconds
        ),
        ready_file=os.path.abspath(ready_file) if ready_file else None,
        log_level=pick(args.log_level, "TURNKEEPER_LOG_LEVEL", _log_level, defaults.log_level),
    )
