"""The adapters' paths the scripted six-turn loop never takes: LiteLLM's overflow recovery (the
provider refusing past its window), the LiteLLM proxy hook, `classify` on the provider SDKs' own
exception objects, the LangChain middleware's tool-result cap, and the Agents SDK filter's
calibration through the run's hooks. Against a live server and the real framework packages."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

# The model cost map ships with LiteLLM; without this it is fetched over the network first.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import anthropic
import httpx2
import litellm
import openai
import pytest
from agents import Agent, RunConfig, Runner, TResponseInputItem, Usage
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from litellm.exceptions import ContextWindowExceededError
from litellm.types.utils import ModelResponse
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import profile_pb2

from turnkeeper_client import AsyncTurnkeeperClient, TurnkeeperClient
from turnkeeper_client.frameworks.classify import aclassify, classify, provider_error
from turnkeeper_client.frameworks.langchain import TurnkeeperMiddleware
from turnkeeper_client.frameworks.litellm import TurnkeeperLiteLLM, TurnkeeperProxyHook
from turnkeeper_client.frameworks.openai_agents import TurnkeeperInputFilter

from .conftest import REPO
from .test_frameworks import check_chat

sys.path.insert(0, str(REPO / "examples" / "frameworks"))
script: Any = importlib.import_module("session_script")
litellm_example: Any = importlib.import_module("litellm_completion")
langchain_example: Any = importlib.import_module("langchain_agent")
BREADCRUMB = "[earlier turns omitted to fit the context window]"


def conversation(turns: int) -> list[dict[str, Any]]:
    """`turns` finished turns (a question, one lookup call and its result, an answer), then the
    next question, as Chat Completions messages."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": script.SYSTEM_PROMPT}]
    for n in range(1, turns + 1):
        cid = f"call_{n}"
        messages += [
            {"role": "user", "content": f"Question {n}: what do the records say about {n}?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"query": "q"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": cid, "content": script.lookup_result(f"q{n}")},
            {"role": "assistant", "content": script.answer(n)},
        ]
    # The scripted provider answers the current question from its number: the session's last.
    last = len(script.QUESTIONS)
    messages.append({"role": "user", "content": f"Question {last}: and now?"})
    return messages


def roomy_profiles() -> profile_pb2.Profiles:
    """A budget and a window far above the conversations here: only the provider refuses."""
    return profile_pb2.Profiles(
        runtime=profile_pb2.RuntimeProfile(
            max_context_tokens=100_000, default_provider="scripted", default_model=script.MODEL
        ),
        providers=[
            profile_pb2.ProviderProfile(
                alias="scripted", model=script.MODEL, context_window=200_000
            )
        ],
    )


def scripted_provider(window: int) -> Any:
    recorder = script.Recorder()
    litellm_example.install(litellm_example.ScriptedProvider(recorder, window=window))
    return recorder


def check_recovery(
    requests: list[list[dict[str, Any]]], window: int, tools: list[Any] | None = None
) -> list[int]:
    """Each retry is provider-valid and smaller than the request refused before it; the sizes
    are what the scripted provider counted."""
    sizes = [litellm_example.prompt_tokens(messages, tools) for messages in requests]
    assert len(requests) >= 2 and sizes[0] > window, sizes
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes), sizes
    for messages in requests:
        check_chat(messages)
        assert messages[-1]["content"].startswith(f"Question {len(script.QUESTIONS)}:")
    return sizes


def test_litellm_recovers_from_a_context_window_overflow(client: TurnkeeperClient) -> None:
    """The provider refuses past its window: the wrapper asks for overflow recovery and retries,
    until a request fits; the response is the one the fitting request got."""
    window = 400
    recorder = scripted_provider(window)
    messages = conversation(5)
    given = [dict(m) for m in messages]
    response = TurnkeeperLiteLLM(client, roomy_profiles()).completion(
        model=f"scripted/{script.MODEL}",
        messages=messages,
        tools=litellm_example.TOOLS,
        session_id="litellm-recovery",
    )
    sizes = check_recovery(recorder.requests, window, litellm_example.TOOLS)
    assert sizes[-1] <= window
    assert recorder.reported_tokens == [sizes[-1]]  # only the fitting request was answered
    assert response["usage"].prompt_tokens == sizes[-1]
    assert messages == given  # the caller's history stays whole


