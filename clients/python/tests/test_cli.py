"""The `turnkeeper` CLI against the live server, compared with the client's own results."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import pytest
from google.protobuf import json_format
from turnkeeper.v1 import history_pb2, profile_pb2, resolution_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc

from turnkeeper_client import (
    TurnkeeperClient,
    TurnMarks,
    _render,
    cli,
    from_anthropic,
    from_openai,
    to_anthropic,
    turn_marks,
)
from turnkeeper_client.convert import to_openai

from .conftest import Endpoints
from .helpers import budget_trim, three_turns
from .proxy import CuttableProxy


def run(
    endpoints: Endpoints, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnkeeper_client", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TURNKEEPER_ADDRESS": endpoints.address},
        check=False,
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    history = three_turns()
    out = {
        "openai": tmp_path / "openai.json",
        "anthropic": tmp_path / "anthropic.json",
        "proto": tmp_path / "history.json",
        "profiles": tmp_path / "profiles.json",
    }
    out["openai"].write_text(json.dumps({"model": "m", "messages": to_openai(history)}))
    out["anthropic"].write_text(json.dumps(to_anthropic(history)))
    out["proto"].write_text(json_format.MessageToJson(history))
    out["profiles"].write_text(
        json.dumps(
            {
                "runtime": {"contextCompactRatio": 0.5, "defaultProvider": "p"},
                "providers": [{"alias": "p", "model": "big", "contextWindow": "400"}],
            }
        )
    )
    return out


def test_console_script_is_declared() -> None:
    scripts = metadata.entry_points(group="console_scripts", name="turnkeeper")
    assert "turnkeeper_client.cli:main" in {s.value for s in scripts}


def test_version_is_the_repository_version(endpoints: Endpoints) -> None:
    result = run(endpoints, "--version")
    assert result.returncode == 0, result.stderr
    version = (Path(__file__).resolve().parents[3] / "VERSION").read_text(encoding="utf-8")
    assert result.stdout.strip() == f"turnkeeper {version.strip()}"


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "proto"])
def test_estimate_each_format(
    fmt: str, files: dict[str, Path], endpoints: Endpoints, client: TurnkeeperClient
) -> None:
    expected = client.estimate_tokens(svc.EstimateTokensRequest(history=three_turns()))
    result = run(endpoints, "estimate", str(files[fmt]), "--json")
    assert result.returncode == 0, result.stderr
    assert json_format.Parse(result.stdout, svc.EstimateTokensResponse()) == expected
    readable = run(endpoints, "estimate", str(files[fmt]), "--format", fmt)
    assert readable.returncode == 0, readable.stderr
    assert readable.stdout.startswith(f"total {expected.total_tokens} tokens (images 0) in 7 rows")


def test_estimate_from_stdin_over_unix(endpoints: Endpoints, files: dict[str, Path]) -> None:
    result = run(
        endpoints,
        "estimate",
        "-",
        "--unix",
        endpoints.unix_path,
        "--json",
        stdin=files["openai"].read_text(),
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["turns"] == 3


def test_resolve(endpoints: Endpoints, files: dict[str, Path], client: TurnkeeperClient) -> None:
    result = run(endpoints, "resolve", str(files["profiles"]), "--json")
    assert result.returncode == 0, result.stderr
    response = json_format.Parse(result.stdout, svc.ResolveBudgetResponse())
    assert response.resolution.budget_tokens == 200  # 400 x 0.5
    text = run(endpoints, "resolve", "--profiles", str(files["profiles"]), "--switch", "q/other")
    assert text.returncode == 0, text.stderr
    assert "route      q/other (session switch)" in text.stdout
    assert "capacity   unknown (safety arithmetic uses 32000)" in text.stdout


def test_trim_matches_the_client(
    endpoints: Endpoints, files: dict[str, Path], client: TurnkeeperClient
) -> None:
    expected = client.trim_history(budget_trim("cli-session"))
    result = run(
        endpoints,
        "trim",
        str(files["anthropic"]),
        "--budget",
        "60",
        "--session",
        "cli-session",
        "--runtime",
        "pytest",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert json_format.Parse(result.stdout, svc.TrimHistoryResponse()) == expected
    text = run(endpoints, "trim", str(files["openai"]), "--budget", "60")
    assert text.stdout.startswith("trimmed: dropped 4 rows (2 turns) = input rows [1, 5)")
    assert "breadcrumb inserted at row 1" in text.stdout


def test_trim_with_profiles_and_emit(endpoints: Endpoints, files: dict[str, Path]) -> None:
    result = run(
        endpoints,
        "trim",
        str(files["openai"]),
        "--profiles",
        str(files["profiles"]),
        "--emit",
        "openai",
    )
    assert result.returncode == 0, result.stderr
    trimmed = from_openai(json.loads(result.stdout))
    rows = trimmed.chat.messages
    # Turns cost 78 tokens, the system row 6, the breadcrumb 17: budget 200 keeps two turns.
    assert rows[1].breadcrumb and len(rows) == 6
    anthropic = run(
        endpoints,
        "trim",
        str(files["proto"]),
        "--max-turns",
        "2",
        "--mode",
        "turn-count",
        "--emit",
        "anthropic",
    )
    assert anthropic.returncode == 0, anthropic.stderr
    assert len(from_anthropic(json.loads(anthropic.stdout)).chat.messages) == 6


def test_trim_responses_items_round_trip(endpoints: Endpoints, tmp_path: Path) -> None:
    """Responses items are detected, and `--emit openai_responses` gives them back unchanged
    when nothing has to go (the passthrough keeps ids, statuses and reasoning)."""
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    path = tmp_path / "items.json"
    path.write_text(json.dumps(items))
    result = run(
        endpoints,
        "trim",
        str(path),
        "--max-turns",
        "5",
        "--mode",
        "turn-count",
        "--emit",
        "openai_responses",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == items


def test_trim_full_proto_request_with_flag_override(endpoints: Endpoints, tmp_path: Path) -> None:
    request = svc.TrimHistoryRequest(
        history=three_turns(),
        mode=trim_pb2.TRIM_MODE_ROW_COUNT,
        caller_path=trim_pb2.CALLER_PATH_CHANNEL_SENDER_CACHE,
        explicit_limits=svc.ExplicitLimits(max_history_messages=2),
    )
    path = tmp_path / "request.json"
    path.write_text(json_format.MessageToJson(request))
    result = run(endpoints, "trim", str(path), "--json")
    assert result.returncode == 0, result.stderr
    response = json_format.Parse(result.stdout, svc.TrimHistoryResponse())
    assert len(response.history.chat.messages) == 3  # the system row + the newest 2 rows
    assert not response.HasField("history_trimmed")
    overridden = run(endpoints, "trim", str(path), "--max-rows", "4", "--json")
    assert len(json.loads(overridden.stdout)["history"]["chat"]["messages"]) == 5


def test_server_error_is_decoded(endpoints: Endpoints, tmp_path: Path) -> None:
    bad = history_pb2.History(
        chat=history_pb2.ChatHistory(
            messages=[history_pb2.ChatMessage(role=history_pb2.ROLE_TOOL, content="x")]
        )
    )
    path = tmp_path / "bad.json"
    path.write_text(json_format.MessageToJson(bad))
    text = run(endpoints, "estimate", str(path))
    assert text.returncode == 1
    assert "INVALID_ARGUMENT (ERROR_REASON_INVALID_HISTORY)" in text.stderr
    assert "  history.chat.messages[0].tool_call_id: " in text.stderr
    as_json = run(endpoints, "estimate", str(path), "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stderr) == {
        "code": "INVALID_ARGUMENT",
        "message": json.loads(as_json.stderr)["message"],
        "reason": "ERROR_REASON_INVALID_HISTORY",
        "fieldViolations": ["history.chat.messages[0].tool_call_id"],
    }


def test_usage_errors_exit_2(endpoints: Endpoints, tmp_path: Path, files: dict[str, Path]) -> None:
    missing = run(endpoints, "estimate", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    (tmp_path / "odd.json").write_text('{"foo": 1}')
    odd = run(endpoints, "estimate", str(tmp_path / "odd.json"))
    assert odd.returncode == 2 and "unrecognised input" in odd.stderr
    both = run(
        endpoints,
        "trim",
        str(files["openai"]),
        "--budget",
        "5",
        "--profiles",
        str(files["profiles"]),
    )
    assert both.returncode == 2
    wrong = run(endpoints, "estimate", str(files["anthropic"]), "--format", "proto")
    assert wrong.returncode == 2


class Lines:
    """Reads a child's output lines on a thread so a test can wait with a timeout."""

    def __init__(self, stream: IO[str]) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)

    def next(self, timeout: float = 15.0) -> str:
        return self._queue.get(timeout=timeout)

    def rest(self) -> str:
        self._thread.join(15)
        out = []
        while not self._queue.empty():
            out.append(self._queue.get())
        return "".join(out)


