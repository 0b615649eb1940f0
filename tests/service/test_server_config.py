"""Server configuration: flags, TURNKEEPER_* fallbacks, defaults, and clean errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from turnkeeper.server.config import ServerConfig, parse_config

SERVICE_DIR = Path(__file__).resolve().parents[2] / "service"


def test_defaults() -> None:
    config = parse_config([], {})
    assert config == ServerConfig()
    assert config.listen == ("127.0.0.1:50051",)
    assert config.unix == ()
    assert config.max_receive_bytes == config.max_send_bytes == 64 * 1024 * 1024
    assert config.max_history_rows == 100_000
    assert config.events_url is None
    assert (config.ring_size, config.subscriber_queue_size) == (10_000, 1_000)
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
        events_url="redis://127.0.0.1:6379",
        ring_size=5,
        subscriber_queue_size=3,
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
        (["--max-receive-bytes", "lots"], {}, "is not an integer"),
        (["--max-receive-bytes", "0"], {}, "outside"),
        (["--max-history-rows", "-1"], {}, "outside"),
        (["--events", "kafka://x"], {}, "redis://host:port"),
        (["--ring-size", "0"], {}, "outside"),
        (["--subscriber-queue", "x"], {}, "is not an integer"),
        (["--grace-seconds", "nan"], {}, "finite number"),
        (["--grace-seconds", "-1"], {}, "finite number"),
        (["--log-level", "LOUD"], {}, "choose one of"),
        (["--no-such-flag"], {}, "unrecognized arguments"),
        ([], {"TURNKEEPER_MAX_HISTORY_ROWS": "many"}, "TURNKEEPER_MAX_HISTORY_ROWS"),
        ([], {"TURNKEEPER_LISTEN": "nohost"}, "TURNKEEPER_LISTEN"),
        ([], {"TURNKEEPER_EVENTS": "http://x"}, "TURNKEEPER_EVENTS"),
        ([], {"TURNKEEPER_GRACE_SECONDS": "soon"}, "TURNKEEPER_GRACE_SECONDS"),
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
    assert "--ring-size: 'zero' is not an integer" in result.stderr
    assert "Traceback" not in result.stderr
