"""No import cycle anywhere in service/turnkeeper (issue 15), and rooms that depend one way
(issue 28): ARCHITECTURE.md's table of which room depends on which is this test's data.

Every import counts, at module level or inside a function (a deferred import that closes a cycle
is still a cycle: it only moves the failure to the first call), relative or absolute. An edge runs
from a module to each turnkeeper module it imports; `from package import name` is an edge to the
submodule when `name` is one, else to the package. The graph is sorted with the standard
library's `graphlib`, which names the cycle it finds.
"""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "service"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
_TABLE = re.compile(r"<!-- room-dependencies -->(.*?)<!-- /room-dependencies -->", re.S)
_SPAN = re.compile(r"`([^`]+)`")


def modules_under(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` (a folder under `root`), by dotted name."""
    found = {}
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of `modules` that `module` imports, anywhere in its source."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _base(node, module, is_package)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in modules else base)
    return {target for target in targets if target in modules and target != module}


def import_cycle(root: Path, package: str) -> list[str] | None:
    """One import cycle among the modules of `package`, or None when there is none."""
    modules = modules_under(root, package)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        cycle: list[str] = error.args[1]
        return cycle
    return None


def test_service_turnkeeper_has_no_import_cycle() -> None:
    modules = modules_under(SERVICE, "turnkeeper")
    assert "turnkeeper.server.app" in modules and "turnkeeper.core.trimming" in modules
    cycle = import_cycle(SERVICE, "turnkeeper")
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("from pkg import b\n", "from pkg.a import x\n"),
        ("import pkg.b\n", "def late() -> None:\n    from . import a\n"),
        ("from .b import y\n", "from .sub import c\n"),
    ],
    ids=["absolute", "deferred-relative", "through-a-package"],
)
def test_a_cycle_is_found(tmp_path: Path, a: str, b: str) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(a)
    (package / "b.py").write_text(b)
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text("from ..a import z\n")
    cycle = import_cycle(tmp_path, "pkg")
    assert cycle is not None and {"pkg.a", "pkg.b"} <= set(cycle)


def test_acyclic_imports_pass(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.a import x\n")
    (package / "a.py").write_text("import json\nfrom pkg import b\n")
    (package / "b.py").write_text("from . import c\n")
    (package / "c.py").write_text("")
    assert import_cycle(tmp_path, "pkg") is None


def room_table(text: str) -> dict[str, set[str]]:
    """The rooms of ARCHITECTURE.md's dependency table (paths under service/turnkeeper, a folder
    ending in `/`), each with the rooms it depends on."""
    found = _TABLE.search(text)
    assert found is not None, "ARCHITECTURE.md has no room-dependencies table"
    table: dict[str, set[str]] = {}
    for line in found.group(1).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        (room,) = _SPAN.findall(cells[0])
        table[room] = set(_SPAN.findall(cells[1]))
    return table


def room_of(module: str, rooms: set[str]) -> str | None:
    """The room `module` lives in: the longest room path that holds it."""
    path = module.removeprefix("turnkeeper.").replace(".", "/")
    holders = [
        room
        for room in rooms
        if (room.endswith("/") and (path + "/").startswith(room))
        or (room.endswith(".py") and path == room.removesuffix(".py"))
        or (room.endswith("__init__.py") and path == room.removesuffix("/__init__.py"))
    ]
    return max(holders, key=len, default=None)


def room_graph(root: Path, package: str, rooms: set[str]) -> dict[str, set[str]]:
    """Which room imports which, from every import of every module of `package`."""
    modules = modules_under(root, package)
    graph: dict[str, set[str]] = {room: set() for room in rooms}
    for name, path in modules.items():
        source = room_of(name, rooms)
        assert source is not None, f"{name} is in no room of ARCHITECTURE.md's table"
        for target in imports_of(name, path, modules):
            other = room_of(target, rooms)
            assert other is not None, f"{target} is in no room of ARCHITECTURE.md's table"
            if other != source:
                graph[source].add(other)
    return graph


def test_rooms_depend_as_architecture_md_says() -> None:
    table = room_table(ARCHITECTURE.read_text(encoding="utf-8"))
    assert {"core/", "server/contract/", "server/api/", "server/edge/"} <= set(table)
    actual = room_graph(SERVICE, "turnkeeper", set(table))
    differences = {
        room: {
            "imports but the table does not say": sorted(actual[room] - table[room]),
            "the table says but does not import": sorted(table[room] - actual[room]),
        }
        for room in table
        if actual[room] != table[room]
    }
    assert differences == {}, f"ARCHITECTURE.md's room table is not the code's: {differences}"
    try:
        graphlib.TopologicalSorter(actual).prepare()
    except graphlib.CycleError as error:
        raise AssertionError("room cycle: " + " -> ".join(error.args[1])) from error


def test_a_room_that_imports_upward_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "turnkeeper"
    for room in ("low", "high"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").write_text("")
    (package / "high" / "a.py").write_text("from turnkeeper.low import b\n")
    (package / "low" / "b.py").write_text(
        "def late() -> None:\n    from turnkeeper.high import a\n"
    )
    graph = room_graph(tmp_path, "turnkeeper", {"low/", "high/"})
    assert graph == {"high/": {"low/"}, "low/": {"high/"}}
    table = room_table(
        "<!-- room-dependencies -->\n| room | depends on |\n| --- | --- |\n"
        "| `low/` | nothing |\n| `high/` | `low/` |\n<!-- /room-dependencies -->"
    )
    assert table == {"low/": set(), "high/": {"low/"}} and graph["low/"] != table["low/"]
