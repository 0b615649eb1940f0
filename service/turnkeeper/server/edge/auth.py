"""Bearer-token authentication: each token acts as one runtime_id; health needs no token.

The token file (TOML, `--auth-tokens`) lists every token, the runtime it may act as and which
TrimEvents it may read:

    [[tokens]]
    token = "a random string of at least 128 bits"  # openssl rand -hex 32
    runtime_id = "checkout-agent"   # "*" acts as any runtime (operators, tools)
    trim_events = false             # may subscribe to TrimEvents at all; default true
    read_all_runtimes = true        # may read every runtime's events; default false

A call without a known token is UNAUTHENTICATED. A token bound to a runtime acts and reads for
that runtime only: a request whose `CallerContext.runtime_id` names another runtime is
PERMISSION_DENIED, an empty one is filled with the token's runtime (so what it publishes is its
own), and its TrimEvents subscriptions are held to its runtime (`runtime_ids` empty means its
own; naming another is PERMISSION_DENIED) unless the file grants `read_all_runtimes`. A `"*"`
token that may subscribe must carry that grant explicitly. Every refusal carries ErrorInfo
(domain turnkeeper.v1).
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import grpc
from google.protobuf.message import DecodeError, Message
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from turnkeeper.server.contract import wire
from turnkeeper.server.contract.caller import CALLER_FIELDS, CALLER_REQUESTS, caller_of, shown_id
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.contract.methods import HEALTH_PREFIX, TRIM_EVENTS_METHOD
from turnkeeper.server.edge.handlers import Continuation, refusal
from turnkeeper.server.edge.token_strength import weakness
from turnkeeper.v1 import errors_pb2, history_service_pb2, trim_pb2

Req = TypeVar("Req")
Resp = TypeVar("Resp")

ANY_RUNTIME = "*"


class TokenGrant(BaseModel):
    """One token of the token file and what it may do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str
    runtime_id: str = Field(min_length=1)
    trim_events: bool = True
    # The fleet-wide reader: every runtime's events, never a default.
    read_all_runtimes: bool = False

    @model_validator(mode="after")
    def _explicit_fleet_reader(self) -> TokenGrant:
        if self.runtime_id == ANY_RUNTIME and self.trim_events and not self.read_all_runtimes:
            raise ValueError(
                'a runtime_id = "*" token that may subscribe to TrimEvents reads every '
                "runtime's events: say so with read_all_runtimes = true (or set "
                "trim_events = false)"
            )
        return self

    @property
    def events_runtime(self) -> str | None:
        """The one runtime whose events this token may read; None for every runtime."""
        return None if self.read_all_runtimes else self.runtime_id

    @field_validator("token")
    @classmethod
    def _strong(cls, token: str) -> str:
        # At least 128 bits, no typed placeholder (edge/token_strength.py).
        problem = weakness(token)
        if problem is not None:
            raise ValueError(f"the token {problem}")
        return token


class TokenFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[TokenGrant] = Field(min_length=1)

    @field_validator("tokens")
    @classmethod
    def _distinct(cls, tokens: list[TokenGrant]) -> list[TokenGrant]:
        if len({grant.token for grant in tokens}) != len(tokens):
            raise ValueError("the same token is listed twice")
        return tokens


class TokenFileError(Exception):
    """The token file cannot be read or is invalid; the message says where."""


def _digest(token: str) -> bytes:
    # Looked up by digest, so the comparison does not leak how much of a token matched.
    return hashlib.sha256(token.encode()).digest()


