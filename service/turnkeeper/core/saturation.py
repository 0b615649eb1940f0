"""The wire's 64-bit counts: every uint64 a response carries saturates instead of overflowing."""

from __future__ import annotations

UINT64_MAX = 2**64 - 1


def saturate(value: int) -> int:
    """`value` clamped to [0, 2^64-1]; decisions are taken on the exact value before this."""
    return 0 if value < 0 else min(value, UINT64_MAX)
