#!/usr/bin/env python3
"""Stamp the one version in VERSION into every manifest that cannot read it itself.

The server's pyproject reads VERSION directly; npm, Cargo, the Python client (built from its own
folder, where setuptools may not reach ../../VERSION) and Go (which has no manifest version) get
it written here. `make generate` runs this and `make test` fails when a stamped copy drifts.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERSION_FILE = REPO / "VERSION"
SEMVER = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?")

# (file, pattern whose group "v" is the version, how many matches the file must have)
TARGETS: list[tuple[str, re.Pattern[str], int]] = [
    # The server takes turnkeeper.v1 from the client distribution of the same release.
    ("pyproject.toml", re.compile(r'(?m)^(  "turnkeeper-client==)(?P<v>[^"]*)(")'), 1),
    (
        "clients/python/pyproject.toml",
        re.compile(r'(?m)^(\[project\]\nname = "turnkeeper-client"\nversion = ")(?P<v>[^"]*)(")'),
        1,
    ),
    (
        "clients/typescript/package.json",
        re.compile(r'(?s)\A(\{\s*"name": "@turnkeeper/client",\s*"version": ")(?P<v>[^"]*)(")'),
        1,
    ),
    # The lockfile repeats the root package's version at the top and under packages[""].
    (
        "clients/typescript/package-lock.json",
        re.compile(r'(?m)^( *"name": "@turnkeeper/client",\n *"version": ")(?P<v>[^"]*)(")'),
        2,
    ),
    (
        "clients/rust/Cargo.toml",
        re.compile(r'(?m)^(\[package\]\nname = "turnkeeper-client"\nversion = ")(?P<v>[^"]*)(")'),
        1,
    ),
    (
        "clients/rust/Cargo.lock",
        re.compile(r'(?m)^(name = "turnkeeper-client"\nversion = ")(?P<v>[^"]*)(")'),
        1,
    ),
    (
        "clients/go/turnkeeper/version.go",
        re.compile(r'(?m)^(const Version = ")(?P<v>[^"]*)(")'),
        1,
    ),
]


def read_version() -> str:
    version = VERSION_FILE.read_text(encoding="utf-8").strip()
    if not SEMVER.fullmatch(version):
        raise SystemExit(f"{VERSION_FILE}: {version!r} is not a semantic version")
    return version


def main() -> int:
    version = read_version()
    for relative, pattern, expected in TARGETS:
        path = REPO / relative
        text = path.read_text(encoding="utf-8")
        stamped, count = pattern.subn(lambda m: m.group(1) + version + m.group(3), text)
        if count != expected:
            print(f"{relative}: found {count} version fields, expected {expected}", file=sys.stderr)
            return 1
        if stamped != text:
            path.write_text(stamped, encoding="utf-8")
            print(f"{relative}: version {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