@pytest.fixture
def spawn(endpoints: Endpoints) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> tuple[subprocess.Popen[str], Lines, Lines]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "turnkeeper_client", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TURNKEEPER_ADDRESS": endpoints.address},
        )
        procs.append(proc)
        assert proc.stdout is not None and proc.stderr is not None
        return proc, Lines(proc.stdout), Lines(proc.stderr)

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_watch_json_lines(spawn: Any, client: TurnkeeperClient) -> None:
    session = uuid.uuid4().hex
    proc, out, err = spawn(
        "watch", "--json", "--limit", "1", "--heartbeat", "1", "--session", session
    )
    assert "heartbeat" in json.loads(out.next())
    response = client.trim_history(budget_trim(session))
    item = json_format.Parse(out.next(), svc.TrimEventsResponse())
    assert item.event.trimmed == response.history_trimmed
    assert proc.wait(15) == 0
    assert f"resume with --after {item.event.cursor}" in err.rest()


def test_watch_resumes_after_a_disconnect(
    spawn: Any, endpoints: Endpoints, client: TurnkeeperClient
) -> None:
    session = uuid.uuid4().hex
    with CuttableProxy(endpoints.address) as proxy:
        proc, out, err = spawn(
            "watch",
            "--address",
            proxy.address,
            "--limit",
            "2",
            "--heartbeat",
            "1",
            "--session",
            session,
        )
        # The subscription is answered at once with a heartbeat naming its resume position.
        beat = re.search(r" heartbeat cursor=(\S+) ", out.next())
        assert beat is not None and beat.group(1) != "-"
        client.trim_history(budget_trim(session))
        first = out.next()
        assert " event token budget: dropped 4 rows (2 turns)" in first
        assert f"session={session}" in first
        proxy.cut()
        client.trim_history(budget_trim(session, budget=200))
        threading.Timer(0.5, proxy.restore).start()
        second = out.next()
        assert " event token budget: dropped 2 rows (1 turn)" in second
        assert proc.wait(15) == 0
    assert "reconnecting in" in err.rest()


