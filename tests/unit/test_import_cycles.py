"""No import cycle anywhere in service/turnkeeper (issue 15).

Every import counts, at module level or inside a function (a deferred import that closes a cycle
is still a cycle: it only moves the failure to the first call), relative or absolute. An edge runs
from a module to each turnkeeper module it imports; `from package import name` is an edge to the
submodule when `name` is one, else to the package. The graph is sorted with the standard
library's `graphlib`, which names the cycle it finds.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[2] / "service"


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
