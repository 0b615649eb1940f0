"""The LangChain adapter (the `langchain` extra): BaseMessage lists <-> rows and the sidecar-backed
trim_messages, against a live server."""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import FakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable, RunnableLambda
from turnkeeper.v1 import history_pb2, history_service_pb2, profile_pb2, trim_pb2

from turnkeeper_client import AsyncTurnkeeperClient, ConversionError, TurnkeeperClient
from turnkeeper_client.convert import DEFAULT_BREADCRUMB, Shape, TurnMarks, chat_rows, turn_marks
from turnkeeper_client.convert.langchain import (
    atrim_messages,
    from_langchain,
    to_langchain,
    trim_messages,
)

PNG = "data:image/png;base64,iVBORw0KGgo="

CONVERSATION: list[BaseMessage] = [
    SystemMessage("You are terse.", id="sys-1"),
    HumanMessage(
        content=[
            {"type": "text", "text": "What is in "},
            {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "high"}},
            {
                "type": "image",
                "source_type": "base64",
                "data": "iVBORw0KGgo=",
                "mime_type": "image/png",
            },
        ],
        id="h-1",
        name="ann",
    ),
    AIMessage(
        content=[
            {"type": "thinking", "thinking": "Look closer.", "signature": "c2ln"},
            {"type": "text", "text": "Zooming."},
        ],
        tool_calls=[{"id": "call_1", "name": "zoom", "args": {"factor": 2, "area": "top"}}],
        id="run-1",
        response_metadata={"model_name": "m", "stop_reason": "tool_use"},
        usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    ),
    ToolMessage(
        content=[
            {"type": "text", "text": "zoomed"},
            {"type": "image_url", "image_url": {"url": PNG}},
        ],
        tool_call_id="call_1",
        status="error",
        artifact={"raw": [1, 2]},
        name="zoom",
    ),
    AIMessage("A cat.", id="run-2"),
]


def no_pressure(client: TurnkeeperClient, history: history_pb2.History) -> history_pb2.History:
    response = client.trim_history(
        history_service_pb2.TrimHistoryRequest(
            history=history,
            mode=trim_pb2.TRIM_MODE_TOKEN_BUDGET,
            caller_path=trim_pb2.CALLER_PATH_AGENT,
            explicit_limits=history_service_pb2.ExplicitLimits(budget_tokens=1_000_000_000),
        )
    )
    assert not response.outcome.trimmed
    return response.history


@pytest.mark.parametrize("shape", ["chat", "conversation"])
def test_round_trip_keeps_ids_metadata_tool_calls_and_images(
    client: TurnkeeperClient, shape: Any
) -> None:
    history = from_langchain(CONVERSATION, shape=shape)
    assert to_langchain(no_pressure(client, history)) == CONVERSATION


def test_rows_price_what_the_model_reads(client: TurnkeeperClient) -> None:
    """Text, thinking, the tool call and images are priced; ids and metadata are passthrough."""
    rows = from_langchain(CONVERSATION).chat.messages
    assert rows[1].content == "What is in [IMAGE:https://x.test/a.png][IMAGE:" + PNG + "]"
    assert rows[2].content == "Look closer.Zooming."
    assert rows[2].tool_calls[0] == history_pb2.ToolCall(
        id="call_1", name="zoom", arguments='{"area":"top","factor":2}'
    )
    assert len(rows[3].attachments) == 1 and rows[3].content == "zoomed"
    plain = from_langchain([m.model_copy(update={"id": None}) for m in CONVERSATION])
    estimate = client.estimate_tokens(history_service_pb2.EstimateTokensRequest(history=plain))
    carried = client.estimate_tokens(
        history_service_pb2.EstimateTokensRequest(history=from_langchain(CONVERSATION))
    )
    assert carried.total_tokens == estimate.total_tokens