def test_litellm_raises_the_overflow_once_recovery_reports_a_blocker(
    client: TurnkeeperClient,
) -> None:
    """A window nothing fits in: recovery trims down to the current turn, reports a blocker, and
    the provider's own error is raised."""
    window = 10
    recorder = scripted_provider(window)
    with pytest.raises(ContextWindowExceededError):
        TurnkeeperLiteLLM(client, roomy_profiles()).completion(
            model=f"scripted/{script.MODEL}",
            messages=conversation(5),
            session_id="litellm-blocked",
        )
    check_recovery(recorder.requests, window)
    last = recorder.requests[-1]
    assert [m["role"] for m in last] == ["system", "user", "user"]  # the breadcrumb, the turn
    assert last[1]["content"] == BREADCRUMB
    assert not recorder.reported_tokens


async def test_litellm_acompletion_recovers_too(aclient: AsyncTurnkeeperClient) -> None:
    window = 400
    recorder = scripted_provider(window)
    response = await TurnkeeperLiteLLM(aclient, roomy_profiles()).acompletion(
        model=f"scripted/{script.MODEL}", messages=conversation(5), session_id="litellm-arecovery"
    )
    sizes = check_recovery(recorder.requests, window)
    assert sizes[-1] <= window and response["usage"].prompt_tokens == sizes[-1]


def estimate(client: TurnkeeperClient, messages: list[dict[str, Any]]) -> int:
    from turnkeeper_client import from_openai

    request = svc.EstimateTokensRequest(history=from_openai(messages))
    return int(client.estimate_tokens(request).total_tokens)


async def test_proxy_hook_prepares_chat_requests_and_calibrates_by_success_events(
    client: TurnkeeperClient, aclient: AsyncTurnkeeperClient
) -> None:
    """`async_pre_call_hook` hands the proxy the prepared history (the rest of the request
    untouched, the trim's event with the session); a success event's `usage.prompt_tokens` for
    that session calibrates its next request, and only that session's."""
    hook = TurnkeeperProxyHook(aclient, script.profiles())
    messages = conversation(16)
    assert estimate(client, messages) > script.BUDGET_TOKENS
    data = {
        "model": "gpt-4.1",
        "messages": messages,
        "tools": litellm_example.TOOLS,
        "temperature": 0.2,
        "metadata": {"session_id": "proxy-hook"},
    }
    with client.watch_trims(session_ids=["proxy-hook"]).wait_subscribed() as watch:
        first = await hook.async_pre_call_hook(None, None, data, "completion")
        event = next(item for item in watch if item.HasField("event"))
    assert event.event.trimmed.caller.session_id == "proxy-hook"
    assert {k: v for k, v in first.items() if k != "messages"} == {
        k: v for k, v in data.items() if k != "messages"
    }
    assert data["messages"] is messages and len(messages) == 4 * 16 + 2
    prepared = first["messages"]
    check_chat(prepared)
    assert prepared[0] == messages[0] and prepared[1]["content"] == BREADCRUMB
    assert prepared[2:] == messages[-len(prepared) + 2 :]
    assert estimate(client, prepared) <= script.BUDGET_TOKENS

    # The provider counted three times the budget: the next request of the session is cut to fit
    # what the provider counts, another session's report changes nothing.
    counted = ModelResponse(
        model=script.MODEL,
        usage={"prompt_tokens": 3 * script.BUDGET_TOKENS, "completion_tokens": 1},
    )
    other = {"litellm_params": {"metadata": {"session_id": "another-session"}}}
    await hook.async_log_success_event(other, counted, None, None)
    again = await hook.async_pre_call_hook(None, None, data, "completion")
    assert again["messages"] == prepared
    mine = {"litellm_params": {"metadata": {"session_id": "proxy-hook"}}}
    await hook.async_log_success_event(mine, counted, None, None)
    calibrated = await hook.async_pre_call_hook(None, None, data, "completion")
    check_chat(calibrated["messages"])
    assert len(calibrated["messages"]) < len(prepared)

    embedding = {"model": "text-embedding-3-small", "input": ["x"]}
    assert await hook.async_pre_call_hook(None, None, embedding, "embeddings") is embedding