def anthropic_request(history: history_pb2.History) -> dict[str, Any]:
    """An Anthropic Messages request as a runtime stores it: model, max_tokens and tools too."""
    return {
        "model": "claude-test",
        "max_tokens": 512,
        "tools": [{"name": "lookup", "input_schema": {"type": "object", "properties": {}}}],
        **to_anthropic(history),
    }


def test_trim_emit_anthropic_keeps_model_max_tokens_and_tools(
    endpoints: Endpoints, tmp_path: Path
) -> None:
    request = anthropic_request(three_turns())
    path = tmp_path / "anthropic.json"
    path.write_text(json.dumps(request))
    result = run(endpoints, "trim", str(path), "--budget", "120", "--emit", "anthropic")
    assert result.returncode == 0, result.stderr
    emitted = json.loads(result.stdout)
    assert {k: emitted[k] for k in ("model", "max_tokens", "tools")} == {
        k: request[k] for k in ("model", "max_tokens", "tools")
    }
    assert emitted["system"] == request["system"]
    assert len(emitted["messages"]) < len(request["messages"])  # trimmed, and still a request
    openai = {"model": "gpt-test", "tools": [{"type": "function"}], "messages": "replaced"}
    openai["messages"] = to_openai(three_turns())
    (tmp_path / "openai.json").write_text(json.dumps(openai))
    result = run(
        endpoints, "trim", str(tmp_path / "openai.json"), "--budget", "120", "--emit", "openai"
    )
    emitted = json.loads(result.stdout)
    assert (emitted["model"], emitted["tools"]) == ("gpt-test", openai["tools"])


def test_prepare_matches_the_client_and_emits_the_request(
    endpoints: Endpoints, files: dict[str, Path], client: TurnkeeperClient, tmp_path: Path
) -> None:
    request = anthropic_request(three_turns())
    path = tmp_path / "anthropic.json"
    path.write_text(json.dumps(request))
    profiles = profile_pb2.Profiles()
    json_format.Parse(files["profiles"].read_text(), profiles)
    expected = client.prepare_model_call(
        svc.PrepareModelCallRequest(
            history=from_anthropic(request),
            profiles=profiles,
            hook_texts=["hook"],
            reserved_output_tokens=20,
            caller=trim_pb2.CallerContext(session_id="cli-prepare"),
        )
    )
    args = ["prepare", str(path), "--profiles", str(files["profiles"]), "--hook-text", "hook"]
    args += ["--reserved-output", "20", "--session", "cli-prepare"]
    as_json = run(endpoints, *args, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json_format.Parse(as_json.stdout, svc.PrepareModelCallResponse()) == expected
    text = run(endpoints, *args)
    assert text.stdout.startswith(f"prepared: tokens {expected.tokens_before} -> ")
    assert "capacity: fits: total" in text.stdout and "trim: token budget: dropped" in text.stdout
    emitted = json.loads(run(endpoints, *args, "--emit", "anthropic").stdout)
    assert (emitted["model"], emitted["max_tokens"]) == ("claude-test", 512)
    assert emitted["tools"] == request["tools"]
    # The prepared history, with cache_control on the rows the preparation returned (§14).
    assert expected.cache_breakpoints
    marked = to_anthropic(expected.history, cache_breakpoints=expected.cache_breakpoints)
    assert (emitted["system"], emitted["messages"]) == (marked["system"], marked["messages"])


def test_prepare_that_cannot_fit_fails_with_the_capacity_report(
    endpoints: Endpoints, files: dict[str, Path]
) -> None:
    result = run(
        endpoints,
        "prepare",
        str(files["openai"]),
        "--profiles",
        str(files["profiles"]),
        "--reserved-output",
        "100000",
    )
    assert result.returncode == 1
    assert "FAILED_PRECONDITION (ERROR_REASON_CONTEXT_WINDOW_EXCEEDED)" in result.stderr
    assert "capacity report: total" in result.stderr


def test_check_exits_3_when_the_request_does_not_fit(
    endpoints: Endpoints, files: dict[str, Path], tmp_path: Path
) -> None:
    schema = tmp_path / "tool.json"
    schema.write_text('{"name": "lookup", "parameters": {"type": "object"}}')
    fits = run(
        endpoints,
        "check",
        str(files["openai"]),
        "--profiles",
        str(files["profiles"]),
        "--tool-schema",
        str(schema),
    )
    assert fits.returncode == 0, fits.stderr
    assert fits.stdout.startswith("fits: total ")
    response = json_format.Parse(
        run(
            endpoints,
            "check",
            str(files["openai"]),
            "--profiles",
            str(files["profiles"]),
            "--tool-schema",
            str(schema),
            "--json",
        ).stdout,
        svc.CheckCapacityResponse(),
    )
    assert response.report.tool_schema_tokens > 0 and response.report.fits
    too_big = run(
        endpoints,
        "check",
        str(files["openai"]),
        "--profiles",
        str(files["profiles"]),
        "--reserved-output",
        "100000",
    )
    assert too_big.returncode == 3
    assert too_big.stdout.startswith("does not fit: total ")


def test_sweep_removes_orphans_and_reports_them(endpoints: Endpoints, tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "ghost", "content": "a result without its call"},
        {"role": "assistant", "content": "hello"},
    ]
    path = tmp_path / "orphans.json"
    path.write_text(json.dumps(messages))
    text = run(endpoints, "sweep", str(path))
    assert text.returncode == 0, text.stderr
    assert "swept 1 orphan:" in text.stdout and "'ghost'" in text.stdout
    emitted = json.loads(run(endpoints, "sweep", str(path), "--emit", "openai").stdout)
    assert [m["role"] for m in emitted] == ["user", "assistant"]
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps([messages[0], messages[2]]))
    assert "no orphans" in run(endpoints, "sweep", str(clean)).stdout


