"""The second-edition wrappers (spec §10) against the live server."""

from __future__ import annotations

import grpc
import pytest
from turnkeeper.v1 import history_service_pb2 as svc

from turnkeeper_client import AsyncTurnkeeperClient, TurnkeeperClient, TurnkeeperError


def test_classify_provider_error_names_the_phrase(client: TurnkeeperClient) -> None:
    """spec §10.4: a listed phrase in any case is an overflow naming it; a near miss is not."""
    overflow = client.classify_provider_error(
        svc.ClassifyProviderErrorRequest(
            message="Error 400: Prompt is too long: 250000 tokens > 200000 maximum",
            http_status=400,
            provider="anthropic",
        )
    )
    assert overflow.overflow
    assert overflow.matched_phrase == "prompt is too long"
    assert overflow.phrase_source == svc.PHRASE_SOURCE_BUILT_IN

    near_miss = client.classify_provider_error(
        svc.ClassifyProviderErrorRequest(message="rate limit exceeded: too many requests")
    )
    assert not near_miss.overflow
    assert near_miss.matched_phrase == ""
    assert near_miss.phrase_source == svc.PHRASE_SOURCE_UNSPECIFIED


async def test_classify_provider_error_rejects_a_bad_status(
    unix_aclient: AsyncTurnkeeperClient,
) -> None:
    """spec §10.4 request shape: an HTTP status outside 100-599 is a field violation."""
    with pytest.raises(TurnkeeperError) as caught:
        await unix_aclient.classify_provider_error(
            svc.ClassifyProviderErrorRequest(message="x", http_status=700)
        )
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.reason == "ERROR_REASON_INVALID_PROVIDER_ERROR"
    assert caught.value.fields == {"http_status"}
