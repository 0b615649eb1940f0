#!/usr/bin/env python3
"""Install each client the way its README says, in a fresh project outside the repository.

    with_server.py -- python tests/install/check_install.py [python] [typescript] [go] [rust]
        [systemd]

`systemd` runs the systemd install steps of docs/operating.md into a staging root and serves from it. For
every language named (all by default) it creates a temporary project under /tmp, installs
the client from its folder with the ecosystem's standard command (and nothing else from the
repository), type-checks or builds the README's example (the fenced block after an
`<!-- install-test: FILE -->` marker in clients/<language>/README.md), and runs it against the
live server in $TURNKEEPER_ADDRESS. Registries are reached through the local caches the client
suites already filled, so each check takes seconds. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "clients"
VENV_BIN = REPO / ".venv" / "bin"
MARKER = re.compile(r"<!-- install-test: (?P<file>[\w./-]+) -->\n```[^\n]*\n(?P<code>.*?)```", re.S)
MARKER_ROOT = re.compile(r"<!-- install-test: systemd -->\n\s*```[^\n]*\n(?P<code>.*?)```", re.S)
# What each README example prints last when it ran against the server.
EXAMPLE_DONE = "trimmed:"


class CheckError(Exception):
    """One step of an install check failed; the message has its output."""


def readme_examples(language: str) -> dict[str, str]:
    readme = (CLIENTS / language / "README.md").read_text(encoding="utf-8")
    examples = {m["file"]: m["code"] for m in MARKER.finditer(readme)}
    if not examples:
        raise CheckError(f"clients/{language}/README.md has no <!-- install-test: FILE --> block")
    return examples


def run(
    command: Sequence[str | Path], cwd: Path, env: dict[str, str] | None = None, timeout: int = 600
) -> str:
    shown = " ".join(str(c) for c in command)
    try:
        result = subprocess.run(
            [str(c) for c in command],
            cwd=cwd,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise CheckError(f"{shown}: no result within {timeout} s") from error
    if result.returncode != 0:
        raise CheckError(f"{shown} exited {result.returncode}\n{result.stdout}{result.stderr}")
    return result.stdout


def write_examples(language: str, project: Path) -> list[Path]:
    files = []
    for name, code in readme_examples(language).items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code, encoding="utf-8")
        files.append(path)
    return files


def expect_ran(output: str, language: str) -> None:
    if EXAMPLE_DONE not in output:
        raise CheckError(f"the {language} README example did not finish:\n{output}")


def check_python(project: Path) -> None:
    run([VENV_BIN / "python", "-m", "venv", project / "venv"], project)
    bin_dir = project / "venv" / "bin"
    run(
        [bin_dir / "pip", "install", "--quiet", "--disable-pip-version-check", CLIENTS / "python"],
        project,
    )
    run([bin_dir / "pip", "check"], project)
    installed = run([bin_dir / "pip", "list", "--format", "json"], project)
    names = {p["name"].lower() for p in json.loads(installed)}
    if "turnkeeper" in names or "redis" in names:
        raise CheckError(f"the client pulled in server packages: {sorted(names)}")
    requires = json.loads(run([bin_dir / "python", "-c", _PRINT_REQUIRES], project))
    pinned = [r for r in requires if "==" in r.partition(";")[0]]
    if pinned:
        raise CheckError(f"turnkeeper-client pins dependencies: {pinned}")
    (example,) = write_examples("python", project)
    run(
        [VENV_BIN / "mypy", "--strict", "--python-executable", bin_dir / "python", example], project
    )
    expect_ran(run([bin_dir / "python", example], project), "python")
    run([bin_dir / "turnkeeper", "--version"], project)


_PRINT_REQUIRES = (
    "import json; from importlib import metadata; "
    "print(json.dumps(metadata.requires('turnkeeper-client')))"
)


def check_typescript(project: Path) -> None:
    client = CLIENTS / "typescript"
    npm = ["npm", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"]
    manifest = json.loads((client / "package.json").read_text(encoding="utf-8"))
    tools = [
        f"{name}@{manifest['devDependencies'][name]}" for name in ("typescript", "@types/node")
    ]
    tarball_dir = project / "pack"
    tarball_dir.mkdir()
    packed = run([*npm[:1], "pack", "--silent", client, "--pack-destination", tarball_dir], project)
    tarball = tarball_dir / packed.strip().splitlines()[-1]
    # The README's two routes, the packed tarball and the folder itself with `install-links=true` in
    # the project's .npmrc (a package, not a symlink), must both work, also after the project's next
    # plain `npm install` (a one-off --install-links did not survive it). The example is type-checked
    # and compiled once, in the first, and run in both.
    compiled: Path | None = None
    for name, source in (("from-tarball", str(tarball)), ("from-folder", str(client))):
        app = project / name
        app.mkdir()
        (app / "package.json").write_text(json.dumps({"name": name, "type": "module"}))
        if source == str(client):
            (app / ".npmrc").write_text("install-links=true\n")
        # --engine-strict: fail when a package (ours or a dependency) does not support this Node.
        run(
            [*npm, "install", "--engine-strict", source, *(tools if compiled is None else [])],
            app,
        )
        run([*npm, "install", "--engine-strict"], app)
        if compiled is None:
            write_examples("typescript", app)
            (app / "tsconfig.json").write_text(json.dumps(_TSCONFIG))
            run([app / "node_modules" / ".bin" / "tsc", "-p", "tsconfig.json"], app)
            compiled = app / "out"
        else:
            shutil.copytree(compiled, app / "out")
        expect_ran(run(["node", "out/example.js"], app), f"typescript ({name})")


_TSCONFIG = {
    "compilerOptions": {
        "target": "ES2022",
        "module": "NodeNext",
        "moduleResolution": "NodeNext",
        "strict": True,
        "types": ["node"],
        "outDir": "out",
    },
    "include": ["*.ts"],
}


def check_go(project: Path) -> None:
    module = "github.com/turnkeeper/turnkeeper/clients/go"
    run(["go", "mod", "init", "example.com/tkapp"], project)
    run(["go", "mod", "edit", f"-replace={module}={CLIENTS / 'go'}"], project)
    write_examples("go", project)
    run(["go", "mod", "tidy"], project)
    run(["go", "vet", "./..."], project)
    expect_ran(run(["go", "run", "."], project), "go")


def check_rust(project: Path) -> None:
    client = CLIENTS / "rust"
    manifest = (client / "Cargo.toml").read_text(encoding="utf-8")
    dev_section = manifest.partition("\n[dev-dependencies]\n")[2].partition("\n[")[0]
    tokio = re.search(r"(?m)^tokio = (\{[^\n]*\})", dev_section)
    if tokio is None:
        raise CheckError("clients/rust/Cargo.toml: no tokio dev-dependency to mirror")
    (project / "src").mkdir()
    (project / "Cargo.toml").write_text(_CARGO_TOML.format(client=client, tokio=tokio.group(1)))
    # Start from the client's lockfile, so the crates resolve (offline) to the versions its own
    # build compiled, which the shared target directory then reuses.
    shutil.copy(client / "Cargo.lock", project / "Cargo.lock")
    write_examples("rust", project)
    env = {"CARGO_TARGET_DIR": str(client / "target")}
    run(["cargo", "build", "--offline", "--bin", "tkapp"], project, env=env)
    if "publish = false" in manifest or not re.search(r'(?m)^license = "', manifest):
        raise CheckError(
            "clients/rust/Cargo.toml is not publishable (publish = false or no license)"
        )
    run(["cargo", "package", "--list", "--offline", "--allow-dirty"], client, env=env)
    expect_ran(
        run(["cargo", "run", "--offline", "--quiet", "--bin", "tkapp"], project, env=env), "rust"
    )


_CARGO_TOML = """[package]
name = "tkapp"
version = "0.1.0"
edition = "2024"