def test_plain_rows_become_plain_messages() -> None:
    history = history_pb2.History(
        chat=history_pb2.ChatHistory(
            messages=[
                history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="hi"),
                history_pb2.ChatMessage(
                    role=history_pb2.ROLE_ASSISTANT,
                    tool_calls=[history_pb2.ToolCall(id="c", name="f", arguments='{"a":1}')],
                ),
                history_pb2.ChatMessage(role=history_pb2.ROLE_TOOL, tool_call_id="c", content="r"),
            ]
        )
    )
    assert to_langchain(history) == [
        HumanMessage("hi"),
        AIMessage("", tool_calls=[{"id": "c", "name": "f", "args": {"a": 1}}]),
        ToolMessage("r", tool_call_id="c"),
    ]


def test_unsupported_blocks_are_refused() -> None:
    with pytest.raises(ConversionError, match=r"messages\[0\]\.content\[0\]"):
        from_langchain([HumanMessage(content=[{"type": "audio", "data": "AAAA"}])])


def turns(n: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("sys", id="s")]
    for i in range(n):
        out += [
            HumanMessage(f"question {i} " + "x" * 40, id=f"h{i}"),
            AIMessage(f"answer {i}", id=f"a{i}"),
        ]
    return out


def test_trim_messages_keeps_newest_whole_turns_and_says_so(client: TurnkeeperClient) -> None:
    messages = turns(4)
    kept = trim_messages(messages, max_tokens=60, client=client)
    assert kept[0] == messages[0]
    assert kept[1] == HumanMessage(DEFAULT_BREADCRUMB)
    assert kept[2:] == messages[-2:]
    assert trim_messages(messages, max_tokens=10_000, client=client) == messages


def test_trim_messages_takes_langchains_keywords(client: TurnkeeperClient) -> None:
    """LangChain code swapped to this trim_messages runs: every keyword of
    langchain_core.messages.trim_messages is accepted, and those a whole-turn trim honours give
    the same trim as without them."""
    from langchain_core.messages import trim_messages as langchain_trim

    ours = inspect.signature(trim_messages).parameters
    theirs = inspect.signature(langchain_trim).parameters
    assert set(theirs) <= set(ours)
    for name in theirs.keys() & ours.keys():
        assert ours[name].kind == theirs[name].kind, name
    messages = turns(4)
    expected = trim_messages(messages, max_tokens=60, client=client)
    for counter in ("approximate", lambda ms: sum(len(str(m.content)) for m in ms)):
        kept = trim_messages(
            messages,
            max_tokens=60,
            client=client,
            strategy="last",
            token_counter=counter,
            include_system=True,
            start_on="human",
            allow_partial=False,
            end_on=None,
            text_splitter=None,
        )
        assert kept == expected
    assert (
        trim_messages(messages, max_tokens=60, client=client, start_on=[HumanMessage]) == expected
    )
    # Message-like representations convert as in LangChain.
    as_tuples = [(m.type, m.content) for m in messages]
    assert [m.content for m in trim_messages(as_tuples, max_tokens=60, client=client)] == [
        m.content for m in expected
    ]


@pytest.mark.parametrize(
    ("keywords", "match"),
    [
        ({"strategy": "first"}, "strategy='first'"),
        ({"allow_partial": True}, "allow_partial"),
        ({"include_system": False}, "include_system=False"),
        ({"end_on": "human"}, "end_on"),
        ({"start_on": "ai"}, "start_on='ai'"),
        ({"token_counter": len}, "token_counter=len"),
    ],
)
def test_trim_messages_refuses_what_a_whole_turn_trim_cannot_do(
    client: TurnkeeperClient, keywords: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(match)):
        trim_messages(turns(2), max_tokens=60, client=client, **keywords)


async def test_atrim_messages_with_a_custom_breadcrumb(aclient: AsyncTurnkeeperClient) -> None:
    kept = await atrim_messages(turns(3), max_tokens=60, client=aclient, breadcrumb_text="[cut]")
    assert kept[1] == HumanMessage("[cut]")
    # Fed back, the breadcrumb is recognised as one and not counted as a turn.
    again = await atrim_messages(kept, max_tokens=60, client=aclient, breadcrumb_text="[cut]")
    assert again == kept


