"""The tool-result cap (spec §8): limits one result when it is recorded, never the history."""

from __future__ import annotations

from turnkeeper.core.pricing import image_markers


def truncation_notice(cut: int) -> str:
    return f"\n\n[... {cut} characters truncated ...]\n\n"


def cap_tool_result(content: str, max_chars: int) -> tuple[str, int]:
    """Keeps the first floor(2/3 max) and the last (max - head) code points; returns (text, cut).

    0 disables the cap. A cut point inside an `[IMAGE:...]` marker moves outward so the marker is
    never split: the head ends before it, the tail starts after it.
    """
    if max_chars == 0 or len(content) <= max_chars:
        return content, 0
    head_end = 2 * max_chars // 3
    tail_start = len(content) - (max_chars - head_end)
    for start, end in image_markers(content):
        if start < head_end < end:
            head_end = start
        if start < tail_start < end:
            tail_start = end
        if start >= tail_start:
            break
    cut = tail_start - head_end
    return content[:head_end] + truncation_notice(cut) + content[tail_start:], cut
