"""Rich gRPC errors (google.rpc.Status with ErrorInfo and BadRequest details)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from turnkeeper.v1 import errors_pb2

DOMAIN = "turnkeeper.v1"

S = TypeVar("S")
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Ctx = TypeVar("Ctx", bound="grpc.aio.ServicerContext[Any, Any]")


@dataclass(frozen=True)
class FieldViolation:
    """One problem with one request field, named by its path from the request root."""

    field: str
    description: str


class RequestError(Exception):
    """An error the client caused or must act on; becomes a rich gRPC status."""

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: errors_pb2.ErrorReason.ValueType,
        message: str,
        violations: Sequence[FieldViolation] = (),
        details: Sequence[Message] = (),
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.violations = tuple(violations)
        self.details = tuple(details)
        self.metadata = dict(metadata or {})

    def to_status(self) -> grpc.Status:
        info = error_details_pb2.ErrorInfo(
            reason=errors_pb2.ErrorReason.Name(self.reason), domain=DOMAIN, metadata=self.metadata
        )
        packed: list[Message] = [info]
        if self.violations:
            packed.append(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=v.field, description=v.description
                        )
                        for v in self.violations
                    ]
                )
            )
        packed.extend(self.details)
        anys = []
        for detail in packed:
            holder = any_pb2.Any()
            holder.Pack(detail)
            anys.append(holder)
        status = status_pb2.Status(
            code=getattr(code_pb2, self.code.name), message=self.message, details=anys
        )
        converted: grpc.Status = rpc_status.to_status(status)
        return converted


def invalid_argument(
    reason: errors_pb2.ErrorReason.ValueType, violations: Sequence[FieldViolation]
) -> RequestError:
    """INVALID_ARGUMENT listing every violation; the message summarises them."""
    summary = "; ".join(f"{v.field}: {v.description}" for v in violations[:5])
    if len(violations) > 5:
        summary += f"; and {len(violations) - 5} more"
    return RequestError(
        grpc.StatusCode.INVALID_ARGUMENT, reason, f"invalid request: {summary}", violations
    )


def unary_errors(
    handler: Callable[[S, Req, Ctx], Awaitable[Resp]],
) -> Callable[[S, Req, Ctx], Awaitable[Resp]]:
    """Turns a RequestError raised by a unary handler into its rich status."""

    @functools.wraps(handler)
    async def wrapper(self: S, request: Req, context: Ctx) -> Resp:
        try:
            return await handler(self, request, context)
        except RequestError as error:
            await context.abort_with_status(error.to_status())
            raise AssertionError("abort_with_status returned") from error  # pragma: no cover

    return wrapper


def stream_errors(
    handler: Callable[[S, Req, Ctx], AsyncIterator[Resp]],
) -> Callable[[S, Req, Ctx], AsyncIterator[Resp]]:
    """Turns a RequestError raised by a server-streaming handler into its rich status."""

    @functools.wraps(handler)
    async def wrapper(self: S, request: Req, context: Ctx) -> AsyncIterator[Resp]:
        try:
            async for item in handler(self, request, context):
                yield item
        except RequestError as error:
            await context.abort_with_status(error.to_status())

    return wrapper
