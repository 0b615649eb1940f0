"""Server configuration: flags > TURNKEEPER_* environment > TOML file > defaults, clean errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from turnkeeper.server.config import ServerConfig, parse_config
from turnkeeper.server.engine import default_engine_name

SERVICE_DIR = Path(__file__).resolve().parents[2] / "service"


def test_defaults() -> None:
    config = parse_config([], {})
    assert config == ServerConfig()
    assert config.listen == ("127.0.0.1:50051",)
    assert config.unix == ()
    assert config.max_receive_bytes == config.max_send_bytes == 64 * 1024 * 1024
    assert config.max_history_rows == 100_000
    assert config.events_url is None
    assert (config.ring_size, config.subscriber_queue) == (10_000, 1_000)
    assert config.grace_seconds == 10.0
    assert (config.ready_file, config.log_level) == (None, "INFO")


def test_environment_fallbacks() -> None:
    env = {
        "TURNKEEPER_LISTEN": "127.0.0.1:1, [::1]:0",
        "TURNKEEPER_UNIX": "/tmp/a.sock,/tmp/b.sock",
        "TURNKEEPER_MAX_RECEIVE_BYTES": "2048",
        "TURNKEEPER_MAX_HISTORY_ROWS": "7",
        "TURNKEEPER_EVENTS": "redis://127.0.0.1:6379",
        "TURNKEEPER_RING_SIZE": "5",
        "TURNKEEPER_SUBSCRIBER_QUEUE": "3",
        "TURNKEEPER_GRACE_SECONDS": "0.5",
        "TURNKEEPER_READY_FILE": "/tmp/ready.json",
        "TURNKEEPER_LOG_LEVEL": "debug",
    }
    assert parse_config([], env) == ServerConfig(
        listen=("127.0.0.1:1", "[::1]:0"),
        unix=("/tmp/a.sock", "/tmp/b.sock"),
        max_receive_bytes=2048,
        max_history_rows=7,
        events="redis://127.0.0.1:6379",
        ring_size=5,
        subscriber_queue=3,
        grace_seconds=0.5,
        ready_file="/tmp/ready.json",
        log_level="DEBUG",
    )


def test_flags_win_over_the_environment() -> None:
    env = {
        "TURNKEEPER_LISTEN": "127.0.0.1:1",
        "TURNKEEPER_UNIX": "/tmp/env.sock",
        "TURNKEEPER_EVENTS": "redis://127.0.0.1:6379",
        "TURNKEEPER_RING_SIZE": "5",
    }
    config = parse_config(
        [
            "--listen",
            "127.0.0.1:0",
            "--listen",
            "0.0.0.0:2",
            "--unix",
            "/tmp/flag.sock",
            "--events",
            "memory",
            "--ring-size",
            "9",
            "--max-receive-bytes",
            "1_048_576",
        ],
        env,
    )
    assert config.listen == ("127.0.0.1:0", "0.0.0.0:2")
    assert config.unix == ("/tmp/flag.sock",)
    assert config.events_url is None
    assert config.ring_size == 9
    assert config.max_receive_bytes == 1024 * 1024


def test_relative_paths_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = parse_config(["--unix", "tk.sock", "--ready-file", "ready.json"], {})
    assert config.unix == (str(tmp_path / "tk.sock"),)
    assert config.ready_file == str(tmp_path / "ready.json")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--listen", "localhost"], {}, "is not host:port"),
        (["--listen", "::1:80"], {}, "IPv6 host in brackets"),
        (["--listen", "127.0.0.1:70000"], {}, "port must be 0..65535"),
        (["--listen", "127.0.0.1:1", "--listen", "127.0.0.1:1"], {}, "given twice"),
        (["--unix", "unix:/tmp/x.sock"], {}, "without 'unix:'"),
        (["--unix", "/tmp/" + "x" * 200], {}, "too long for a Unix socket"),
        (
            ["--max-receive-bytes", "lots"],
            {},
            "--max-receive-bytes: Input should be a valid integer",
        ),
        (["--max-receive-bytes", "0"], {}, "greater than or equal to 1024"),
        (["--max-history-rows", "-1"], {}, "greater than or equal to 1"),
        (["--events", "kafka://x"], {}, "redis://host:port"),
        (["--ring-size", "0"], {}, "greater than or equal to 1"),
        (["--subscriber-queue", "x"], {}, "valid integer"),
        (["--grace-seconds", "nan"], {}, "finite number"),
        (["--grace-seconds", "-1"], {}, "greater than or equal to 0"),
        (["--log-level", "LOUD"], {}, "--log-level: Input should be 'DEBUG'"),
        (["--no-such-flag"], {}, "unrecognized arguments"),
        ([], {"TURNKEEPER_MAX_HISTORY_ROWS": "many"}, "TURNKEEPER_MAX_HISTORY_ROWS"),
        ([], {"TURNKEEPER_LISTEN": "nohost"}, "TURNKEEPER_LISTEN"),
        ([], {"TURNKEEPER_EVENTS": "http://x"}, "TURNKEEPER_EVENTS"),
        ([], {"TURNKEEPER_GRACE_SECONDS": "soon"}, "TURNKEEPER_GRACE_SECONDS"),
        ([], {"TURNKEEPER_UNIX": "/tmp/a.sock,/tmp/a.sock"}, "TURNKEEPER_UNIX: the same"),
        (["--config", "/nonexistent/tk.toml"], {}, "config file /nonexistent/tk.toml"),
    ],
)
def test_bad_values_exit_2_with_a_clear_message(
    argv: list[str], env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_config(argv, env)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_the_module_reports_bad_flags_without_a_traceback() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "turnkeeper.server", "--ring-size", "zero"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PYTHONPATH": str(SERVICE_DIR)},
    )
    assert result.returncode == 2
    assert "--ring-size: Input should be a valid integer" in result.stderr
    assert "Traceback" not in result.stderr


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_a_toml_file_sets_every_option(tmp_path: Path) -> None:
    config_file = _write(
        tmp_path / "tk.toml",
        """
