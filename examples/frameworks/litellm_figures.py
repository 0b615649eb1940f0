"""The LiteLLM loop's provider-reported prompt tokens, per call, with and without calibration.

    .venv/bin/python tests/support/with_server.py -- \
        .venv/bin/python examples/frameworks/litellm_figures.py

Runs the scripted six-turn session of litellm_completion.py twice against the server of
TURNKEEPER_ADDRESS, once with `calibrate=False` and once with calibration by `usage.prompt_tokens`,
and prints a row per model call: the user turn it serves, the tool-call step within that turn,
and what the scripted provider counted (its `usage.prompt_tokens`), then each run's summary
against the budget. Figures for docs/benchmarks.md; nothing here passes or fails.
"""

from __future__ import annotations

import os
from typing import Any

from litellm_completion import run
from session_script import BUDGET_TOKENS


def _turn(messages: list[dict[str, Any]]) -> tuple[int, int]:
    """The question number the request serves, and how many tool-call steps of it came before."""
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    number = int(str(messages[last_user]["content"]).split(":", 1)[0].removeprefix("Question "))
    steps = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
    return number, steps


def main() -> None:
    address = os.environ.get("TURNKEEPER_ADDRESS", "127.0.0.1:50051")
    runs = {
        "uncalibrated": run(address, "litellm-figures-off", calibrate=False),
        "calibrated": run(address, "litellm-figures-on", calibrate=True),
    }
    names = list(runs)
    # The scripted provider decides from the current turn alone, which is never cut: both runs
    # make the same calls in the same order, so their rows line up.
    assert len({len(r.requests) for r in runs.values()}) == 1
    print(f"\nbudget {BUDGET_TOKENS} tokens; provider-reported prompt tokens per call")
    print("| call | turn.step | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    first = runs[names[0]]
    requests: list[list[dict[str, Any]]] = list(first.requests)  # type: ignore[arg-type]
    for k, messages in enumerate(requests):
        turn, step = _turn(messages)
        counts = [f"{runs[name].reported_tokens[k]:,}" for name in names]
        print(f"| {k + 1} | {turn}.{step} | " + " | ".join(counts) + " |")
    for name in names:
        reported = runs[name].reported_tokens
        over = sum(1 for c in reported if c > BUDGET_TOKENS)
        print(f"{name}: {len(reported)} calls, max {max(reported):,}, {over} over the budget")


if __name__ == "__main__":
    main()