def test_cap_matches_the_client(
    endpoints: Endpoints, client: TurnkeeperClient, tmp_path: Path
) -> None:
    long = tmp_path / "long.txt"
    long.write_text("x" * 300 + "[IMAGE:https://example.com/a.png]" + "y" * 300)
    short = tmp_path / "short.txt"
    short.write_text("fine")
    expected = client.cap_tool_results(
        svc.CapToolResultsRequest(
            contents=[long.read_text(), short.read_text()], max_tool_result_chars=100
        )
    )
    as_json = run(endpoints, "cap", str(long), str(short), "--max-chars", "100", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json_format.Parse(as_json.stdout, svc.CapToolResultsResponse()) == expected
    text = run(endpoints, "cap", str(long), str(short), "--max-chars", "100").stdout
    assert f"{long}: {expected.results[0].truncated_chars} chars cut" in text
    assert f"{short}: unchanged" in text
    assert run(endpoints, "cap", str(long), "--max-chars", "0").returncode == 2


def test_classify_provider_errors(endpoints: Endpoints) -> None:
    overflow = run(
        endpoints,
        "classify",
        "prompt is too long: 250000 tokens > 200000 maximum",
        "--http-status",
        "400",
    )
    assert overflow.returncode == 0, overflow.stderr
    assert overflow.stdout.startswith("context-window overflow (matched ")
    other = run(endpoints, "classify", "-", "--json", stdin="rate limit exceeded, retry later")
    assert other.returncode == 0, other.stderr
    response = json_format.Parse(other.stdout, svc.ClassifyProviderErrorResponse())
    assert not response.overflow
    assert "not a context-window overflow" in run(endpoints, "classify", "rate limited").stdout


def test_watch_prints_its_resume_cursor_on_sigterm(spawn: Any) -> None:
    proc, out, err = spawn("watch", "--heartbeat", "1", "--session", uuid.uuid4().hex)
    beat = re.search(r" heartbeat cursor=(\S+) ", out.next())
    assert beat is not None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 128 + signal.SIGTERM
    assert f"resume with --after {beat.group(1)}" in err.rest()


def _low_water_request(*argv: str) -> svc.TrimHistoryRequest:
    """The TrimHistoryRequest `turnkeeper trim` would send, built without a server."""
    args = cli._parser().parse_args(["trim", *argv])
    return cli._trim_request(args, cli._load_input(args))


def test_low_water_joins_explicit_limits_else_the_runtime_profile(
    files: dict[str, Path], tmp_path: Path
) -> None:
    history = str(files["proto"])
    explicit = _low_water_request(history, "--budget", "100", "--low-water", "0.7")
    assert explicit.explicit_limits.budget_tokens == 100
    assert explicit.explicit_limits.history_trim_low_water == 0.7
    profiled = _low_water_request(
        history, "--profiles", str(files["profiles"]), "--low-water", "0.5"
    )
    assert profiled.profiles.runtime.context_compact_ratio == 0.5  # the file's, kept
    assert profiled.profiles.runtime.history_trim_low_water == 0.5
    defaults = _low_water_request(history, "--low-water", "0.9")
    assert defaults.WhichOneof("limits") == "profiles"
    assert defaults.profiles == profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(history_trim_low_water=0.9)
    )
    # A request file's explicit limits take the flag too, and keep their other fields.
    request = svc.TrimHistoryRequest(
        history=three_turns(), explicit_limits=svc.ExplicitLimits(budget_tokens=80)
    )
    path = tmp_path / "request.json"
    path.write_text(json_format.MessageToJson(request))
    from_file = _low_water_request(str(path), "--low-water", "0.8")
    assert from_file.explicit_limits == svc.ExplicitLimits(
        budget_tokens=80, history_trim_low_water=0.8
    )
    assert not _low_water_request(history).HasField("profiles")


