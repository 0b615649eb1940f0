"""Rich gRPC errors (google.rpc.Status with ErrorInfo and BadRequest details), and the bounded
collection of rule violations (`Violations`) that an INVALID_ARGUMENT lists."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, TypeAlias

import grpc
from google.protobuf import duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from turnkeeper.server.telemetry.call_ids import REQUEST_ID_KEY, current_request_id
from turnkeeper.v1 import errors_pb2

DOMAIN = "turnkeeper.v1"

# Error size is bounded whatever the request: at most this many field violations are listed (in
# request order; ErrorInfo counts the rest), and the whole status fits the 8 KiB of trailing
# metadata a default gRPC client accepts (a bigger trailer turns the answer into a bare
# RESOURCE_EXHAUSTED on the client). The message is sent twice: percent-encoded in grpc-message and
# inside the Status (grpc-status-details-bin).
MAX_FIELD_VIOLATIONS = 100
MAX_STATUS_BYTES = 6656
MAX_MESSAGE_BYTES = 600
MAX_TEXT_CHARS = 200


class FieldViolation(NamedTuple):
    """One problem with one request field, named by its path from the request root."""

    field: str
    description: str


Reason: TypeAlias = errors_pb2.ErrorReason.ValueType
Violation: TypeAlias = tuple[Reason, FieldViolation]
"""A rule's violation: the ErrorInfo reason it gives and the field it names."""


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
        violation_total: int = 0,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.violations = tuple(violations)
        # How many violations were found; `violations` may hold only the first ones.
        self.violation_total = max(violation_total, len(self.violations))
        self.details = tuple(details)
        self.metadata = dict(metadata or {})

    def to_status(self) -> grpc.Status:
        """The rich status, never over MAX_STATUS_BYTES: violations past the budget are counted
        in ErrorInfo (`field_violations_total`, `field_violations_omitted`), not listed."""
        message = _clip_encoded(self.message, MAX_MESSAGE_BYTES)
        status = status_pb2.Status(code=getattr(code_pb2, self.code.name), message=message)
        metadata = dict(self.metadata)
        listed: list[error_details_pb2.BadRequest.FieldViolation] = []
        if self.violations:
            total = max(self.violation_total, len(self.violations))
            # Room for the ErrorInfo counts and the other details, then violations in order.
            reserve = 160 + sum(d.ByteSize() + 60 for d in self.details)
            room = MAX_STATUS_BYTES - status.ByteSize() - reserve
            for v in self.violations[:MAX_FIELD_VIOLATIONS]:
                entry = error_details_pb2.BadRequest.FieldViolation(
                    field=_clip(v.field), description=_clip(v.description)
                )
                room -= entry.ByteSize() + 3
                if room < 0:
                    break
                listed.append(entry)
            if len(listed) < total:
                metadata["field_violations_total"] = str(total)
                metadata["field_violations_omitted"] = str(total - len(listed))
        packed: list[Message] = [
            error_details_pb2.ErrorInfo(
                reason=errors_pb2.ErrorReason.Name(self.reason), domain=DOMAIN, metadata=metadata
            )
        ]
        if listed:
            packed.append(error_details_pb2.BadRequest(field_violations=listed))
        packed.extend(self.details)
        for detail in packed:
            status.details.add().Pack(detail)
        converted: grpc.Status = rpc_status.to_status(status)
        request_id = current_request_id()
        if request_id is None:
            return converted
        # The abort's trailers replace the ones the access log set: repeat its request id.
        trailers = (*converted.trailing_metadata, (REQUEST_ID_KEY, request_id))
        return converted._replace(trailing_metadata=trailers)  # type: ignore[attr-defined,no-any-return]


def _clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip_encoded(text: str, limit: int) -> str:
    """At most `limit` UTF-8 bytes, cut at a character boundary."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: limit - 3].decode(errors="ignore") + "…"


def invalid_argument(
    reason: errors_pb2.ErrorReason.ValueType,
    violations: Sequence[FieldViolation],
    total: int | None = None,
) -> RequestError:
    """INVALID_ARGUMENT listing the violations (the first ones of `total`, when given); the
    message summarises them."""
    count = len(violations) if total is None else max(total, len(violations))
    summary = "; ".join(f"{_clip(v.field)}: {_clip(v.description)}" for v in violations[:5])
    if count > 5:
        summary += f"; and {count - 5} more"
    return RequestError(
        grpc.StatusCode.INVALID_ARGUMENT,
        reason,
        f"invalid request: {summary}",
        violations,
        violation_total=count,
    )


class Violations:
    """The first MAX_FIELD_VIOLATIONS violations in request order, and how many were found."""

    __slots__ = ("kept", "total")

    def __init__(self) -> None:
        self.kept: list[Violation] = []
        self.total = 0

    def append(self, violation: Violation) -> None:
        self.total += 1
        if len(self.kept) < MAX_FIELD_VIOLATIONS:
            self.kept.append(violation)

    def __iadd__(self, later: Violations) -> Violations:
        self.kept.extend(later.kept[: MAX_FIELD_VIOLATIONS - len(self.kept)])
        self.total += later.total
        return self

    @property
    def full(self) -> bool:
        """True once later violations are only counted."""
        return len(self.kept) >= MAX_FIELD_VIOLATIONS

    def __iter__(self) -> Iterator[Violation]:
        return iter(self.kept)


def violation(reason: Reason, field: str, description: str) -> Violation:
    """One violation of a rule, named by the field it is about."""
    return reason, FieldViolation(field=field, description=description)


def raise_if_any(violations: Violations) -> None:
    """INVALID_ARGUMENT with the reason of the first violation, when there is any."""
    if violations.total:
        raise invalid_argument(
            violations.kept[0][0], [v for _, v in violations.kept], violations.total
        )


def overloaded(limit: str, message: str, retry_after_seconds: float = 1.0) -> RequestError:
    """RESOURCE_EXHAUSTED, reason OVERLOADED, metadata `limit`, and a RetryInfo: try again later."""
    delay = duration_pb2.Duration()
    delay.FromNanoseconds(int(retry_after_seconds * 1e9))
    return RequestError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        errors_pb2.ERROR_REASON_OVERLOADED,
        f"server overloaded: {message}; retry later",
        details=[error_details_pb2.RetryInfo(retry_delay=delay)],
        metadata={"limit": limit},
    )