listen = ["127.0.0.1:7", "[::1]:8"]
unix = ["/tmp/f.sock"]
max_receive_bytes = 4096
max_history_rows = 9
events = "redis://127.0.0.1:6379"
ring_size = 11
subscriber_queue = 12
grace_seconds = 1.5
ready_file = "/tmp/r.json"
log_level = "warning"
""",
    )
    assert parse_config(["--config", config_file], {}) == ServerConfig(
        listen=("127.0.0.1:7", "[::1]:8"),
        unix=("/tmp/f.sock",),
        max_receive_bytes=4096,
        max_history_rows=9,
        events="redis://127.0.0.1:6379",
        ring_size=11,
        subscriber_queue=12,
        grace_seconds=1.5,
        ready_file="/tmp/r.json",
        log_level="WARNING",
    )


def test_precedence_is_flags_then_environment_then_file_then_defaults(tmp_path: Path) -> None:
    config_file = _write(
        tmp_path / "tk.toml", "ring_size = 1\nsubscriber_queue = 2\nmax_history_rows = 3\n"
    )
    env = {
        "TURNKEEPER_CONFIG": config_file,
        "TURNKEEPER_RING_SIZE": "10",
        "TURNKEEPER_SUBSCRIBER_QUEUE": "20",
    }
    config = parse_config(["--ring-size", "100"], env)
    assert config.ring_size == 100  # flag over environment and file
    assert config.subscriber_queue == 20  # environment over file
    assert config.max_history_rows == 3  # file over default
    assert config.grace_seconds == ServerConfig().grace_seconds  # default


def test_the_config_flag_wins_over_its_environment_variable(tmp_path: Path) -> None:
    from_env = _write(tmp_path / "env.toml", "ring_size = 1\n")
    from_flag = _write(tmp_path / "flag.toml", "ring_size = 2\n")
    config = parse_config(["--config", from_flag], {"TURNKEEPER_CONFIG": from_env})
    assert config.ring_size == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ring_size = 0\n", "config file {path}: ring_size: Input should be greater than or equal"),
        ("rings = 3\n", "config file {path}: rings: Extra inputs are not permitted"),
        ('listen = "127.0.0.1"\n', "config file {path}: listen:"),
        ("ring_size = [\n", "config file {path}: "),
    ],
)
def test_a_bad_file_exits_2_naming_the_file_and_key(
    tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "bad.toml", text)
    with pytest.raises(SystemExit) as caught:
        parse_config(["--config", path], {})
    assert caught.value.code == 2
    assert message.format(path=path) in capsys.readouterr().err


def test_a_bad_value_is_blamed_on_the_layer_that_won(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "tk.toml", "ring_size = 5\n")
    with pytest.raises(SystemExit):
        parse_config(["--config", path], {"TURNKEEPER_RING_SIZE": "lots"})
    err = capsys.readouterr().err
    assert "environment variable TURNKEEPER_RING_SIZE" in err
    assert "config file" not in err


def test_print_config_prints_a_file_that_reads_back_to_the_same_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--listen", "127.0.0.1:0", "--unix", "/tmp/p.sock", "--events", "redis://h:1"]
    env = {"TURNKEEPER_GRACE_SECONDS": "2.5"}
    with pytest.raises(SystemExit) as caught:
        parse_config([*argv, "--print-config"], env)
    assert caught.value.code == 0
    printed = capsys.readouterr().out
    assert 'events = "redis://h:1"' in printed
    path = _write(tmp_path / "printed.toml", printed)
    assert parse_config(["--config", path], {}) == parse_config(argv, env)


def test_print_config_through_the_module() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "turnkeeper.server", "--print-config", "--ring-size", "7"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PYTHONPATH": str(SERVICE_DIR), "TURNKEEPER_LOG_LEVEL": "error"},
    )
    assert result.returncode == 0, result.stderr
    assert "ring_size = 7\n" in result.stdout
    assert 'log_level = "ERROR"\n' in result.stdout


def test_version_is_the_repository_version_on_the_module_and_the_console_script() -> None:
    version = (SERVICE_DIR.parent / "VERSION").read_text(encoding="utf-8").strip()
    console_script = Path(sys.executable).with_name("turnkeeper-server")
    for command in ([sys.executable, "-m", "turnkeeper.server"], [str(console_script)]):
        result = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
        assert result.returncode == 0, result.stderr
        assert (
            result.stdout.strip()
            == f"turnkeeper-server {version} (engine: {default_engine_name()})"
        )


def test_engine_options_and_their_environment_fallbacks() -> None:
    """--engine python|native and --engine-workers, with TURNKEEPER_ENGINE* fallbacks (issue 8)."""
    assert parse_config([], {}).engine is None  # native when built, else python
    env = {"TURNKEEPER_ENGINE": "Python", "TURNKEEPER_ENGINE_WORKERS": "3"}
    assert (parse_config([], env).engine, parse_config([], env).engine_workers) == ("python", 3)
    flags = parse_config(["--engine", "native", "--engine-workers", "8"], env)
    assert (flags.engine, flags.engine_workers) == ("native", 8)
    assert parse_config([], {}).engine_workers >= 2


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--engine", "java"], {}, "--engine"),
        (["--engine-workers", "0"], {}, "--engine-workers"),
        ([], {"TURNKEEPER_ENGINE": "fast"}, "TURNKEEPER_ENGINE"),
    ],
)
def test_bad_engine_values_exit_2(
    argv: list[str], env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_config(argv, env)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_parsing_does_not_look_for_the_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only `--version` asks which engine is built; a parse without it never does (issue 28)."""

    def looked() -> str:
        raise AssertionError("the parse looked for the native engine")

    monkeypatch.setattr("turnkeeper.server.engine.default_engine_name", looked)
    assert parse_config(["--ring-size", "7"], {}).ring_size == 7
