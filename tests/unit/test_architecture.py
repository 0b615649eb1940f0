"""ARCHITECTURE.md stays true: every path it names exists (issue 15).

A path is a link target, or a `code` span that looks like a file or a folder (`app.py`,
`edge/`). A span that is a link's text must end the link's target; a span outside a link may be
named from the room it sits in (`edge/auth.py` for service/turnkeeper/server/edge/auth.py).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "ARCHITECTURE.md"
# Where a short name may start from: the repository, then the rooms.
BASES = (
    ROOT,
    ROOT / "service/turnkeeper",
    ROOT / "service/turnkeeper/server",
    ROOT / "service/turnkeeper/core",
    ROOT / "service/turnkeeper-native",
    ROOT / "service/turnkeeper-native/src",
)
_LINK = re.compile(r"\[([^\]]*)\]\(([^)#\s]+)(?:#[^)]*)?\)")
_CODE = re.compile(r"`([^`\s]+)`")
_PATH_LIKE = re.compile(r"^[\w.-]+(/[\w.-]+)*(/|\.(py|rs|md|proto|toml|json))$")


def _path_spans(text: str) -> list[str]:
    return [span for span in _CODE.findall(text) if _PATH_LIKE.match(span)]


def named_paths(text: str) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """The link targets (relative ones only), the path-like code spans outside links, and each
    (span, target) of a link whose text is such a span."""
    links = [(label, target) for label, target in _LINK.findall(text)]
    relative = [target for _, target in links if not re.match(r"^[a-z]+:", target)]
    labelled = [(span, target) for label, target in links for span in _path_spans(label)]
    return relative, _path_spans(_LINK.sub("", text)), labelled


def test_every_path_architecture_md_names_exists() -> None:
    links, spans, labelled = named_paths(DOCUMENT.read_text(encoding="utf-8"))
    assert len(links) > 30 and len(labelled) > 20  # the document is read as intended
    missing_links = [target for target in links if not (ROOT / target).exists()]
    missing_spans = [name for name in spans if not any((b / name).exists() for b in BASES)]
    mislabelled = [
        (span, target)
        for span, target in labelled
        if not target.rstrip("/").endswith(span.rstrip("/"))
    ]
    assert missing_links == [], f"ARCHITECTURE.md links to missing paths: {missing_links}"
    assert missing_spans == [], f"ARCHITECTURE.md names missing paths: {missing_spans}"
    assert mislabelled == [], f"ARCHITECTURE.md links name other paths: {mislabelled}"


def test_a_missing_path_is_caught() -> None:
    links, spans, labelled = named_paths(
        "see [`gone.py`](service/gone.py), [`a.py`](b.py) and `edge/gone/`, `HistoryView`"
    )
    assert links == ["service/gone.py", "b.py"] and spans == ["edge/gone/"]
    assert labelled == [("gone.py", "service/gone.py"), ("a.py", "b.py")]
    assert not (ROOT / "service/gone.py").exists()
    assert not any((b / "edge/gone/").exists() for b in BASES)


def test_the_readme_links_to_it() -> None:
    assert "](ARCHITECTURE.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