def load_tokens(path: str) -> dict[bytes, TokenGrant]:
    try:
        with open(path, "rb") as file:
            parsed = TokenFile.model_validate(tomllib.load(file))
    except OSError as error:
        raise TokenFileError(f"token file {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise TokenFileError(f"token file {path}: {error}") from None
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise TokenFileError(f"token file {path}: {where}: {problem['msg']}") from None
    return {_digest(grant.token): grant for grant in parsed.tokens}


def grant_for(grants: dict[bytes, TokenGrant], token: str) -> TokenGrant | None:
    """The grant of `token` in a loaded token file, or None for an unknown token."""
    return grants.get(_digest(token))


def grant_of_header(grants: dict[bytes, TokenGrant], authorization: str) -> TokenGrant | None:
    """The grant of an HTTP `Authorization: Bearer <token>` header, or None."""
    scheme, _, token = authorization.partition(" ")
    return grant_for(grants, token.strip()) if scheme.lower() == "bearer" else None


def _bearer(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _error(code: grpc.StatusCode, message: str) -> RequestError:
    reason = (
        errors_pb2.ERROR_REASON_UNAUTHENTICATED
        if code == grpc.StatusCode.UNAUTHENTICATED
        else errors_pb2.ERROR_REASON_PERMISSION_DENIED
    )
    return RequestError(code, reason, message)


def _checking_caller(
    handler: grpc.RpcMethodHandler[Req, Resp],
    number: int,
    request_type: type[Message],
    runtime_id: str,
) -> grpc.RpcMethodHandler[Req, Resp]:
    """The unary handler, refusing requests whose CallerContext names another runtime and
    filling an empty `runtime_id` with the token's."""
    if handler.unary_unary is None:
        return handler
    # The sidecar's handlers are coroutines (grpc.aio) taking raw request bytes.
    inner = cast(Callable[..., Awaitable[Resp]], handler.unary_unary)
    filled = wire.length_delimited(
        number, trim_pb2.CallerContext(runtime_id=runtime_id).SerializeToString()
    )

    async def checked(request: Any, context: grpc.aio.ServicerContext[Req, Resp]) -> Resp:
        try:
            claimed = caller_of(request, number).runtime_id
        except (ValueError, DecodeError):  # protobuf 7's DecodeError is no ValueError
            # The answer the same bytes get without a token (INVALID_ARGUMENT naming the field),
            # or, should protobuf read what the quick scan could not, the caller it reads.
            try:
                claimed = caller_of(wire.decode(request, request_type), number).runtime_id
            except RequestError as error:
                await context.abort_with_status(error.to_status())
                raise AssertionError("abort_with_status returned") from None  # pragma: no cover
        if claimed and claimed != runtime_id:
            message = (
                f"this token acts as runtime {runtime_id!r}, not {shown_id(claimed)!r} "
                "(CallerContext.runtime_id)"
            )
            await context.abort_with_status(
                _error(grpc.StatusCode.PERMISSION_DENIED, message).to_status()
            )
        if not claimed and isinstance(request, bytes):
            # A later occurrence of the caller field merges into the first (protobuf's rule,
            # which both engines follow): the request now names the token's runtime.
            request += filled
        return await inner(request, context)

    return grpc.unary_unary_rpc_method_handler(
        checked, handler.request_deserializer, handler.response_serializer
    )


_RUNTIME_IDS = history_service_pb2.TrimEventsRequest.DESCRIPTOR.fields_by_name["runtime_ids"]


def _scoped_subscription(
    handler: grpc.RpcMethodHandler[Req, Resp], runtime_id: str
) -> grpc.RpcMethodHandler[Req, Resp]:
    """The TrimEvents handler, held to one runtime's events: `runtime_ids` empty becomes
    [runtime_id]; naming any other runtime is PERMISSION_DENIED."""
    if handler.unary_stream is None:
        return handler
    inner = cast(Callable[..., AsyncIterator[Resp]], handler.unary_stream)
    own = wire.length_delimited(_RUNTIME_IDS.number, runtime_id.encode())

    async def scoped(request: Any, context: grpc.aio.ServicerContext[Req, Resp]) -> Any:
        try:
            asked = list(history_service_pb2.TrimEventsRequest.FromString(request).runtime_ids)
        except (ValueError, DecodeError, TypeError):
            asked = None  # undecodable: the handler itself answers MALFORMED_REQUEST
        others = sorted({r for r in asked or () if r != runtime_id})
        if others:
            await context.abort_with_status(
                _error(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"this token reads the events of runtime {runtime_id!r} only, not "
                    f"{', '.join(map(repr, others))} (runtime_ids); a fleet-wide reader needs "
                    "read_all_runtimes = true in the token file",
                ).to_status()
            )
        if asked == []:
            request += own
        async for item in inner(request, context):
            yield item

    return grpc.unary_stream_rpc_method_handler(
        scoped, handler.request_deserializer, handler.response_serializer
    )


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Admits calls by bearer token and holds each token to its runtime and its rights."""

    def __init__(self, grants: dict[bytes, TokenGrant]) -> None:
        self._grants = grants

    async def intercept_service(
        self,
        continuation: Continuation[Req, Resp],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(details)
        method = details.method
        # Health alone is exempt: probes carry no token. Reflection describes every method, so
        # a server that asks for tokens asks for one there too (admission exempts it: cheap).
        if handler is None or method.startswith(HEALTH_PREFIX):
            return handler
        token = _bearer(details.invocation_metadata)
        grant = self._grants.get(_digest(token)) if token is not None else None
        if grant is None:
            why = "no bearer token" if token is None else "an unknown bearer token"
            return refusal(
                handler,
                _error(
                    grpc.StatusCode.UNAUTHENTICATED,
                    f"the call carries {why}: send 'authorization: Bearer <token>' metadata",
                ),
            )
        if method == TRIM_EVENTS_METHOD and not grant.trim_events:
            return refusal(
                handler,
                _error(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"the token for runtime {grant.runtime_id!r} may not subscribe to TrimEvents",
                ),
            )
        if method == TRIM_EVENTS_METHOD and grant.events_runtime is not None:
            return _scoped_subscription(handler, grant.events_runtime)
        number = CALLER_FIELDS.get(method)
        if number is not None and grant.runtime_id != ANY_RUNTIME:
            return _checking_caller(handler, number, CALLER_REQUESTS[method], grant.runtime_id)
        return handler
