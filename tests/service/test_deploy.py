"""The deployment files: the image's command and the systemd unit's command really serve.

There is no Docker daemon or systemd here, so each test reads the command and environment from
the file and runs exactly that command (the console script from this checkout in place of the
image's or unit's path; files the image COPYs at their repository paths), moving only the
addresses to free loopback ports and the socket to a temp directory, through TURNKEEPER_*
variables. The Dockerfile is linted by hadolint and the manifests validated against the
Kubernetes schemas in `make lint`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from turnkeeper.server.config import parse_config
from turnkeeper.server.edge.auth import TokenFileError, load_tokens
from turnkeeper.server.edge.server import server_options

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / ".venv" / "bin" / "turnkeeper-server"


def final_stage(dockerfile: Path) -> list[str]:
    """The instructions of the last stage, continuation lines joined."""
    joined = dockerfile.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in joined.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("#")]
    last = max(i for i, line in enumerate(lines) if line.upper().startswith("FROM "))
    return lines[last:]


def instruction(stage: list[str], name: str) -> list[str]:
    return [line[len(name) :].strip() for line in stage if line.upper().startswith(name + " ")]


def image_command() -> tuple[list[str], dict[str, str]]:
    stage = final_stage(REPO / "Dockerfile")
    (entrypoint,) = instruction(stage, "ENTRYPOINT")
    (cmd,) = instruction(stage, "CMD")
    argv = json.loads(entrypoint) + json.loads(cmd)
    copies = {}
    for copy in instruction(stage, "COPY"):
        parts = copy.split()
        if not parts[0].startswith("--from"):
            copies[parts[1]] = str(REPO / parts[0])
    env: dict[str, str] = {}
    for line in instruction(stage, "ENV"):
        for pair in shlex.split(line):
            key, _, value = pair.partition("=")
            env[key] = value
    return [copies.get(arg, arg) for arg in argv], env


def unit_command() -> tuple[list[str], dict[str, str]]:
    argv: list[str] = []
    env: dict[str, str] = {}
    for line in (REPO / "deploy" / "systemd" / "turnkeeper.service").read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "ExecStart":
            argv = shlex.split(value)
        elif key == "Environment":
            name, _, setting = value.partition("=")
            env[name] = setting
    return argv, env


def serve_like(argv: list[str], env: dict[str, str], workdir: Path) -> None:
    """Runs the command, checks gRPC health, the probes and the metrics, stops it with SIGTERM."""
    assert Path(argv[0]).name == "turnkeeper-server", argv
    ready = workdir / "ready.json"
    sock = Path("/tmp") / f"tk-deploy-{os.getpid()}-{workdir.name[-8:]}.sock"
    moved = {
        "TURNKEEPER_LISTEN": "127.0.0.1:0",
        "TURNKEEPER_HTTP": "127.0.0.1:0",
        "TURNKEEPER_READY_FILE": str(ready),
    }
    if "TURNKEEPER_UNIX" in env:
        moved["TURNKEEPER_UNIX"] = str(sock)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    log_path = workdir / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(SERVER), *argv[1:]],
            env={**clean, **env, **moved},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        with grpc.insecure_channel(info["tcp"][0]) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="turnkeeper.v1.HistoryService"), timeout=5
            )
        assert status.status == health_pb2.HealthCheckResponse.SERVING
        if "TURNKEEPER_UNIX" in env:
            assert info["unix"] == [str(sock)]
            assert oct(sock.stat().st_mode & 0o777) == "0o" + env.get("TURNKEEPER_UNIX_MODE", "660")
        for path in ("/healthz", "/readyz", "/metrics"):
            with urllib.request.urlopen(f"http://{info['http']}{path}", timeout=5) as response:
                assert response.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(30)
    text = log_path.read_text()
    assert code == 0, text
    if env.get("TURNKEEPER_LOG_FORMAT") == "json":
        assert all(json.loads(line)["level"] for line in text.splitlines() if line.strip()), text


def test_the_image_runs_the_console_script_with_its_config_file(tmp_path: Path) -> None:
    argv, env = image_command()
    assert argv[:2] == ["turnkeeper-server", "--config"]
    assert Path(argv[2]) == REPO / "deploy" / "turnkeeper.toml"
    serve_like(argv, env, tmp_path)


def test_the_image_runs_as_a_non_root_user() -> None:
    (user,) = instruction(final_stage(REPO / "Dockerfile"), "USER")
    assert user.split(":")[0] not in ("0", "root")


def test_the_systemd_unit_runs_the_console_script_with_its_socket_permissions(
    tmp_path: Path,
) -> None:
    argv, env = unit_command()
    assert argv == ["/opt/turnkeeper/bin/turnkeeper-server"]
    assert env["TURNKEEPER_UNIX"].startswith("/run/turnkeeper/")
    assert env["TURNKEEPER_UNIX_MODE"] == "660"
    serve_like(argv, env, tmp_path)


def manifest_token_files() -> dict[str, str]:
    """The token files the Kubernetes manifests carry in their Secrets, by manifest and key."""
    found = {}
    for path in sorted((REPO / "deploy" / "kubernetes").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "Secret":
                for key, value in document.get("stringData", {}).items():
                    if key.endswith(".toml"):
                        found[f"{path.name}:{key}"] = value
    return found


def test_the_manifests_placeholder_tokens_are_refused_at_startup(tmp_path: Path) -> None:
    """A manifest applied without replacing its tokens must not serve with a published token."""
    files = manifest_token_files()
    assert len(files) == 2, files
    for where, text in files.items():
        path = tmp_path / "tokens.toml"
        path.write_text(text)
        with pytest.raises(TokenFileError, match=r"not a random string|bits of entropy"):
            load_tokens(str(path))
        assert "REPLACE-ME" in text, where


def test_the_fleet_ages_connections_so_an_l4_service_rebalances_them() -> None:
    (deployment,) = [
        document
        for document in yaml.safe_load_all((REPO / "deploy/kubernetes/fleet.yaml").read_text())
        if document
        and document.get("kind") == "Deployment"
        and document["metadata"]["name"] == "turnkeeper"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    config = parse_config([], env)
    assert config.max_connection_age_seconds > 0
    # The age outlasts the drain it grants, so a reconnect never overlaps the previous one's.
    assert config.max_connection_age_seconds > 10 * config.grace_seconds
    assert ("grpc.max_connection_age_ms", 300_000) in server_options(config)


def unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in (REPO / "deploy" / "systemd" / "turnkeeper.service").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            settings.setdefault(key, []).append(value)
    return settings


def test_the_systemd_unit_and_its_install_script_agree() -> None:
    """The script installs the ExecStart the unit runs, as the user the unit names, to the path
    systemd reads, from the wheels `make wheel` writes; never with a system pip."""
    script = (REPO / "deploy" / "systemd" / "install.sh").read_text()
    variables = dict(re.findall(r"(?m)^(\w+)=([^\s$]+)$", script))
    unit = unit_settings()
    assert unit["ExecStart"] == [f"{variables['prefix']}/bin/turnkeeper-server"]
    assert variables["prefix"].startswith("/opt/")
    assert Path(variables["unit"]).parent == Path("/etc/systemd/system")
    assert '"$here/turnkeeper.service" "$root$unit"' in script
    assert unit["User"] == unit["Group"] == ["turnkeeper"]
    assert re.search(r"useradd --system --user-group .*\n?.* turnkeeper\n", script)
    assert '-m venv "$root$prefix"' in script
    assert '"$root$prefix/bin/pip" install' in script
    assert not re.search(r"(?m)^\s*(sudo )?(pip3?|python3? -m pip) install", script)
    # What the script looks for is what `make wheel` builds.
    wheel_rule = (REPO / "Makefile").read_text().partition("\nwheel:")[2].partition("\n\n")[0]
    assert "--wheel-dir dist . clients/python" in wheel_rule
    assert (
        'ls "$dist"/turnkeeper-*.whl' in script and 'ls "$dist"/turnkeeper_client-*.whl' in script
    )
    # The socket lives in the RuntimeDirectory the unit creates.
    env = dict(value.partition("=")[::2] for value in unit["Environment"])
    assert Path(env["TURNKEEPER_UNIX"]).parent == Path("/run") / unit["RuntimeDirectory"][0]
    assert os.access(REPO / "deploy" / "systemd" / "install.sh", os.X_OK)


def test_the_install_script_refuses_a_directory_without_the_wheels(tmp_path: Path) -> None:
    result = subprocess.run(
        ["sh", str(REPO / "deploy" / "systemd" / "install.sh"), str(tmp_path)],
        env={**os.environ, "TURNKEEPER_ROOT": str(tmp_path / "root")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "run 'make wheel'" in result.stderr
    assert not (tmp_path / "root").exists()