def test_low_water_and_the_grid_cut_are_rendered() -> None:
    resolution = resolution_pb2.Resolution(budget_tokens=2000, history_trim_low_water=0.7)
    assert "low water  0.7" in _render.resolution(resolution)
    ignored = resolution_pb2.Resolution(history_trim_low_water=1.0, low_water_ignored=True)
    assert (
        "low water  1 (minimal cut) (history_trim_low_water outside (0, 1] was ignored)"
        in _render.resolution(ignored)
    )
    response = svc.TrimHistoryResponse(
        outcome=svc.TrimOutcome(
            trimmed=True, target_tokens=2000, cut_step=600, cut_drop_target=600
        ),
        history_trimmed=trim_pb2.HistoryTrimmed(
            reason=trim_pb2.TRIM_REASON_TURN_LIMIT, cut_step=2, cut_drop_target=4
        ),
        resolution=resolution,
    )
    text = _render.trim(response)
    assert "\ngrid cut: step 600 tokens, drop target 600 tokens\n" in text
    assert "(grid cut: step 2 turns, drop target 4 turns)" in text
    assert "max turns 0, low water 0.7, route" in text
    assert "grid cut" not in _render.trim(svc.TrimHistoryResponse())


def test_low_water_trims_on_the_grid_of_the_spec_example(
    endpoints: Endpoints, tmp_path: Path
) -> None:
    """Spec §11.1's example: rows of 104 tokens, 10 turns, budget 2,000; the minimal cut drops one
    turn, L = 0.7 rounds the drop up to the 600-token step: three turns."""
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="s" * 400)]
    for _ in range(10):
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="u" * 400))
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content="a" * 400))
    path = tmp_path / "history.json"
    path.write_text(
        json_format.MessageToJson(history_pb2.History(chat=history_pb2.ChatHistory(messages=rows)))
    )
    flags = ["trim", str(path), "--budget", "2000"]
    minimal = json_format.Parse(run(endpoints, *flags, "--json").stdout, svc.TrimHistoryResponse())
    assert (minimal.outcome.dropped_turns, minimal.outcome.cut_step) == (1, 0)
    result = run(endpoints, *flags, "--low-water", "0.7", "--json")
    assert result.returncode == 0, result.stderr
    outcome = json_format.Parse(result.stdout, svc.TrimHistoryResponse()).outcome
    assert (outcome.dropped_turns, outcome.cut_step, outcome.cut_drop_target) == (3, 600, 600)
    text = run(endpoints, *flags, "--low-water", "0.7").stdout
    assert "\ngrid cut: step 600 tokens, drop target 600 tokens\n" in text
    resolved = run(endpoints, "resolve", "--low-water", "0.7").stdout
    assert "low water  0.7\n" in resolved
    ignored = run(endpoints, "resolve", "--low-water", "1.5").stdout
    assert (
        "low water  1 (minimal cut) (history_trim_low_water outside (0, 1] was ignored)" in ignored
    )


def _tool_context_history(turns: int) -> history_pb2.History:
    """Spec §13.3's example shape: a system row, `turns` completed turns of a call pair, two
    results and a reply, then a running turn of one call and its result."""
    rows = [history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="sys")]
    for t in range(1, turns + 1):
        calls = [history_pb2.ToolCall(id=f"c{t}{x}", name="f", arguments="{}") for x in "ab"]
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content=f"q{t}"))
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, tool_calls=calls))
        rows.extend(
            history_pb2.ChatMessage(role=history_pb2.ROLE_TOOL, tool_call_id=c.id, content="r" * 40)
            for c in calls
        )
        rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, content=f"a{t}"))
    call = history_pb2.ToolCall(id="run", name="f", arguments="{}")
    rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="now"))
    rows.append(history_pb2.ChatMessage(role=history_pb2.ROLE_ASSISTANT, tool_calls=[call]))
    rows.append(
        history_pb2.ChatMessage(role=history_pb2.ROLE_TOOL, tool_call_id="run", content="r" * 40)
    )
    return history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))


