"""The one table of HistoryService's unary RPCs, and the client core both clients share.

`HistoryServiceMethods` names each unary RPC once, with its request and response types and its
docstring. Each entry is an `Rpc` descriptor: on a `TurnkeeperClient` it is a blocking method, on
an `AsyncTurnkeeperClient` a coroutine method, both with the same keyword arguments and decoded
errors. `ClientCore` holds the rest the two clients share: the constructor, `connect`, the channel
and `watch_trims`. What differs is the transport call (`BlockingCalls._call`, `AsyncCalls._call`,
both retrying per the client's `RetryPolicy`, _retry.py) and the kind of watch each client opens
(sync.py, aio.py).
"""

from __future__ import annotations

import asyncio
import time
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar, overload

import grpc
import grpc.aio
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import history_service_pb2_grpc as svc_grpc
from turnkeeper.v1 import trim_pb2

from ._options import (
    DEFAULT,
    DEFAULT_TIMEOUT,
    ChannelOption,
    Metadata,
    MetadataTuple,
    Timeout,
    Transport,
    channel_options,
    resolve_timeout,
    target,
    transport_of,
    with_token,
)
from ._retry import DEFAULT_RETRY, Attempts, RetryPolicy
from ._watch import Backoff, CursorState, DisconnectHook, build_request
from .errors import decode_rpc_error

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Req_contra = TypeVar("Req_contra", contravariant=True)
Resp_co = TypeVar("Resp_co", covariant=True)
Channel = TypeVar("Channel", grpc.Channel, grpc.aio.Channel)
Watch = TypeVar("Watch")


class Unary(Protocol[Req_contra, Resp_co]):
    """A unary RPC as a `TurnkeeperClient` method."""

    def __call__(
        self, request: Req_contra, *, timeout: Timeout = DEFAULT, metadata: Metadata | None = None
    ) -> Resp_co: ...


class AsyncUnary(Protocol[Req_contra, Resp_co]):
    """A unary RPC as an `AsyncTurnkeeperClient` coroutine method."""

    def __call__(
        self, request: Req_contra, *, timeout: Timeout = DEFAULT, metadata: Metadata | None = None
    ) -> Coroutine[Any, Any, Resp_co]: ...


class ClientCore(ABC, Generic[Channel, Watch]):
    """The constructor, `connect`, the channel and `watch_trims`, for either kind of gRPC channel
    (and its kind of watch)."""

    # The channel constructors: grpc's blocking ones or grpc.aio's.
    _secure_channel: ClassVar[Callable[..., Any]]
    _insecure_channel: ClassVar[Callable[..., Any]]

    def __init__(
        self,
        channel: Channel,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        metadata: Metadata = (),
        wait_for_ready: bool = False,
        retry: RetryPolicy | None = DEFAULT_RETRY,
    ) -> None:
        self._channel: Channel = channel
        self._stub: svc_grpc.HistoryServiceStub = svc_grpc.HistoryServiceStub(channel)
        self._timeout = timeout
        self._metadata = tuple(metadata)
        self._wait_for_ready = wait_for_ready
        self._retry = retry
        # Known when connect() opened the channel (a channel passed in could be anything): it
        # picks the hint of a connection the server closed.
        self._transport: Transport | None = None

    @classmethod
    def connect(
        cls,
        address: str | None = None,
        *,
        unix_path: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        metadata: Metadata = (),
        wait_for_ready: bool = False,
        options: Sequence[ChannelOption] = (),
        credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
        retry: RetryPolicy | None = DEFAULT_RETRY,
    ) -> Self:
        """Opens a channel to a TCP `host:port` address or a Unix socket path (exactly one).

        `credentials` (e.g. `tls_credentials(ca=..., client_cert=..., client_key=...)`) makes it
        TLS or mTLS; `token` sends `authorization: Bearer <token>` with every call. `retry` is
        how unary calls refused with RESOURCE_EXHAUSTED or UNAVAILABLE are retried (None: never).
        """
        where = target(address, unix_path)
        opts = channel_options(options)
        channel = (
            cls._secure_channel(where, credentials, options=opts)
            if credentials is not None
            else cls._insecure_channel(where, options=opts)
        )
        client = cls(
            channel,
            timeout=timeout,
            metadata=with_token(metadata, token),
            wait_for_ready=wait_for_ready,
            retry=retry,
        )
        client._transport = transport_of(credentials)
        return client

    @property
    def channel(self) -> Channel:
        return self._channel

    def watch_trims(
        self,
        *,
        session_ids: Iterable[str] = (),
        runtime_ids: Iterable[str] = (),
        reasons: Iterable[trim_pb2.TrimReason.ValueType] = (),
        after_cursor: str = "",
        heartbeat_interval: float | None = None,
        include_meter_updates: bool = False,
        max_batch_events: int = 0,
        backoff: Backoff | None = None,
        on_disconnect: DisconnectHook | None = None,
        metadata: Metadata | None = None,
    ) -> Watch:
        """Subscribes to TrimEvents; the watch (an iterator, or an async iterator on the asyncio
        client) reconnects and resumes after disconnects.

        Yields every `TrimEventsResponse` item (event, heartbeat, gap, and with
        `include_meter_updates` a `meter_update` per successful PrepareModelCall, spec §10.5).
        `after_cursor` resumes an earlier subscription (see the watch's `cursor`); empty means a
        live tail from now. `max_batch_events` lets the server send up to that many items in one
        stream message, which costs it and this client less per event, so a subscriber keeps up
        with a loaded server; 0 (the default) asks for 100, 1 for one item a message. The watch
        unpacks them, so it yields the same single items either way.
        """
        request = build_request(
            session_ids=session_ids,
            runtime_ids=runtime_ids,
            reasons=reasons,
            heartbeat_interval=heartbeat_interval,
            include_meter_updates=include_meter_updates,
            max_batch_events=max_batch_events,
        )
        return self._watch(
            CursorState(request, after_cursor),
            backoff or Backoff(),
            on_disconnect,
            (*self._metadata, *(metadata or ())),
        )

    @abstractmethod
    def _watch(
        self,
        state: CursorState,
        backoff: Backoff,
        on_disconnect: DisconnectHook | None,
        metadata: MetadataTuple,
    ) -> Watch:
        """The client's kind of watch over its stub."""

    def _attempts(self, timeout: Timeout) -> Attempts:
        return Attempts(self._retry, resolve_timeout(timeout, self._timeout))

    def _call_options(self, metadata: Metadata | None) -> dict[str, Any]:
        return {
            "metadata": (*self._metadata, *(metadata or ())),
            "wait_for_ready": self._wait_for_ready,
        }