REQUEST = httpx2.Request("POST", "https://api.example.test/v1/messages")


def status(code: int) -> httpx2.Response:
    return httpx2.Response(code, request=REQUEST)


OVERFLOWS: list[tuple[BaseException, int, str]] = [
    (
        openai.BadRequestError(
            "Error code: 400 - This model's maximum context length is 128000 tokens.",
            response=status(400),
            body=None,
        ),
        400,
        "openai",
    ),
    (
        anthropic.BadRequestError(
            "prompt is too long: 210000 tokens > 200000 maximum", response=status(400), body=None
        ),
        400,
        "anthropic",
    ),
    (
        ContextWindowExceededError(
            message="Input is too long for requested model.", model="m", llm_provider="bedrock"
        ),
        400,
        "bedrock",
    ),
]
NOT_OVERFLOWS: list[tuple[BaseException, int, str]] = [
    (openai.RateLimitError("Rate limit reached", response=status(429), body=None), 429, "openai"),
    (openai.APIConnectionError(request=REQUEST), 0, "openai"),
    (
        anthropic.InternalServerError("Overloaded", response=status(529), body=None),
        529,
        "anthropic",
    ),
    (
        litellm.exceptions.RateLimitError(message="slow down", llm_provider="vertex_ai", model="m"),
        429,
        "vertex_ai",
    ),
]


@pytest.mark.parametrize(("exception", "http_status", "provider"), OVERFLOWS + NOT_OVERFLOWS)
def test_provider_error_reads_the_sdks_exceptions(
    exception: BaseException, http_status: int, provider: str
) -> None:
    request = provider_error(exception)
    expected = svc.ClassifyProviderErrorRequest(message=str(exception), provider=provider)
    if http_status:  # an exception without a status leaves the field unset
        expected.http_status = http_status
    assert request == expected
    assert provider_error(exception, provider="mine").provider == "mine"


@pytest.mark.parametrize(
    ("exception", "overflow"),
    [(e, True) for e, _, _ in OVERFLOWS] + [(e, False) for e, _, _ in NOT_OVERFLOWS],
)
async def test_classify_decides_on_the_sdks_exceptions(
    client: TurnkeeperClient,
    aclient: AsyncTurnkeeperClient,
    exception: BaseException,
    overflow: bool,
) -> None:
    verdict = classify(client, exception)
    assert verdict.overflow is overflow
    assert bool(verdict.matched_phrase) is overflow
    assert await aclassify(aclient, exception) == verdict


def capped_profiles(max_chars: int) -> profile_pb2.Profiles:
    profiles = profile_pb2.Profiles()
    profiles.CopyFrom(script.profiles())
    profiles.runtime.max_tool_result_chars = max_chars
    return profiles


def _tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def _cap_agent(client: TurnkeeperClient | AsyncTurnkeeperClient, cap: bool) -> tuple[Any, Any]:
    recorder = script.Recorder()
    agent = create_agent(
        langchain_example.ScriptedChatModel(messages=iter(()), recorder=recorder),
        tools=[langchain_example.lookup],
        system_prompt=script.SYSTEM_PROMPT,
        middleware=[TurnkeeperMiddleware(client, capped_profiles(80), cap_tool_results=cap)],
        checkpointer=InMemorySaver(),
    )
    return agent, recorder


