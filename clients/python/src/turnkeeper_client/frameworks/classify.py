"""`classify(client, exception)`: is a provider SDK's exception a context-window overflow?

Reads the message, HTTP status and provider of an `openai`, `anthropic` or `litellm` exception
(duck-typed: none of the SDKs is needed) and asks the sidecar's ClassifyProviderError, whose phrases
(built in and the operator's) decide (spec §10.4).
"""

from __future__ import annotations

from turnkeeper.v1 import history_service_pb2 as svc

from ..aio import AsyncTurnkeeperClient
from ..sync import TurnkeeperClient

# The SDKs whose own module names the provider, when the exception does not.
_MODULE_PROVIDERS = {"openai": "openai", "anthropic": "anthropic"}


def provider_error(
    exception: BaseException, *, provider: str = ""
) -> svc.ClassifyProviderErrorRequest:
    """The ClassifyProviderError request for a provider SDK's exception: its text, its HTTP status
    when it has a valid one (`status_code`, as openai's, anthropic's and litellm's have), and the
    provider (`provider=`, else litellm's `llm_provider`, else the SDK's name)."""
    request = svc.ClassifyProviderErrorRequest(message=str(exception))
    status = getattr(exception, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599:
        request.http_status = status
    named = provider or getattr(exception, "llm_provider", None)
    if not isinstance(named, str) or not named:
        named = _MODULE_PROVIDERS.get(type(exception).__module__.partition(".")[0], "")
    request.provider = named
    return request


def classify(
    client: TurnkeeperClient, exception: BaseException, *, provider: str = ""
) -> svc.ClassifyProviderErrorResponse:
    """The sidecar's verdict on a provider SDK's exception (`overflow`, `matched_phrase`)."""
    return client.classify_provider_error(provider_error(exception, provider=provider))


async def aclassify(
    client: AsyncTurnkeeperClient, exception: BaseException, *, provider: str = ""
) -> svc.ClassifyProviderErrorResponse:
    """`classify` with the asyncio client."""
    return await client.classify_provider_error(provider_error(exception, provider=provider))


__all__ = ["aclassify", "classify", "provider_error"]
