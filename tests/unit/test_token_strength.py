"""Bearer tokens need 128 bits: placeholders a person types are refused, random ones pass."""

from __future__ import annotations

import random
import string

import pytest
from turnkeeper.server.edge.auth import TokenGrant
from turnkeeper.server.edge.token_strength import MIN_BITS, alphabet_size, estimated_bits, weakness

# Placeholders of 30-35 characters, which a length minimum of 16 lets through.
PLACEHOLDERS = [
    "changeme-changeme-changeme-12345",
    "tk-test-token-0123456789abcdef",
    "passwordpasswordpasswordpassword",
    "abababababababababababababababab",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "my-token-123456-my-token-123456",
    "0000000000000000000000000000000000",
    "zyxwvutsrqponmlkjihgfedcba-token",
    "0123456789012345678901234567890123",
    "REPLACE-ME-REPLACE-ME-REPLACE-ME",
]


@pytest.mark.parametrize("token", PLACEHOLDERS)
def test_typed_placeholders_are_refused(token: str) -> None:
    assert 30 <= len(token) <= 35
    assert weakness(token) is not None


def test_too_short_for_its_alphabet_is_refused_with_the_estimate() -> None:
    # 24 hex digits: 96 bits.
    problem = weakness("9f86d081884c7d659a2feaa0")
    assert problem is not None and "about 96 bits" in problem and "alphabet of 16" in problem
    assert weakness("Zq8") is not None


def test_the_alphabet_is_what_the_character_classes_span() -> None:
    assert alphabet_size("0123") == 10
    assert alphabet_size("deadbeef00") == 16
    assert alphabet_size("DEADBEEF00") == 16
    assert alphabet_size("hello") == 26
    assert alphabet_size("Hello9") == 62
    assert alphabet_size("a-b_c") == 28  # each other character counts once
    assert estimated_bits("deadbeef" * 4) < MIN_BITS  # the repeats count for nothing


def test_random_tokens_pass() -> None:
    rng = random.Random(18)
    urlsafe = string.ascii_letters + string.digits + "-_"
    for _ in range(2000):
        hex32 = "".join(rng.choice("0123456789abcdef") for _ in range(64))
        words = "".join(rng.choice(urlsafe) for _ in range(43))
        assert weakness(hex32) is None, hex32
        assert weakness(words) is None, words
        assert weakness("tk-" + hex32[:40]) is None


def test_messages_never_quote_the_token() -> None:
    for token in PLACEHOLDERS:
        problem = weakness(token) or ""
        assert token not in problem and token[:8] not in problem


def test_the_token_file_refuses_a_weak_token() -> None:
    with pytest.raises(ValueError, match="bits of entropy"):
        TokenGrant(token="changeme-changeme-changeme-12345", runtime_id="r")
    assert TokenGrant(token="6f354f389d5c6a18c763bcbc035e0cb4", runtime_id="r").runtime_id == "r"
