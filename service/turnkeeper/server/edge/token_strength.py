"""Whether a bearer token is strong enough: an estimate of its entropy, wary of typed patterns.

The estimate is `n x log2(alphabet)`, where the alphabet is what the token's character classes
span (hex digits 16, decimal digits 10, each case of letters 26, plus each distinct other
character) and `n` counts the characters outside patterns a person types and a random string
almost never has: a chunk of six repeated (`changeme-changeme-...`) and a run of six that repeats
one character or steps by one (`aaaaaa`, `123456`, `fedcba`). A token needs 128 bits, and a
few distinct characters (`abababab...`) are refused as well. `openssl rand -hex 32` (256 bits)
and `secrets.token_urlsafe(32)` pass with a wide margin; a token of exactly 128 random bits
(`openssl rand -hex 16`) is refused, rarely, when it happens to hold a pattern (docs/operating.md
says how rarely).
"""

from __future__ import annotations

import itertools
import math
import string

MIN_BITS = 128
_PATTERN_CHARS = 6
_HEX = frozenset(string.digits + "abcdef")
_HEX_UPPER = frozenset(string.digits + "ABCDEF")
_ALNUM = frozenset(string.ascii_letters + string.digits)

GENERATE_HINT = "generate one with `openssl rand -hex 32`"


def alphabet_size(token: str) -> int:
    """How many characters the token's classes span."""
    chars = set(token)
    if chars <= set(string.digits):
        return 10
    if chars <= _HEX or chars <= _HEX_UPPER:
        return 16
    size = sum(
        len(group)
        for group in (string.ascii_lowercase, string.ascii_uppercase, string.digits)
        if chars & set(group)
    )
    return size + len(chars - _ALNUM)


def patterned_chars(token: str) -> int:
    """How many characters lie in a repeat of an earlier chunk or past the start of a run."""
    n = _PATTERN_CHARS
    covered: set[int] = set()
    first: dict[str, int] = {}
    for start in range(len(token) - n + 1):
        chunk = token[start : start + n]
        if start - first.setdefault(chunk, start) >= n:  # again, not overlapping the first
            covered.update(range(start, start + n))
        steps = {ord(b) - ord(a) for a, b in itertools.pairwise(chunk)}
        if len(steps) == 1 and steps <= {-1, 0, 1}:
            covered.update(range(start + 1, start + n))
    return len(covered)


def estimated_bits(token: str) -> float:
    """The entropy the token would have if its unpatterned characters were random."""
    size = alphabet_size(token)
    return (len(token) - patterned_chars(token)) * math.log2(size) if size > 1 else 0.0


def weakness(token: str) -> str | None:
    """Why the token is too weak to accept, or None. Never quotes the token (logs see it)."""
    # A random string uses most of its alphabet, or, when shorter, is mostly distinct.
    distinct = len(set(token))
    if distinct * 3 < min(len(token), alphabet_size(token)):
        return f"uses only {distinct} distinct characters: not a random string; {GENERATE_HINT}"
    bits = estimated_bits(token)
    if bits < MIN_BITS:
        patterned = patterned_chars(token)
        how = f", {patterned} of them in repeats or runs" if patterned else ""
        return (
            f"has about {bits:.0f} bits of entropy ({len(token)} characters from an alphabet of "
            f"{alphabet_size(token)}{how}); at least {MIN_BITS} are needed: {GENERATE_HINT}"
        )
    return None