def test_tool_context_flags_join_explicit_limits_else_the_runtime_profile(
    files: dict[str, Path],
) -> None:
    history = str(files["proto"])
    flags = ("--keep-tool-context-turns", "3", "--keep-running-turn-tool-results", "0")
    explicit = _low_water_request(history, "--budget", "100", *flags)
    assert explicit.explicit_limits == svc.ExplicitLimits(
        budget_tokens=100, keep_tool_context_turns=3, keep_running_turn_tool_results=0
    )
    profiled = _low_water_request(history, "--profiles", str(files["profiles"]), *flags)
    assert profiled.profiles.runtime.context_compact_ratio == 0.5  # the file's, kept
    assert profiled.profiles.runtime.keep_tool_context_turns == 3
    assert profiled.profiles.runtime.HasField("keep_running_turn_tool_results")
    for command in ("resolve", "prepare"):
        args = cli._parser().parse_args([command, *([history] if command == "prepare" else [])])
        args.keep_tool_context_turns, args.keep_running_turn_tool_results = 0, None
        request = svc.PrepareModelCallRequest()
        cli._set_runtime_flags(args, request)
        assert request.profiles.runtime.HasField("keep_tool_context_turns")
        assert not request.profiles.runtime.HasField("keep_running_turn_tool_results")
    unset = _low_water_request(history, "--profiles", str(files["profiles"]))
    assert not unset.profiles.runtime.HasField("keep_tool_context_turns")


@pytest.mark.parametrize("value", ["-1", "4294967296", "two"])
def test_tool_context_flags_refuse_what_is_no_count(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli._parser().parse_args(["resolve", "--keep-tool-context-turns", value])
    assert exit_info.value.code == 2
    assert "--keep-tool-context-turns" in capsys.readouterr().err


def test_tool_context_collapse_clearing_and_breakpoints_are_rendered() -> None:
    resolution = resolution_pb2.Resolution(
        keep_tool_context_turns=2, keep_running_turn_tool_results=3, min_cacheable_tokens=1024
    )
    text = _render.resolution(resolution)
    assert (
        "tool ctx   K 2: tool rows of the running turn and 2 completed turns before it; "
        "R 3: an oversized running turn keeps its newest 3 tool results\n" in text
    )
    assert "min cache  1024 tokens (cache breakpoints)" in text
    assert "R unset: the running turn is kept whole" in _render.resolution(
        resolution_pb2.Resolution()
    )
    assert "min cache" not in _render.resolution(resolution_pb2.Resolution())
    collapse = trim_pb2.ToolContextCollapse(collapsed_turns=2, rows_left_out=6, saved_tokens=38)
    clearing = trim_pb2.ToolResultClearing(results_cleared=1, saved_tokens=9)
    summary = history_pb2.ChatMessage(
        role=history_pb2.ROLE_ASSISTANT, content="s", tool_exchange_summary=True
    )
    response = svc.PrepareModelCallResponse(
        resolution=resolution,
        history=history_pb2.History(
            chat=history_pb2.ChatHistory(
                messages=[history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="q"), summary]
            )
        ),
        collapse=collapse,
        clearing=clearing,
        cache_breakpoints=[1],
        dropped_input_rows=[0, 1, 2],
        trims=[
            trim_pb2.HistoryTrimmed(
                reason=trim_pb2.TRIM_REASON_TOOL_RESULTS_CLEARED,
                collapse=collapse,
                clearing=clearing,
            )
        ],
    )
    text = _render.prepare(response)
    assert "\ntool context: collapsed 2 turns: 6 rows left out, 38 tokens saved\n" in text
    assert "\nrunning turn: cleared 1 tool result, 9 tokens saved\n" in text
    assert (
        "trim: tool results cleared: dropped 0 rows (0 turns), kept 0 turns, tokens 0 -> 0 "
        "(collapsed 2 turns: 6 rows left out, 38 tokens saved) "
        "(cleared 1 tool result, 9 tokens saved)\n" in text
    )
    assert "\ndropped input rows: 0, 1, 2\n" in text
    assert "\ncache breakpoints: after rows 1 (starred)\n" in text
    assert '\n   0  user      "q"\n   1* assistant [tool-exchange summary] "s"' in text
    assert "tool context K 2, R 3" in text
    bare = _render.prepare(svc.PrepareModelCallResponse())
    assert "cache breakpoints: none" in bare
    assert "tool context:" not in bare and "running turn:" not in bare


def test_prepare_collapses_old_tool_context_and_says_where_the_marks_go(
    endpoints: Endpoints, tmp_path: Path
) -> None:
    """Spec §13.3's example through `turnkeeper prepare`: K = 2 collapses turns 1 and 2 (6 rows
    left out, 2 summaries); `--keep-tool-context-turns 0` collapses all four."""
    path = tmp_path / "history.json"
    path.write_text(json_format.MessageToJson(_tool_context_history(4)))
    result = run(endpoints, "prepare", str(path), "--json")
    assert result.returncode == 0, result.stderr
    response = json_format.Parse(result.stdout, svc.PrepareModelCallResponse())
    assert (response.collapse.collapsed_turns, response.collapse.rows_left_out) == (2, 6)
    assert len(response.history.chat.messages) == 20
    assert response.resolution.keep_tool_context_turns == 2
    text = run(endpoints, "prepare", str(path)).stdout
    assert "\ntool context: collapsed 2 turns: 6 rows left out, " in text
    marks = ", ".join(map(str, response.cache_breakpoints))
    assert f"\ncache breakpoints: after rows {marks} (starred)\n" in text
    assert "   0* system    " in text
    assert "tool context K 2, R unset" in text
    none_kept = run(endpoints, "prepare", str(path), "--keep-tool-context-turns", "0").stdout
    assert "\ntool context: collapsed 4 turns: 12 rows left out, " in none_kept
    resolved = run(
        endpoints,
        "resolve",
        "--keep-tool-context-turns",
        "1",
        "--keep-running-turn-tool-results",
        "2",
    ).stdout
    assert "tool ctx   K 1: tool rows of the running turn and 1 completed turn before it; R 2" in (
        resolved
    )