[dependencies]
turnkeeper-client = {{ path = "{client}" }}
tokio = {tokio}

# The client's own profile, so its compiled dependencies are reused.
[profile.dev]
debug = "line-tables-only"

[profile.dev.package."*"]
debug = false
"""

# The operator's guide holds the deployment steps (the README links to it).
OPERATING_GUIDE = REPO / "docs" / "operating.md"
SYSTEMD_UNIT = REPO / "deploy" / "systemd" / "turnkeeper.service"


def check_systemd(project: Path) -> None:
    """The operator's guide's systemd steps, into a staging root (TURNKEEPER_ROOT) instead of /, then the
    installed server run with the unit's ExecStart and Environment (addresses moved)."""
    steps = MARKER_ROOT.search(OPERATING_GUIDE.read_text(encoding="utf-8"))
    if steps is None:
        raise CheckError("docs/operating.md has no <!-- install-test: systemd --> block")
    root = project / "root"
    for line in steps["code"].splitlines():
        command = line.partition("#")[0].split()
        if not command:
            continue
        if command[:2] == ["sudo", "apt-get"]:
            continue  # the system's packages: the script checks for the venv module itself
        run(command[1:] if command[0] == "sudo" else command, REPO, {"TURNKEEPER_ROOT": str(root)})
    argv: list[str] = []
    env: dict[str, str] = {}
    for line in SYSTEMD_UNIT.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key == "ExecStart":
            argv = value.split()
        elif key == "Environment":
            name, _, setting = value.partition("=")
            env[name] = setting
    server = root / argv[0].lstrip("/")
    if not server.exists():
        raise CheckError(f"the unit's ExecStart {argv[0]} is not what install.sh installed")
    ready = project / "ready.json"
    env |= {
        "TURNKEEPER_LISTEN": "127.0.0.1:0",
        "TURNKEEPER_HTTP": "127.0.0.1:0",
        "TURNKEEPER_UNIX": str(project / "tk.sock"),
        "TURNKEEPER_READY_FILE": str(ready),
    }
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    log = project / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [server, *argv[1:]], env={**clean, **env}, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise CheckError(f"the installed server did not start:\n{log.read_text()}")
            time.sleep(0.1)
        http = json.loads(ready.read_text())["http"]
        with urllib.request.urlopen(f"http://{http}/readyz", timeout=5) as response:
            if response.status != 200:
                raise CheckError(f"/readyz answered {response.status}")
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(30)
    if code != 0:
        raise CheckError(f"the installed server exited {code} on SIGTERM:\n{log.read_text()}")


CHECKS: dict[str, Callable[[Path], None]] = {
    "python": check_python,
    "typescript": check_typescript,
    "go": check_go,
    "rust": check_rust,
    "systemd": check_systemd,
}


def main(argv: list[str]) -> int:
    languages = argv or list(CHECKS)
    unknown = [lang for lang in languages if lang not in CHECKS]
    if unknown or "TURNKEEPER_ADDRESS" not in os.environ:
        print(f"usage: with_server.py -- {sys.argv[0]} [{'|'.join(CHECKS)}]...", file=sys.stderr)
        return 2
    failed = 0
    for language in languages:
        project = Path(tempfile.mkdtemp(prefix=f"tk-install-{language}-", dir="/tmp"))
        began = time.monotonic()
        try:
            CHECKS[language](project)
        except CheckError as error:
            failed += 1
            print(f"install check {language}: FAILED in {project}\n{error}", file=sys.stderr)
            continue
        print(f"install check {language}: ok ({time.monotonic() - began:.1f} s)")
        shutil.rmtree(project, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
