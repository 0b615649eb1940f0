"""tests/robustness: the hardening findings of issue 9, each as a bounded test.

Every test records what it measured with the `figures` fixture; the table is printed at the end
of the session (whatever the verbosity), so a run of `make test` shows the figures.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

_FIGURES: list[tuple[str, str, str]] = []


class Figures:
    """Collects (test, what, value) rows for the closing table."""

    def __init__(self, test: str) -> None:
        self._test = test

    def add(self, what: str, value: object) -> None:
        _FIGURES.append((self._test, what, value if isinstance(value, str) else repr(value)))


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    yield Figures(request.node.name)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FIGURES:
        return
    width_test = max(len(t) for t, _, _ in _FIGURES)
    width_what = max(len(w) for _, w, _ in _FIGURES)
    terminalreporter.section("robustness figures")
    for test, what, value in _FIGURES:
        terminalreporter.write_line(f"{test:<{width_test}}  {what:<{width_what}}  {value}")