def _compaction_files(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    request = anthropic_request(three_turns())
    path = tmp_path / "anthropic.json"
    path.write_text(json.dumps(request))
    return path, request


def test_compact_matches_the_client_and_emits_the_summary_request(
    endpoints: Endpoints, files: dict[str, Path], client: TurnkeeperClient, tmp_path: Path
) -> None:
    path, request = _compaction_files(tmp_path)
    profiles = profile_pb2.Profiles()
    json_format.Parse(files["profiles"].read_text(), profiles)
    history = from_anthropic(request, marks=TurnMarks(pinned_turns=(0,)))
    expected = client.plan_compaction(
        svc.PlanCompactionRequest(
            history=history,
            profiles=profiles,
            summary_output_tokens=50,
            instruction="Summarize.",
            caller=trim_pb2.CallerContext(session_id="cli-compact"),
        )
    )
    assert expected.HasField("plan"), expected
    args = ["compact", str(path), "--profiles", str(files["profiles"]), "--pin-turn", "0"]
    args += ["--summary-output-tokens", "50", "--instruction", "Summarize."]
    args += ["--session", "cli-compact"]
    as_json = run(endpoints, *args, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json_format.Parse(as_json.stdout, svc.PlanCompactionResponse()) == expected
    text = run(endpoints, *args).stdout
    plan = expected.plan
    assert text.startswith(
        f"plan: condense 1 turn = input rows [3, 5); saves {plan.saved_tokens} tokens\n"
    )
    assert "pinned turns kept after the summary: input rows [1, 3)\n" in text
    assert f"summary request: {plan.summary_request_tokens} tokens" in text
    assert "[pinned]" in text
    emitted = json.loads(run(endpoints, *args, "--emit", "anthropic").stdout)
    assert emitted["model"] == "claude-test"
    assert emitted["messages"][-1] == {"role": "user", "content": "Summarize."}
    assert from_anthropic(emitted, marks=turn_marks(plan.summary_request)) == plan.summary_request


def test_compact_without_a_plan_exits_3_with_the_refusal(
    endpoints: Endpoints, files: dict[str, Path], tmp_path: Path
) -> None:
    path, _ = _compaction_files(tmp_path)
    args = ["compact", str(path), "--profiles", str(files["profiles"])]
    # The default 2,000 reserved output tokens exceed the 400-token window on their own.
    too_large = run(endpoints, *args)
    assert too_large.returncode == 3, too_large.stderr
    assert too_large.stdout.startswith("no plan: too large (the smallest summary request needs ")
    assert "the summarizer's capacity is 400)" in too_large.stdout
    emitted = run(endpoints, *args, "--emit", "openai")
    assert (emitted.returncode, emitted.stdout) == (3, "")
    assert emitted.stderr.startswith("no plan: too large")
    nothing = run(endpoints, "compact", str(files["openai"]), "--summary-output-tokens", "1")
    assert nothing.returncode == 3, nothing.stderr
    assert nothing.stdout.startswith("no plan: nothing to condense\n")


def test_compact_usage_errors_exit_2(endpoints: Endpoints, files: dict[str, Path]) -> None:
    for argv, message in (
        (["--summarizer-model", "m"], "--summarizer-model needs --summarizer-provider"),
        (["--summary-output-tokens", "-1"], "--summary-output-tokens must not be negative"),
        (["--min-saved-tokens", "-5"], "--min-saved-tokens must not be negative"),
    ):
        result = run(endpoints, "compact", str(files["openai"]), *argv)
        assert result.returncode == 2, argv
        assert message in result.stderr
    marked_proto = run(endpoints, "compact", str(files["proto"]), "--pin-turn", "0")
    assert marked_proto.returncode == 2
    assert "--summary-row and --pin-turn are for provider JSON" in marked_proto.stderr
    missing = run(endpoints, "estimate", str(files["openai"]), "--pin-turn", "7")
    assert missing.returncode == 2
    assert "marks.pinned_turns: turn 7 does not exist (the history has 3)" in missing.stderr


def test_compaction_request_flags() -> None:
    argv = ["compact", "h.json", "--summarizer-provider", "small", "--summarizer-model", "mini"]
    argv += ["--summary-output-tokens", "300", "--min-saved-tokens", "10", "--low-water", "0.5"]
    args = cli._parser().parse_args(argv)
    loaded = cli.Loaded(three_turns(), "proto", {})
    request = cli._compaction_request(args, loaded)
    assert request.summarizer_selection.session_switch.provider == "small"
    assert request.summarizer_selection.session_switch.model == "mini"
    assert (request.summary_output_tokens, request.min_saved_tokens) == (300, 10)
    assert request.profiles.runtime.history_trim_low_water == 0.5
    unset = cli._compaction_request(cli._parser().parse_args(["compact", "h.json"]), loaded)
    assert not unset.HasField("summary_output_tokens")
    assert not unset.HasField("summarizer_selection") and unset.instruction == ""


def test_pins_and_the_summary_row_are_rendered() -> None:
    rows = [
        history_pb2.ChatMessage(role=history_pb2.ROLE_SYSTEM, content="sys"),
        history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="so far", summary=True),
        history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="task", pinned=True),
    ]
    history = history_pb2.History(chat=history_pb2.ChatHistory(messages=rows))
    response = svc.TrimHistoryResponse(
        outcome=svc.TrimOutcome(
            trimmed=True,
            pinned_turns=1,
            pinned_tokens=6,
            kept_in_dropped_range=[trim_pb2.IndexRange(start=2, end=4)],
        ),
        history_trimmed=trim_pb2.HistoryTrimmed(
            reason=trim_pb2.TRIM_REASON_TOKEN_BUDGET, pinned_turns=2, pinned_tokens=40
        ),
        history=history,
    )
    text = _render.trim(response)
    assert "\nkept 1 pinned turn (6 tokens)\n" in text
    assert "\npinned input rows kept from the dropped range: [2, 4)\n" in text
    assert ", kept 2 pinned turns (40 tokens)" in text
    assert 'user      [summary] "so far"' in text
    assert 'user      [pinned] "task"' in text
    unpinned = _render.trim(svc.TrimHistoryResponse(outcome=svc.TrimOutcome(trimmed=True)))
    assert "pinned" not in unpinned
    prepared = svc.PrepareModelCallResponse(trims=[response.history_trimmed], history=history)
    assert ", kept 2 pinned turns (40 tokens)" in _render.prepare(prepared)
    refusal = svc.PlanCompactionResponse(
        refusal=svc.CompactionRefusal(
            reason=svc.COMPACTION_REFUSAL_REASON_NO_SAVING, saved_tokens=3, min_saved_tokens=10
        )
    )
    assert _render.compaction(refusal) == (
        "no plan: no saving (it would save 3 tokens, the minimum is 10)"
    )