class BlockingCalls(ClientCore[grpc.Channel, Watch]):
    """Unary calls on a blocking channel."""

    _secure_channel = staticmethod(grpc.secure_channel)
    _insecure_channel = staticmethod(grpc.insecure_channel)

    def _call(
        self,
        method: grpc.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        timeout: Timeout,
        metadata: Metadata | None,
    ) -> Resp:
        attempts, options = self._attempts(timeout), self._call_options(metadata)
        while True:
            try:
                return method(request, timeout=attempts.timeout(), **options)
            except grpc.RpcError as rpc_error:
                error = decode_rpc_error(rpc_error, self._transport)
                delay = attempts.next_delay(error)
                if delay is None:
                    raise error from rpc_error
            time.sleep(delay)


class AsyncCalls(ClientCore[grpc.aio.Channel, Watch]):
    """Unary calls on a grpc.aio channel."""

    _secure_channel = staticmethod(grpc.aio.secure_channel)
    _insecure_channel = staticmethod(grpc.aio.insecure_channel)

    async def _call(
        self,
        method: grpc.aio.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        timeout: Timeout,
        metadata: Metadata | None,
    ) -> Resp:
        attempts, options = self._attempts(timeout), self._call_options(metadata)
        while True:
            try:
                return await method(request, timeout=attempts.timeout(), **options)
            except grpc.RpcError as rpc_error:
                error = decode_rpc_error(rpc_error, self._transport)
                delay = attempts.next_delay(error)
                if delay is None:
                    raise error from rpc_error
            await asyncio.sleep(delay)


