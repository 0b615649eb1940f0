"""The client's error family, and the decoding of turnkeeper's rich gRPC errors.

`ClientError` is the base of everything this package raises on purpose: `TurnkeeperError` (a
failed RPC, with its details decoded) and `ConversionError` (provider JSON or a history that a
converter cannot carry).

Every error status the server sends carries a `google.rpc.Status` in the `grpc-status-details-bin`
trailer: one `google.rpc.ErrorInfo` (domain `turnkeeper.v1`), a `google.rpc.BadRequest` for bad
input, and a `google.rpc.PreconditionFailure` plus a `turnkeeper.v1.CapacityReport` when a prepared
request does not fit the model's capacity. An overloaded server adds a `google.rpc.RetryInfo`: how
long to wait before calling again (the clients' retry policy honours it, `_retry.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc
from google.protobuf import message as _message
from google.rpc import error_details_pb2, status_pb2
from turnkeeper.v1 import errors_pb2, trim_pb2

from ._options import Transport

DOMAIN = "turnkeeper.v1"
_DETAILS_KEY = "grpc-status-details-bin"
_REQUEST_ID_KEY = "x-request-id"
# grpc's whole account of a connection the server closed before answering (a refused TLS
# handshake among other causes): the client cannot tell more, so the hint names what to check.
_CLOSED = "Socket closed"
_SERVER_LOG = "the sidecar's log names the cause (logger grpc.core, field cause)"
CLOSED_CONNECTION_HINTS: dict[Transport | None, str] = {
    "plaintext": "a TLS port (--tls-cert) closes a client without TLS like this: connect with "
    "credentials=tls_credentials(ca=...)",
    "tls": "an mTLS port (--tls-client-ca) closes a client without a certificate like this: "
    "pass tls_credentials(ca=..., client_cert=..., client_key=...)",
    "mtls": "an mTLS port closes a client whose certificate its --tls-client-ca did not sign "
    "like this",
    "secure": "an mTLS port (--tls-client-ca) closes a client without a certificate it trusts "
    "like this",
    None: "a TLS port closes a plaintext client like this, and an mTLS port a client without "
    "a certificate it trusts",
}


class ClientError(Exception):
    """Base of `TurnkeeperError` and `ConversionError`: `except ClientError` catches both."""


class ConversionError(ClientError, ValueError):
    """The input cannot be represented in the target format; the message says where and why."""


@dataclass(frozen=True)
class FieldViolation:
    """One problem with one request field; `field` is the path from the request root."""

    field: str
    description: str


@dataclass(frozen=True)
class PreconditionViolation:
    """One failed precondition (`google.rpc.PreconditionFailure.Violation`)."""

    type: str
    subject: str
    description: str


@dataclass(eq=False)
class TurnkeeperError(ClientError):
    """A failed turnkeeper RPC with its decoded details.

    `reason` is the full `turnkeeper.v1.ErrorReason` name (e.g. `ERROR_REASON_INVALID_HISTORY`),
    or empty when the status carried no ErrorInfo (transport errors such as UNAVAILABLE).
    """

    code: grpc.StatusCode
    message: str
    reason: str = ""
    domain: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    field_violations: tuple[FieldViolation, ...] = ()
    precondition_violations: tuple[PreconditionViolation, ...] = ()
    capacity_report: trim_pb2.CapacityReport | None = None
    # `google.rpc.RetryInfo.retry_delay` in seconds, when the server sent one.
    retry_delay: float | None = None
    # The server's id of the call (its `x-request-id` trailer): every log line of it carries it.
    request_id: str = ""
    # For a connection the server closed: what to check, from how this client connected.
    hint: str = ""

    def __post_init__(self) -> None:
        # The dataclass __init__ does not call Exception.__init__; set args for pickling/repr.
        Exception.__init__(self, self.code, self.message)

    def __str__(self) -> str:
        text = f"{self.code.name}"
        if self.reason:
            text += f" ({self.reason})"
        text += f": {self.message}"
        if self.hint:
            text += f" (likely: {self.hint})"
        if self.request_id:
            text += f" [request_id {self.request_id}]"
        return text

    @property
    def reason_value(self) -> errors_pb2.ErrorReason.ValueType:
        """The reason as the `ErrorReason` enum value (UNSPECIFIED when absent or unknown)."""
        try:
            return errors_pb2.ErrorReason.Value(self.reason)
        except ValueError:
            return errors_pb2.ERROR_REASON_UNSPECIFIED

    @property
    def fields(self) -> frozenset[str]:
        """The set of field paths named by the BadRequest violations."""
        return frozenset(v.field for v in self.field_violations)


def _metadata_items(error: grpc.RpcError) -> Sequence[tuple[str, str | bytes]]:
    # Both the sync error (also a grpc.Call) and grpc.aio.AioRpcError expose trailing_metadata().
    if isinstance(error, grpc.aio.AioRpcError):
        trailing = error.trailing_metadata()
        return list(trailing) if trailing is not None else []
    if isinstance(error, grpc.Call):
        return list(error.trailing_metadata() or ())
    return []


def _code_and_message(error: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    if isinstance(error, grpc.aio.AioRpcError):
        return error.code(), error.details() or ""
    if isinstance(error, grpc.Call):
        return error.code(), error.details() or ""
    return grpc.StatusCode.UNKNOWN, str(error)


def _unpack(any_msg: object, message: _message.Message) -> bool:
    unpack = getattr(any_msg, "Unpack", None)
    return bool(unpack is not None and unpack(message))


def connection_hint(code: grpc.StatusCode, message: str, transport: Transport | None) -> str:
    """What to check when the connection failed, from grpc's message and how the client
    connected; empty for any other error."""
    if code != grpc.StatusCode.UNAVAILABLE:
        return ""
    if message.endswith(_CLOSED):
        return f"{CLOSED_CONNECTION_HINTS[transport]}; {_SERVER_LOG}"
    if "WRONG_VERSION_NUMBER" in message:
        return (
            "the port does not speak TLS (a sidecar without --tls-cert): connect without "
            "credentials"
        )
    if "CERTIFICATE_VERIFY_FAILED" in message:
        return (
            "this client does not trust the server's certificate: tls_credentials(ca=...) must "
            "name the CA that signed it, for the address dialled"
        )
    return ""


def decode_rpc_error(error: grpc.RpcError, transport: Transport | None = None) -> TurnkeeperError:
    """Decodes the status code, message and rich details of a failed call.

    `transport` (how the client connected; the clients pass it) picks the hint of an
    UNAVAILABLE "Socket closed".
    """
    code, message = _code_and_message(error)
    request_id = ""
    hint = connection_hint(code, message, transport)
    reason = domain = ""
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    preconditions: list[PreconditionViolation] = []
    report: trim_pb2.CapacityReport | None = None
    retry_delay: float | None = None
    for key, value in _metadata_items(error):
        if key == _REQUEST_ID_KEY and isinstance(value, str):
            request_id = value
        if key != _DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status()
        status.ParseFromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            bad = error_details_pb2.BadRequest()
            pre = error_details_pb2.PreconditionFailure()
            cap = trim_pb2.CapacityReport()
            retry = error_details_pb2.RetryInfo()
            if _unpack(detail, info):
                # The first ErrorInfo wins: the server sends exactly one.
                if not reason:
                    reason, domain = str(info.reason), str(info.domain)
                    metadata = {str(k): str(v) for k, v in info.metadata.items()}
            elif _unpack(detail, bad):
                violations.extend(
                    FieldViolation(str(v.field), str(v.description)) for v in bad.field_violations
                )
            elif _unpack(detail, pre):
                preconditions.extend(
                    PreconditionViolation(str(v.type), str(v.subject), str(v.description))
                    for v in pre.violations
                )
            elif _unpack(detail, cap):
                report = cap
            elif _unpack(detail, retry):
                retry_delay = retry.retry_delay.ToNanoseconds() / 1e9
    return TurnkeeperError(
        code=code,
        message=message,
        reason=reason,
        domain=domain,
        metadata=metadata,
        field_violations=tuple(violations),
        precondition_violations=tuple(preconditions),
        capacity_report=report,
        retry_delay=retry_delay,
        request_id=request_id,
        hint=hint,
    )
