"""Token pricing: the pinned heuristic of spec §4 and §9."""

from __future__ import annotations

FRAMING_TOKENS = 4
"""Framing tokens charged once per provider row (§9)."""

TOKENS_PER_IMAGE = 1600
"""Fixed cost of one image that is actually sent (§9)."""

_MARKER_OPEN = "[IMAGE:"
_MARKER_CLOSE = "]"

# Unicode White_Space, spelled out so every implementation trims the same characters
# (str.strip() alone would also strip U+001C..U+001F, which are not White_Space).
WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

_LOADABLE_PREFIXES = ("/", "http://", "https://", "data:", "\\\\")


def utf8_len(text: str) -> int:
    """bytes(s) of §9: the UTF-8 byte length."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def text_tokens(text_bytes: int) -> int:
    """ceil(bytes / 4), without floats."""
    return (text_bytes + 3) // 4


def price_text(text: str) -> int:
    """A text priced like one row: ceil(bytes / 4) + 4 (hooks and tool schemas, §9 Capacity)."""
    return text_tokens(utf8_len(text)) + FRAMING_TOKENS


def is_loadable_ref(ref: str) -> bool:
    """Whether an `[IMAGE:<ref>]` marker names an image the runtime actually sends (§9)."""
    ref = ref.strip(WHITESPACE)
    if ref.startswith(_LOADABLE_PREFIXES):
        return True
    # A drive letter: `C:\` or `C:/`.
    return (
        len(ref) >= 3
        and ref[0].isascii()
        and ref[0].isalpha()
        and ref[1] == ":"
        and ref[2] in "\\/"
    )


def strip_sent_images(content: str) -> tuple[str, int]:
    """Removes loadable image markers from a real user row's text; returns (text, images).

    Markers whose ref is not loadable stay as text, and so does an unterminated `[IMAGE:`. The
    remaining text is trimmed of surrounding whitespace.
    """
    kept: list[str] = []
    images = 0
    pos = 0
    for start, end in image_markers(content):
        if is_loadable_ref(content[start + len(_MARKER_OPEN) : end - 1]):
            kept.append(content[pos:start])
            pos = end
            images += 1
    kept.append(content[pos:])
    return "".join(kept).strip(WHITESPACE), images


def image_markers(content: str) -> list[tuple[int, int]]:
    """The [start, end) spans of every terminated `[IMAGE:...]` marker, loadable or not.

    Scanned left to right: a marker ends at the first `]` after `[IMAGE:`, and scanning resumes
    after it.
    """
    spans: list[tuple[int, int]] = []
    if _MARKER_OPEN not in content:
        return spans
    pos = 0
    while True:
        start = content.find(_MARKER_OPEN, pos)
        if start < 0:
            return spans
        end = content.find(_MARKER_CLOSE, start + len(_MARKER_OPEN))
        if end < 0:
            return spans
        spans.append((start, end + 1))
        pos = end + 1
