"""LiteLLM: `TurnkeeperLiteLLM(client, profiles).completion(...)` in place of `litellm.completion`,
and `TurnkeeperProxyHook` for the LiteLLM proxy (`callbacks: [...]`). Needs the `litellm` extra
(`pip install 'turnkeeper-client[litellm]'`).

The caller keeps its full `messages`; each call sends the prepared history (PrepareModelCall with
the request's tools priced), calibrates the next call by the response's `usage.prompt_tokens`, and
on `ContextWindowExceededError` recovers (spec §10.1) and retries until the recovery reports a
blocker, when the provider's error is raised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2

try:
    import litellm
    from litellm.exceptions import ContextWindowExceededError
    from litellm.integrations.custom_logger import CustomLogger
    from litellm.types.utils import ModelResponse
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "turnkeeper_client.frameworks.litellm needs litellm: "
        "pip install 'turnkeeper-client[litellm]'"
    ) from error

from ..aio import AsyncTurnkeeperClient
from ..convert import from_openai, to_openai
from ..errors import ClientError
from ..sync import TurnkeeperClient
from ._calls import CallPreparer, recovery_blocked, recovery_request, schema_text


def _session_of(kwargs: dict[str, Any], default: str) -> str:
    """`session_id=` (taken out of the call), else `metadata["session_id"]`, else LiteLLM's
    `litellm_session_id`, else the adapter's default."""
    explicit = kwargs.pop("session_id", None)
    if isinstance(explicit, str):
        return explicit
    metadata = kwargs.get("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get("session_id"), str):
        return str(metadata["session_id"])
    named = kwargs.get("litellm_session_id")
    return named if isinstance(named, str) else default


def _tool_schemas(kwargs: Mapping[str, Any]) -> list[str]:
    tools = kwargs.get("tools") or ()
    if not isinstance(tools, Sequence):
        raise ClientError(f"tools: expected a list of tool schemas, got {type(tools).__name__}")
    return [schema_text(tool) for tool in tools]


def _prompt_tokens(response: object) -> int | None:
    usage = getattr(response, "usage", None)
    tokens = getattr(usage, "prompt_tokens", None)
    return tokens if isinstance(tokens, int) else None


class TurnkeeperLiteLLM:
    """`litellm.completion` / `litellm.acompletion` with turnkeeper preparing each request.

    `session_id` is the default session of the calls (each call may pass `session_id=` or
    `metadata={"session_id": ...}`); `calibrate=False` stops calibrating by reported usage.
    `completion` needs a `TurnkeeperClient`, `acompletion` an `AsyncTurnkeeperClient`.
    """

    def __init__(
        self,
        client: TurnkeeperClient | AsyncTurnkeeperClient,
        profiles: profile_pb2.Profiles,
        *,
        session_id: str = "",
        reserved_output_tokens: int = 0,
        calibrate: bool = True,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.preparer = CallPreparer(
            profiles, reserved_output_tokens=reserved_output_tokens, calibrate=calibrate
        )

    def _request(self, kwargs: dict[str, Any]) -> tuple[str, svc.PrepareModelCallRequest]:
        session = _session_of(kwargs, self.session_id)
        messages = kwargs.get("messages")
        if messages is None:
            raise ClientError("completion: messages= is required")
        request = self.preparer.request(
            from_openai(messages), session_id=session, tool_schemas=_tool_schemas(kwargs)
        )
        return session, request

    def completion(self, **kwargs: Any) -> ModelResponse:
        """`litellm.completion(**kwargs)` on the prepared history; returns LiteLLM's response."""
        if not isinstance(self.client, TurnkeeperClient):
            raise TypeError("completion needs a TurnkeeperClient; use acompletion with this client")
        session, request = self._request(kwargs)
        prepared = self.client.prepare_model_call(request)
        while True:
            self.preparer.prepared(session, prepared)
            try:
                response = litellm.completion(**{**kwargs, "messages": to_openai(prepared.history)})
            except ContextWindowExceededError:
                recovered = self.client.prepare_model_call(
                    recovery_request(request, prepared.history)
                )
                if recovery_blocked(recovered):
                    raise
                prepared = recovered
                continue
            self.preparer.reported(session, _prompt_tokens(response))
            return _model_response(response)

    async def acompletion(self, **kwargs: Any) -> ModelResponse:
        """`litellm.acompletion(**kwargs)` on the prepared history; returns LiteLLM's response."""
        if not isinstance(self.client, AsyncTurnkeeperClient):
            raise TypeError("acompletion needs an AsyncTurnkeeperClient; use completion")
        session, request = self._request(kwargs)
        prepared = await self.client.prepare_model_call(request)
        while True:
            self.preparer.prepared(session, prepared)
            try:
                response = await litellm.acompletion(
                    **{**kwargs, "messages": to_openai(prepared.history)}
                )
            except ContextWindowExceededError:
                recovered = await self.client.prepare_model_call(
                    recovery_request(request, prepared.history)
                )
                if recovery_blocked(recovered):
                    raise
                prepared = recovered
                continue
            self.preparer.reported(session, _prompt_tokens(response))
            return _model_response(response)


def _model_response(response: object) -> ModelResponse:
    if not isinstance(response, ModelResponse):
        raise TypeError(
            "the turnkeeper LiteLLM adapter serves non-streaming completions (stream=False)"
        )
    return response


class TurnkeeperProxyHook(CustomLogger):
    """A LiteLLM proxy callback: `async_pre_call_hook` replaces the request's `messages` with the
    prepared history, and each successful call's `usage.prompt_tokens` calibrates that session's
    next one. The session is the request's `metadata.session_id` or `litellm_session_id`."""

    def __init__(
        self,
        client: AsyncTurnkeeperClient,
        profiles: profile_pb2.Profiles,
        *,
        reserved_output_tokens: int = 0,
        calibrate: bool = True,
    ) -> None:
        super().__init__()
        self.client = client
        self.preparer = CallPreparer(
            profiles, reserved_output_tokens=reserved_output_tokens, calibrate=calibrate
        )

    async def async_pre_call_hook(
        self,
        user_api_key_dict: object,
        cache: object,
        data: dict[str, Any],
        call_type: object,
    ) -> dict[str, Any]:
        if data.get("messages") is None:
            return data  # not a chat call (embeddings, images): nothing to prepare
        session = _session_of(dict(data), "")
        request = self.preparer.request(
            from_openai(data["messages"]), session_id=session, tool_schemas=_tool_schemas(data)
        )
        prepared = await self.client.prepare_model_call(request)
        self.preparer.prepared(session, prepared)
        return {**data, "messages": to_openai(prepared.history)}

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: object, start_time: object, end_time: object
    ) -> None:
        params = kwargs.get("litellm_params") or {}
        merged = {**kwargs, "metadata": params.get("metadata") or kwargs.get("metadata")}
        self.preparer.reported(_session_of(merged, ""), _prompt_tokens(response_obj))


__all__ = ["TurnkeeperLiteLLM", "TurnkeeperProxyHook"]
