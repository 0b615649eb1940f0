"""The dashboard's colours meet WCAG 2.2 AA in both themes: text 4.5:1, meter fills and focus 3:1."""

from __future__ import annotations

import re

import pytest
from turnkeeper.server.ops.dashboard import STATIC_DIR

CSS = (STATIC_DIR / "dashboard.css").read_text()


def theme(dark: bool) -> dict[str, str]:
    """The custom properties of the light `:root` block, or of the dark-scheme one."""
    blocks = re.findall(r":root\s*\{([^}]*)\}", CSS)
    light, dark_block = blocks[0], blocks[1]
    assert "prefers-color-scheme: dark" in CSS
    values = dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", light))
    if dark:
        values.update(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", dark_block))
    return values


def luminance(color: str) -> float:
    def channel(part: str) -> float:
        c = int(part, 16) / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(color[i : i + 2]) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


TEXT_PAIRS = [  # (foreground, background): text and badges
    ("text", "bg"),
    ("text", "card"),
    ("muted", "card"),
    ("muted", "bg"),
    ("accent", "card"),
    ("ok", "card"),
    ("warn", "card"),
    ("danger", "card"),
    ("gap-text", "gap-bg"),
]
GRAPHIC_PAIRS = [("ok", "track"), ("warn", "track"), ("danger", "track"), ("focus", "card")]


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_text_and_graphics_meet_wcag_aa(dark: bool) -> None:
    colors = theme(dark)
    for fg, bg in TEXT_PAIRS:
        assert contrast(colors[fg], colors[bg]) >= 4.5, (fg, bg, dark)
    for fg, bg in GRAPHIC_PAIRS:
        assert contrast(colors[fg], colors[bg]) >= 3.0, (fg, bg, dark)
    # The primary button: white text on the accent (light), the dark background on it (dark).
    label = "#0f1419" if dark else "#ffffff"
    assert contrast(label, colors["accent"]) >= 4.5
