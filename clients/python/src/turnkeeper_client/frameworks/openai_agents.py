"""The OpenAI Agents SDK: `RunConfig(call_model_input_filter=TurnkeeperInputFilter(client,
profiles, session_id=...))`. Needs the `agents` extra (`pip install 'turnkeeper-client[agents]'`).

The SDK keeps the full input (and its session, if any); before each model call the filter sends
PrepareModelCall the items as a history, the agent's instructions as a hook text and its tools'
schemas, and gives the SDK the prepared items: the SDK's own item objects for every item kept, a
plain message item for a breadcrumb.

Calibration needs one more argument: the filter is also the run's `RunHooks`
(`Runner.run(..., run_config=..., hooks=the_filter)`), whose `on_llm_end` reads each response's
`usage.input_tokens`. The filter alone cannot: the SDK hands it `CallModelData` (the input, the
instructions, the agent and the user's context object), never a model response or the run's
usage, and a `RunConfig` carries no hooks.
"""

from __future__ import annotations

from typing import Any

from turnkeeper.v1 import profile_pb2

try:
    from agents import Agent, ModelResponse, RunContextWrapper, RunHooks
    from agents.models.openai_responses import Converter
    from agents.run_config import CallModelData, ModelInputData
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "turnkeeper_client.frameworks.openai_agents needs openai-agents: "
        "pip install 'turnkeeper-client[agents]'"
    ) from error

from ..aio import AsyncTurnkeeperClient
from ..convert import from_openai_responses, to_openai_responses
from ..convert._common import plain_json
from ._calls import CallPreparer, keep_originals, schema_text


def _input_tokens(response: ModelResponse) -> int | None:
    """The input tokens of the request that produced `response`: its last request's, when the
    SDK retried and kept one usage entry per request (the total would count every attempt)."""
    usage = response.usage
    if usage.request_usage_entries:
        return usage.request_usage_entries[-1].input_tokens
    return usage.input_tokens if usage.requests <= 1 else None


class TurnkeeperInputFilter(RunHooks[Any]):
    """An async `call_model_input_filter` preparing each model call of a run with turnkeeper,
    and the run hooks whose `on_llm_end` calibrates the next call by the response's usage.

    `session_id` names the session in the trims' events (the SDK session's id, or the
    conversation's); the instructions are priced as a hook text and stay out of the history, so
    no trim ever drops them. Pass the filter as `hooks=` of `Runner.run` too for calibration;
    a run with hooks of its own calls `filter.reported(...)` from its `on_llm_end` instead.
    """

    def __init__(
        self,
        client: AsyncTurnkeeperClient,
        profiles: profile_pb2.Profiles,
        *,
        session_id: str = "",
        reserved_output_tokens: int = 0,
        calibrate: bool = True,
    ) -> None:
        if not isinstance(client, AsyncTurnkeeperClient):
            raise TypeError(
                "TurnkeeperInputFilter runs in the SDK's event loop: pass an AsyncTurnkeeperClient"
            )
        self.client = client
        self.session_id = session_id
        self.preparer = CallPreparer(
            profiles, reserved_output_tokens=reserved_output_tokens, calibrate=calibrate
        )

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        items = data.model_data.input
        instructions = data.model_data.instructions
        tools = await data.agent.get_all_tools(RunContextWrapper(context=data.context))
        schemas = [schema_text(tool) for tool in Converter.convert_tools(tools, []).tools]
        request = self.preparer.request(
            from_openai_responses(items),
            session_id=self.session_id,
            hook_texts=[instructions] if instructions else [],
            tool_schemas=schemas,
        )
        prepared = await self.client.prepare_model_call(request)
        self.preparer.prepared(self.session_id, prepared)
        kept = keep_originals(
            to_openai_responses(prepared.history), items, lambda new, old: new == plain_json(old)
        )
        return ModelInputData(input=kept, instructions=instructions)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        """The SDK's hook after each model call: its usage calibrates the next call."""
        self.reported(_input_tokens(response))

    def reported(self, input_tokens: int | None) -> None:
        """Calibrates the next call by the provider's input-token count of the last one (for
        example `response.usage.input_tokens` in an `on_llm_end` of your own)."""
        self.preparer.reported(self.session_id, input_tokens)


__all__ = ["TurnkeeperInputFilter"]