def _check_capped(client: TurnkeeperClient, state: dict[str, Any], recorder: Any) -> None:
    raw = script.lookup_result("subject 1 part 0.0")
    expected = client.cap_tool_results(
        svc.CapToolResultsRequest(contents=[raw], profiles=capped_profiles(80))
    ).results[0]
    assert expected.truncated_chars > 0
    (result,) = _tool_messages(state)
    assert result.content == expected.content  # the state holds the capped result
    assert result.tool_call_id == "call_t1_s0_0"
    seen = [m for m in recorder.requests[-1] if isinstance(m, ToolMessage)]
    assert [m.content for m in seen] == [expected.content]  # and so does the model's request


def test_langchain_middleware_caps_tool_results(client: TurnkeeperClient) -> None:
    agent, recorder = _cap_agent(client, cap=True)
    config = {"configurable": {"thread_id": "langchain-cap"}}
    state = agent.invoke({"messages": [HumanMessage(script.QUESTIONS[0])]}, config)
    _check_capped(client, state, recorder)

    whole, _ = _cap_agent(client, cap=False)
    state = whole.invoke({"messages": [HumanMessage(script.QUESTIONS[0])]}, config)
    assert [m.content for m in _tool_messages(state)] == [
        script.lookup_result("subject 1 part 0.0")
    ]


async def test_langchain_middleware_caps_tool_results_async(
    client: TurnkeeperClient, aclient: AsyncTurnkeeperClient
) -> None:
    for tk in (aclient, client):  # the asyncio client, and the sync one from a worker thread
        agent, recorder = _cap_agent(tk, cap=True)
        config = {"configurable": {"thread_id": "langchain-acap"}}
        state = await agent.ainvoke({"messages": [HumanMessage(script.QUESTIONS[0])]}, config)
        _check_capped(client, state, recorder)


async def _agents_two_turns(
    aclient: AsyncTurnkeeperClient, *, hooks: bool, calibrate: bool = True
) -> list[list[dict[str, Any]]]:
    """Two turns of an agent whose model counts ten times the budget for every request; the
    requests the model received."""
    requests: list[list[dict[str, Any]]] = []

    def respond(call: ModelCall) -> ModelStep:
        requests.append(list(call.input))
        usage = Usage(requests=1, input_tokens=10 * script.BUDGET_TOKENS)
        return ModelStep(output=[assistant_message("Noted.")], usage=usage)

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(2)])
    agent = Agent(name="a", instructions=script.SYSTEM_PROMPT, model=model)
    tk = TurnkeeperInputFilter(
        aclient, script.profiles(), session_id="agents-calibration", calibrate=calibrate
    )
    config = RunConfig(call_model_input_filter=tk, tracing_disabled=True)
    items: list[TResponseInputItem] = [
        {"role": "user", "content": "Question 1: " + "the long first question " * 12}
    ]
    run_hooks = tk if hooks else None
    result = await Runner.run(agent, items, run_config=config, hooks=run_hooks)
    items = [*result.to_input_list(), {"role": "user", "content": "Question 2: and the second?"}]
    await Runner.run(agent, items, run_config=config, hooks=run_hooks)
    return requests


def _user_texts(items: list[dict[str, Any]]) -> list[str]:
    return [str(i["content"]) for i in items if i.get("role") == "user"]


async def test_agents_filter_as_run_hooks_calibrates_by_the_models_usage(
    aclient: AsyncTurnkeeperClient,
) -> None:
    """Passed as the run's hooks too, the filter reads each response's `usage.input_tokens` in
    `on_llm_end`: the model counted the first request at ten times the budget, so the second is
    cut to what the model counts. The history itself is far under the budget by the estimate:
    without the hooks, or with `calibrate=False`, nothing is cut."""
    calibrated = await _agents_two_turns(aclient, hooks=True)
    assert _user_texts(calibrated[1]) == [BREADCRUMB, "Question 2: and the second?"]
    for requests in (
        await _agents_two_turns(aclient, hooks=False),
        await _agents_two_turns(aclient, hooks=True, calibrate=False),
    ):
        assert _user_texts(requests[1])[0].startswith("Question 1:")
        assert len(_user_texts(requests[1])) == 2