def test_trim_messages_without_messages_is_a_runnable_for_a_chain(
    client: TurnkeeperClient,
) -> None:
    """As LangChain's trim_messages: called without messages it is a Runnable, whose invoke is
    the direct call, and which composes in a chain (a prompt's PromptValue included)."""
    messages = turns(4)
    trimmer = trim_messages(max_tokens=60, token_counter="approximate", client=client)
    assert isinstance(trimmer, Runnable)
    expected = trim_messages(messages, max_tokens=60, client=client)
    assert trimmer.invoke(messages) == expected
    assert trimmer.invoke([]) == []
    assert trimmer.batch([messages, messages[:3]]) == [expected, messages[:3]]
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history")])

    def ids(kept: list[BaseMessage]) -> list[str | None]:
        return [m.id for m in kept]

    chain = prompt | trimmer | RunnableLambda(ids)
    assert chain.invoke({"history": messages}) == ids(expected)


async def test_trim_messages_runnable_with_the_asyncio_client(
    client: TurnkeeperClient, aclient: AsyncTurnkeeperClient
) -> None:
    """With an AsyncTurnkeeperClient the Runnable serves ainvoke; its sync invoke says so. With a
    TurnkeeperClient ainvoke works too."""
    messages = turns(4)
    expected = trim_messages(messages, max_tokens=60, client=client)
    trimmer = trim_messages(max_tokens=60, client=aclient)
    assert await trimmer.ainvoke(messages) == expected
    with pytest.raises(TypeError, match="ainvoke"):
        trimmer.invoke(messages)
    assert await trim_messages(max_tokens=60, client=client).ainvoke(messages) == expected


class _CountingModel(FakeChatModel):
    """A chat model that counts tokens, as LangChain's counters do."""

    def get_num_tokens_from_messages(
        self, messages: list[BaseMessage], tools: Sequence[Any] | None = None
    ) -> int:
        return 10 * len(messages)


def test_trim_messages_takes_a_bound_model_as_token_counter(client: TurnkeeperClient) -> None:
    trimmer = trim_messages(
        max_tokens=60, token_counter=_CountingModel().bind(stop=["x"]), client=client
    )
    assert trimmer.invoke(turns(4)) == trim_messages(turns(4), max_tokens=60, client=client)


def test_trim_messages_refuses_an_invalid_token_counter(client: TurnkeeperClient) -> None:
    """What LangChain refuses, refused with its words: on the call, and on the Runnable's invoke
    (where LangChain refuses it too)."""
    not_a_counter = (
        "'token_counter' expected to be a model that implements 'get_num_tokens_from_messages()' "
        "or a function. Received object of type <class 'dict'>."
    )
    with pytest.raises(ValueError, match=re.escape(not_a_counter)):
        trim_messages(turns(2), max_tokens=60, token_counter={}, client=client)
    trimmer = trim_messages(max_tokens=60, token_counter={}, client=client)
    with pytest.raises(ValueError, match=re.escape(not_a_counter)):
        trimmer.invoke(turns(2))
    with pytest.raises(ValueError, match="Invalid token_counter shortcut 'invalid'"):
        trim_messages(turns(2), max_tokens=60, token_counter="invalid", client=client)


def test_trim_messages_budget_from_profiles_and_events_with_the_session(
    client: TurnkeeperClient,
) -> None:
    """`profiles=` resolves the budget as PrepareModelCall would; `session_id=` names the session
    in the trim's event."""
    profiles = profile_pb2.Profiles(runtime=profile_pb2.RuntimeProfile(max_context_tokens=100))
    resolved = client.resolve_budget(history_service_pb2.ResolveBudgetRequest(profiles=profiles))
    budget = resolved.resolution.budget_tokens
    messages = turns(6)
    expected = trim_messages(messages, max_tokens=budget, client=client)
    assert len(expected) < len(messages)
    with client.watch_trims(session_ids=["lc-trim"]).wait_subscribed() as watch:
        kept = trim_messages(messages, profiles=profiles, session_id="lc-trim", client=client)
        event = next(item for item in watch if item.HasField("event"))
    assert kept == expected
    assert event.event.trimmed.caller.session_id == "lc-trim"


