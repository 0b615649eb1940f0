"""Planning a compaction (spec §15.3): the defaults a plan is made with."""

from __future__ import annotations

DEFAULT_SUMMARY_INSTRUCTION = (
    "Summarize the conversation above so that it can continue from your summary alone: the "
    "user's goals and constraints, decisions made, facts learned from tools (with their "
    "identifiers, paths and numbers), what is done and what remains. Reply with the summary only."
)
"""The instruction a summary request ends with when neither the request nor the runtime profile
gives one (§15.3)."""

DEFAULT_SUMMARY_OUTPUT_TOKENS = 2_000
"""The output tokens reserved for the summary when the request leaves them unset (§15.3)."""