def test_prepare_emits_anthropic_with_the_cache_breakpoints_and_the_route_lifetime(
    endpoints: Endpoints, tmp_path: Path
) -> None:
    """Spec §14 through `prepare --emit anthropic`: the returned breakpoints become
    `cache_control` marks with the lifetime of the route's provider profile."""
    path = tmp_path / "history.json"
    path.write_text(json_format.MessageToJson(_tool_context_history(4)))
    profiles = tmp_path / "profiles.json"
    provider = {"alias": "p", "model": "m", "contextWindow": "100000"}
    profiles.write_text(
        json.dumps(
            {
                "runtime": {"defaultProvider": "p"},
                "providers": [{**provider, "cacheLifetime": "CACHE_LIFETIME_ONE_HOUR"}],
            }
        )
    )
    flags = ("prepare", str(path), "--profiles", str(profiles))
    prepared = json_format.Parse(
        run(endpoints, *flags, "--json").stdout, svc.PrepareModelCallResponse()
    )
    assert list(prepared.cache_breakpoints) == [0, 6, 19]
    result = run(endpoints, *flags, "--emit", "anthropic")
    assert result.returncode == 0, result.stderr
    request = json.loads(result.stdout)
    mark = {"type": "ephemeral", "ttl": "1h"}
    assert request["system"] == [{"type": "text", "text": "sys", "cache_control": mark}]
    assert request["messages"][5]["content"] == [
        {"type": "text", "text": "a2", "cache_control": mark}
    ]
    assert request["messages"][-1]["content"][-1]["cache_control"] == mark
    assert sum(json.dumps(m).count("cache_control") for m in request["messages"]) == 2
    plain = json.loads(run(endpoints, *flags, "--emit", "openai").stdout)
    assert "cache_control" not in json.dumps(plain)


def test_the_cache_lifetime_is_the_route_provider_profiles() -> None:
    one_hour = profile_pb2.CACHE_LIFETIME_ONE_HOUR
    profiles = profile_pb2.Profiles(
        providers=[
            profile_pb2.ProviderProfile(alias="p", model="other", cache_lifetime=one_hour),
            profile_pb2.ProviderProfile(alias="q", cache_lifetime=one_hour),
        ]
    )
    route = resolution_pb2.Route
    assert cli._cache_lifetime(route(provider="q", model="m"), profiles) == one_hour
    unspecified = profile_pb2.CACHE_LIFETIME_UNSPECIFIED
    assert cli._cache_lifetime(route(provider="p", model="m"), profiles) == unspecified
    assert cli._cache_lifetime(route(provider="q", model="m"), None) == unspecified