def test_trim_messages_needs_one_budget(client: TurnkeeperClient) -> None:
    profiles = profile_pb2.Profiles()
    for keywords in ({}, {"max_tokens": 60, "profiles": profiles}):
        with pytest.raises(ValueError, match="one budget"):
            trim_messages(turns(2), client=client, **keywords)  # type: ignore[call-overload]


TEXT = st.text(alphabet=st.sampled_from("ab é🦀[]:/\n[IMAGE:https://x/y.png]"), max_size=12)
IDS = st.one_of(st.none(), st.text(alphabet="abc123", min_size=1, max_size=5))


@st.composite
def messages(draw: st.DrawFn) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["system", "human", "ai", "tool"]))
        content: Any = draw(st.one_of(TEXT, st.lists(TEXT, max_size=2)))
        if kind == "system":
            out.append(SystemMessage(content=content, id=draw(IDS)))
        elif kind == "human":
            out.append(HumanMessage(content=content, id=draw(IDS), name=draw(IDS)))
        elif kind == "tool":
            status = draw(st.sampled_from(["success", "error"]))
            out.append(ToolMessage(content=content, tool_call_id="t", status=status))
        else:
            calls: list[Any] = [
                {
                    "id": draw(IDS) or "c",
                    "name": "f",
                    "args": draw(st.dictionaries(TEXT, st.integers(), max_size=2)),
                }
                for _ in range(draw(st.integers(0, 2)))
            ]
            usage = {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}
            out.append(
                AIMessage(content=content, tool_calls=calls, id=draw(IDS), usage_metadata=usage)
            )
    return out


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages(), st.sampled_from(["chat", "conversation"]))
def test_round_trip_property(
    client: TurnkeeperClient, original: list[BaseMessage], shape: Any
) -> None:
    assert to_langchain(no_pressure(client, from_langchain(original, shape=shape))) == original


def test_a_tool_exchange_summary_is_a_plain_ai_message_and_comes_back_unmarked() -> None:
    """Spec §13.1: the summary row's mark has no LangChain form; importing the message back gives
    a plain assistant row, which the projection leaves as it is."""
    summary = "[Tool exchange: 1 tool call(s) \u2014 results collapsed]"
    history = history_pb2.History(
        chat=history_pb2.ChatHistory(
            messages=[
                history_pb2.ChatMessage(role=history_pb2.ROLE_USER, content="q"),
                history_pb2.ChatMessage(
                    role=history_pb2.ROLE_ASSISTANT, content=summary, tool_exchange_summary=True
                ),
            ]
        )
    )
    assert to_langchain(history) == [HumanMessage("q"), AIMessage(summary)]
    back = from_langchain(to_langchain(history))
    assert back.chat.messages[1] == history_pb2.ChatMessage(
        role=history_pb2.ROLE_ASSISTANT, content=summary
    )


@pytest.mark.parametrize("shape", ["chat", "conversation"])
def test_turn_marks_ride_beside_the_messages(shape: Shape) -> None:
    messages: list[BaseMessage] = [
        SystemMessage("sys"),
        HumanMessage("Summary: the report is half done."),
        HumanMessage("Write the report."),
        AIMessage("On it."),
        HumanMessage(DEFAULT_BREADCRUMB),
        HumanMessage("Add a chart."),
        AIMessage("Added."),
    ]
    marks = TurnMarks(summary=True, pinned_turns=(0,))
    history = from_langchain(messages, shape=shape, marks=marks)
    rows = chat_rows(history)
    assert [(r.summary, r.pinned, r.breadcrumb) for r in rows] == [
        (False, False, False),
        (True, False, False),
        (False, True, False),
        (False, False, False),
        (False, False, True),
        (False, False, False),
        (False, False, False),
    ]
    # The LangChain side stays plain messages: the marks come back from the history.
    assert to_langchain(history) == messages
    assert turn_marks(history) == marks
    assert from_langchain(messages, shape=shape) != history
