"""Opaque feed cursors.

A cursor is `tk1.` followed by unpadded base64url of a small `|`-separated record. Clients must
treat it as opaque; the server only needs to read back what it wrote.

- ring: `r|<epoch>|<seq>` — the ring feed's per-process epoch and the event's sequence number
  (0: the position before the run's first event, which an empty ring's heartbeat carries).
- redis: `x|<epoch>|<stream id>|<n>` — the stream's epoch (a random value stored next to the stream,
  renewed when the stream is lost), the entry id, and the global event number `n` (contiguous across
  every replica, so a consumer can tell how many events it missed).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

_PREFIX = "tk1."
_EPOCH = re.compile(r"[0-9a-f]{16}")
_STREAM_ID = re.compile(r"(\d{1,20})-(\d{1,20})")


@dataclass(frozen=True)
class RingCursor:
    epoch: str
    seq: int


@dataclass(frozen=True)
class RedisCursor:
    epoch: str
    stream_id: str
    n: int

    def id_key(self) -> tuple[int, int]:
        return stream_id_key(self.stream_id)


Cursor = RingCursor | RedisCursor


def stream_id_key(stream_id: str) -> tuple[int, int]:
    """The ordering key of a Redis stream id `ms-seq`."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def _wrap(record: str) -> str:
    return _PREFIX + base64.urlsafe_b64encode(record.encode()).rstrip(b"=").decode()


def encode_ring(epoch: str, seq: int) -> str:
    return _wrap(f"r|{epoch}|{seq}")


def encode_redis(epoch: str, stream_id: str, n: int) -> str:
    return _wrap(f"x|{epoch}|{stream_id}|{n}")


def decode(cursor: str) -> Cursor | None:
    """The cursor's content, or None when it is not a cursor this server wrote."""
    if not cursor.startswith(_PREFIX) or len(cursor) > 200:
        return None
    body = cursor[len(_PREFIX) :]
    try:
        record = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        return None
    if _wrap(record) != cursor:  # reject non-canonical spellings of the same record
        return None
    parts = record.split("|")
    if parts[0] == "r" and len(parts) == 3 and _EPOCH.fullmatch(parts[1]) and parts[2].isdigit():
        return RingCursor(parts[1], int(parts[2]))
    if (
        parts[0] == "x"
        and len(parts) == 4
        and _EPOCH.fullmatch(parts[1])
        and _STREAM_ID.fullmatch(parts[2])
        and parts[3].isdigit()
    ):
        return RedisCursor(parts[1], parts[2], int(parts[3]))
    return None


def not_after(cursor: str, bound: str) -> bool | None:
    """Whether `cursor` is at or before `bound` in the same feed run; None when the two cannot be
    compared (unreadable, or from different runs or backends)."""
    a, b = decode(cursor), decode(bound)
    if isinstance(a, RingCursor) and isinstance(b, RingCursor) and a.epoch == b.epoch:
        return a.seq <= b.seq
    if isinstance(a, RedisCursor) and isinstance(b, RedisCursor) and a.epoch == b.epoch:
        return a.id_key() <= b.id_key()
    return None