class Rpc(Generic[Req, Resp]):
    """One unary RPC of HistoryService: a method of both clients, written once.

    It behaves like the function it stands for: looked up on a client it is a bound blocking
    method (`BlockingCalls`) or coroutine method (`AsyncCalls`); looked up on the class it is that
    function (so `help()` and documentation tools show the signature and docstring).
    """

    def __init__(self, rpc_name: str, doc: str) -> None:
        self.rpc_name = rpc_name
        self.__doc__ = doc

        def call(
            self: BlockingCalls[Any],
            request: Req,
            *,
            timeout: Timeout = DEFAULT,
            metadata: Metadata | None = None,
        ) -> Resp:
            method: grpc.UnaryUnaryMultiCallable[Req, Resp] = getattr(self._stub, rpc_name)
            return self._call(method, request, timeout, metadata)

        async def call_async(
            self: AsyncCalls[Any],
            request: Req,
            *,
            timeout: Timeout = DEFAULT,
            metadata: Metadata | None = None,
        ) -> Resp:
            method: grpc.aio.UnaryUnaryMultiCallable[Req, Resp] = getattr(self._stub, rpc_name)
            return await self._call(method, request, timeout, metadata)

        self._blocking: Callable[..., Any] = call
        self._async: Callable[..., Any] = call_async
        for function in (call, call_async):
            function.__doc__ = doc

    def __set_name__(self, owner: type[Any], name: str) -> None:
        # `Rpc[Request, Response](...)` has set __orig_class__ by now: the concrete types replace
        # Req and Resp in what help() and inspect show.
        types_given = typing.get_args(getattr(self, "__orig_class__", None))
        for function in (self._blocking, self._async):
            function.__name__ = name
            function.__qualname__ = f"{owner.__qualname__}.{name}"
            if types_given:
                request, response = types_given
                function.__annotations__ = {
                    **function.__annotations__,
                    "request": request,
                    "return": response,
                }

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Callable[..., Any]: ...
    @overload
    def __get__(self, client: BlockingCalls[Any], owner: type[Any]) -> Unary[Req, Resp]: ...
    @overload
    def __get__(self, client: AsyncCalls[Any], owner: type[Any]) -> AsyncUnary[Req, Resp]: ...
    def __get__(
        self, client: BlockingCalls[Any] | AsyncCalls[Any] | None, owner: type[Any]
    ) -> Callable[..., Any] | Unary[Req, Resp] | AsyncUnary[Req, Resp]:
        if client is None:
            return self._async if issubclass(owner, AsyncCalls) else self._blocking
        function = self._async if isinstance(client, AsyncCalls) else self._blocking
        bound: Unary[Req, Resp] | AsyncUnary[Req, Resp] = types.MethodType(function, client)
        return bound


class HistoryServiceMethods:
    """Every unary RPC of `turnkeeper.v1.HistoryService`; each raises `TurnkeeperError` with the
    decoded status details."""

    estimate_tokens = Rpc[svc.EstimateTokensRequest, svc.EstimateTokensResponse](
        "EstimateTokens",
        "Prices a history: the total, each row, the turn count and the image part.",
    )
    resolve_budget = Rpc[svc.ResolveBudgetRequest, svc.ResolveBudgetResponse](
        "ResolveBudget", "Resolves the route, its capacity, the token budget and the turn limit."
    )
    trim_history = Rpc[svc.TrimHistoryRequest, svc.TrimHistoryResponse](
        "TrimHistory",
        "Applies one trimming operation; `history_trimmed` is set when turns were dropped.",
    )
    prepare_model_call = Rpc[svc.PrepareModelCallRequest, svc.PrepareModelCallResponse](
        "PrepareModelCall",
        """Resolve, sweep, trim and pre-flight in one call; raises FAILED_PRECONDITION when it
        does not fit (the `TurnkeeperError.capacity_report` says by how much).""",
    )
    check_capacity = Rpc[svc.CheckCapacityRequest, svc.CheckCapacityResponse](
        "CheckCapacity",
        "The capacity pre-flight alone; raises FAILED_PRECONDITION when it does not fit.",
    )
    sweep_orphans = Rpc[svc.SweepOrphansRequest, svc.SweepOrphansResponse](
        "SweepOrphans", "Removes tool results without a call and tool calls without a result."
    )
    classify_provider_error = Rpc[
        svc.ClassifyProviderErrorRequest, svc.ClassifyProviderErrorResponse
    ](
        "ClassifyProviderError",
        """Says whether a provider error is a context-window overflow (spec §10.4) and which
        phrase matched: the decision that starts reactive recovery (`overflow_recovery`).""",
    )
    plan_compaction = Rpc[svc.PlanCompactionRequest, svc.PlanCompactionResponse](
        "PlanCompaction",
        """Says what to condense instead of dropping it and the summary request that fits the
        summarizer's route (spec §15.3): a plan, or a refusal saying why there is none (not an
        error). It never calls a model: send `plan.summary_request`, then apply the plan with
        the answer (`apply_compaction`).""",
    )
    cap_tool_results = Rpc[svc.CapToolResultsRequest, svc.CapToolResultsResponse](
        "CapToolResults", "Applies `max_tool_result_chars` to tool results as they are recorded."
    )


def unary_rpcs() -> dict[str, Rpc[Any, Any]]:
    """The table: attribute name -> RPC, for tests that hold it against the contract."""
    return {
        name: value for name, value in vars(HistoryServiceMethods).items() if isinstance(value, Rpc)
    }
