"""Recognising a provider context-window overflow (spec §10.4), which starts recovery."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

BUILT_IN_PHRASES: tuple[str, ...] = (
    "exceeds the context window",
    "exceeds the available context size",
    "context window of this model",
    "maximum context length",
    "context length exceeded",
    "too many tokens",
    "token limit exceeded",
    "prompt is too long",
    "input is too long",
    "prompt exceeds max length",
)
"""The phrases of spec §10.4, in its order; tried before any operator phrase."""


class PhraseOrigin(Enum):
    BUILT_IN = "built-in"
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class OverflowMatch:
    phrase: str
    origin: PhraseOrigin


def _normalised(phrases: Iterable[str]) -> tuple[str, ...]:
    """Lower-cased, empty entries dropped (an empty phrase would match every message)."""
    return tuple(p.lower() for p in phrases if p)


@dataclass(frozen=True, slots=True)
class OverflowClassifier:
    """The built-in phrases plus the operator's, for every provider or for one provider alias."""

    operator_phrases: tuple[str, ...] = ()
    provider_phrases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(
        cls, phrases: Sequence[str], provider_phrases: Mapping[str, Sequence[str]]
    ) -> OverflowClassifier:
        return cls(
            _normalised(phrases),
            {alias: _normalised(p) for alias, p in provider_phrases.items()},
        )

    def classify(self, message: str, provider: str = "") -> OverflowMatch | None:
        text = message.lower()
        for phrase in BUILT_IN_PHRASES:
            if phrase in text:
                return OverflowMatch(phrase, PhraseOrigin.BUILT_IN)
        scoped = self.provider_phrases.get(provider, ()) if provider else ()
        for phrase in (*self.operator_phrases, *scoped):
            if phrase in text:
                return OverflowMatch(phrase, PhraseOrigin.OPERATOR)
        return None
