"""ClassifyProviderError with operator phrases from the server config (spec §10.4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from turnkeeper.core.overflow import BUILT_IN_PHRASES, OverflowClassifier, PhraseOrigin
from turnkeeper.server.config import parse_config
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc


def test_section10_4_built_in_phrases_are_the_specs_in_order() -> None:
    """§10.4: the ten listed phrases, lower-case, tried in the spec's order."""
    assert BUILT_IN_PHRASES == (
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
    match = OverflowClassifier().classify("PROMPT IS TOO LONG: too many tokens")
    # Both phrases occur; the earlier one in the spec's list is reported.
    assert match is not None and match.phrase == "too many tokens"


def test_section10_4_operator_phrases_from_flags_and_environment() -> None:
    """§10.4 "Operators may add phrases": repeatable flags, comma-separated environment, each
    lower-cased; provider-scoped phrases apply to that alias only."""
    config = parse_config(
        [
            "--overflow-phrase",
            "Context Budget Blown",
            "--overflow-phrase",
            "window full",
            "--provider-overflow-phrase",
            "acme=KABOOM",
        ],
        {},
    )
    assert config.overflow_phrase == ("context budget blown", "window full")
    assert config.provider_overflow_phrases == {"acme": ("kaboom",)}
    from_env = parse_config([], {"TURNKEEPER_OVERFLOW_PHRASE": "one phrase, two"})
    assert from_env.overflow_phrase == ("one phrase", "two")
    classifier = OverflowClassifier.of(config.overflow_phrase, config.provider_overflow_phrases)
    assert classifier.classify("kaboom", "other") is None
    match = classifier.classify("upstream said KABOOM", "acme")
    assert match is not None and match.origin is PhraseOrigin.OPERATOR


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--provider-overflow-phrase", "no-equals"], "ALIAS=PHRASE"),
        (["--provider-overflow-phrase", "=phrase"], "ALIAS=PHRASE"),
        (["--overflow-phrase", "a", "--overflow-phrase", " "], "must not be empty"),
    ],
)
def test_section10_4_bad_operator_phrases_are_refused(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_config(argv, {})
    assert problem in capsys.readouterr().err


def test_section10_4_live_server_uses_operator_phrases(
    server_factory: Callable[..., Any],
) -> None:
    """§10.4 through a live server: built-in first, then operator phrases, scoped by provider."""
    server = server_factory(
        "--overflow-phrase",
        "context budget blown",
        "--provider-overflow-phrase",
        "acme=kaboom",
        unix=False,
    )
    with grpc.insecure_channel(server.address) as channel:
        stub = history_service_pb2_grpc.HistoryServiceStub(channel)

        def classify(message: str, provider: str = "") -> svc.ClassifyProviderErrorResponse:
            request = svc.ClassifyProviderErrorRequest(
                message=message, provider=provider, http_status=400
            )
            response: svc.ClassifyProviderErrorResponse = stub.ClassifyProviderError(
                request, timeout=5
            )
            return response

        assert classify("Context Budget Blown at 9000") == svc.ClassifyProviderErrorResponse(
            overflow=True,
            matched_phrase="context budget blown",
            phrase_source=svc.PHRASE_SOURCE_OPERATOR,
        )
        assert classify("KABOOM", "acme").matched_phrase == "kaboom"
        assert not classify("KABOOM", "other").overflow
        assert classify("too many tokens").phrase_source == svc.PHRASE_SOURCE_BUILT_IN
