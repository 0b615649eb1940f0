"""LangChain / LangGraph: `create_agent(..., middleware=[TurnkeeperMiddleware(client, profiles)])`.
Needs the `langchain` extra (`pip install 'turnkeeper-client[langchain]'`).

The agent's state keeps the full message list; before each model call the middleware sends
PrepareModelCall the messages as a history, the system prompt as a hook text and the bound tools'
schemas, and the model sees the prepared messages (the state's own message objects, and a
breadcrumb `HumanMessage` where turns were dropped). Each tool result is capped by the profiles'
`max_tool_result_chars` (spec §10.6) before it enters the state. The session is the run's
`thread_id` (`config={"configurable": {"thread_id": ...}}`), else `session_id=`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.config import get_config
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "turnkeeper_client.frameworks.langchain needs langchain and langgraph: "
        "pip install 'turnkeeper-client[langchain]'"
    ) from error

from ..aio import AsyncTurnkeeperClient
from ..convert.langchain import from_langchain, to_langchain
from ..sync import TurnkeeperClient
from ._calls import CallPreparer, keep_originals, schema_text

ModelResult = ModelResponse[Any] | AIMessage
ToolResult = ToolMessage | Command[Any]


def _thread_id() -> str | None:
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a runnable: no config
        return None
    thread = configurable.get("thread_id")
    return None if thread is None else str(thread)


def _input_tokens(result: object) -> int | None:
    messages = result.result if isinstance(result, ModelResponse) else [result]
    for message in messages:
        if isinstance(message, AIMessage) and message.usage_metadata:
            return message.usage_metadata.get("input_tokens")
    return None


class TurnkeeperMiddleware(AgentMiddleware):
    """Prepares every model call of a `create_agent` agent with turnkeeper, and caps tool results.

    Works with `invoke` and `ainvoke`: with a `TurnkeeperClient` the async hooks run its calls in
    a worker thread; an `AsyncTurnkeeperClient` serves the async hooks only.
    `cap_tool_results=False` leaves tool results as the tools return them; `calibrate=False`
    stops calibrating by the model's reported `usage_metadata["input_tokens"]`.
    """

    def __init__(
        self,
        client: TurnkeeperClient | AsyncTurnkeeperClient,
        profiles: profile_pb2.Profiles,
        *,
        session_id: str = "",
        reserved_output_tokens: int = 0,
        calibrate: bool = True,
        cap_tool_results: bool = True,
    ) -> None:
        super().__init__()
        self.client = client
        self.profiles = profiles
        self.session_id = session_id
        self.cap_tool_results = cap_tool_results
        self.preparer = CallPreparer(
            profiles, reserved_output_tokens=reserved_output_tokens, calibrate=calibrate
        )

    def _session(self) -> str:
        return _thread_id() or self.session_id

    def _request(self, request: ModelRequest[Any], session: str) -> svc.PrepareModelCallRequest:
        system = request.system_message
        hooks = [system.text] if system is not None and system.text else []
        schemas = [
            schema_text(tool if isinstance(tool, dict) else convert_to_openai_tool(tool))
            for tool in request.tools
        ]
        return self.preparer.request(
            from_langchain(request.messages),
            session_id=session,
            hook_texts=hooks,
            tool_schemas=schemas,
        )

    def _prepared(
        self, request: ModelRequest[Any], session: str, response: svc.PrepareModelCallResponse
    ) -> ModelRequest[Any]:
        self.preparer.prepared(session, response)
        messages = keep_originals(
            to_langchain(response.history), request.messages, lambda new, old: new == old
        )
        return request.override(messages=cast("list[AnyMessage]", messages))

    def _sync_client(self) -> TurnkeeperClient:
        if not isinstance(self.client, TurnkeeperClient):
            raise TypeError(
                "TurnkeeperMiddleware has an AsyncTurnkeeperClient: run the agent with ainvoke/"
                "astream, or pass a TurnkeeperClient"
            )
        return self.client

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResult:
        client = self._sync_client()
        session = self._session()
        prepared = client.prepare_model_call(self._request(request, session))
        result = handler(self._prepared(request, session, prepared))
        self.preparer.reported(session, _input_tokens(result))
        return result

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResult:
        session = self._session()
        prepare_request = self._request(request, session)
        if isinstance(self.client, AsyncTurnkeeperClient):
            prepared = await self.client.prepare_model_call(prepare_request)
        else:
            prepared = await asyncio.to_thread(self.client.prepare_model_call, prepare_request)
        result = await handler(self._prepared(request, session, prepared))
        self.preparer.reported(session, _input_tokens(result))
        return result

    def _cap_request(self, result: ToolResult) -> svc.CapToolResultsRequest | None:
        if not self.cap_tool_results or not isinstance(result, ToolMessage):
            return None
        if not isinstance(result.content, str):
            return None  # content blocks (images, files): priced as they are, never cut
        return svc.CapToolResultsRequest(contents=[result.content], profiles=self.profiles)

    @staticmethod
    def _capped(result: ToolResult, response: svc.CapToolResultsResponse) -> ToolResult:
        capped = response.results[0]
        if not capped.truncated_chars or not isinstance(result, ToolMessage):
            return result
        return result.model_copy(update={"content": capped.content})

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        result = handler(request)
        cap = self._cap_request(result)
        if cap is None:
            return result
        return self._capped(result, self._sync_client().cap_tool_results(cap))

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        result = await handler(request)
        cap = self._cap_request(result)
        if cap is None:
            return result
        if isinstance(self.client, AsyncTurnkeeperClient):
            response = await self.client.cap_tool_results(cap)
        else:
            response = await asyncio.to_thread(self.client.cap_tool_results, cap)
        return self._capped(result, response)


__all__ = ["TurnkeeperMiddleware"]
