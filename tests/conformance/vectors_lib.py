"""Load, run and check turnkeeper conformance vectors (format: docs/conventions.md).

The module is deliberately small and free of pytest so that other tools (a CLI, a client's own test suite)
can reuse it:

- `load_vectors()` reads every `NNN-name.json` file and checks its shape;
- `Vector.request_message()` / `Vector.expected_response()` parse the proto3 JSON mapping strictly
  (unknown fields are an error);
- `call_vector()` sends the request over a `grpc.aio` channel and returns the response or the decoded
  error;
- `check_outcome()` compares an outcome with the vector's expectation and returns readable problems
  (an empty list means the vector passes).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
from google.protobuf import any_pb2, json_format, text_format
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from turnkeeper.v1 import history_service_pb2 as svc
from turnkeeper.v1 import trim_pb2

SERVICE = "turnkeeper.v1.HistoryService"
ERROR_DOMAIN = "turnkeeper.v1"
STATUS_DETAILS_KEY = "grpc-status-details-bin"
VECTORS_DIR = Path(__file__).resolve().parent / "vectors"
VECTOR_FILE = re.compile(r"^(\d{3})-([a-z0-9][a-z0-9-]*)\.json$")
SECTION = re.compile(r"§\s*(\d+)")
AMENDMENT = re.compile(r"§10\.(\d+)")
"""A second-edition rule, such as §10.3."""
SUBSECTION = re.compile(r"§(\d+)\.(\d+)")
"""A numbered subsection, such as §11.1."""

_TOP_KEYS = frozenset({"name", "rule", "description", "rpc", "request", "expect"})
_ERROR_KEYS = frozenset({"code", "reason", "fieldViolations", "capacityReport"})


@dataclass(frozen=True)
class RpcSpec:
    """The request and response message types of one unary RPC."""

    request_type: type[Message]
    response_type: type[Message]

    def method(self, rpc: str) -> str:
        return f"/{SERVICE}/{rpc}"


RPCS: Mapping[str, RpcSpec] = {
    "EstimateTokens": RpcSpec(svc.EstimateTokensRequest, svc.EstimateTokensResponse),
    "ResolveBudget": RpcSpec(svc.ResolveBudgetRequest, svc.ResolveBudgetResponse),
    "TrimHistory": RpcSpec(svc.TrimHistoryRequest, svc.TrimHistoryResponse),
    "PrepareModelCall": RpcSpec(svc.PrepareModelCallRequest, svc.PrepareModelCallResponse),
    "PlanCompaction": RpcSpec(svc.PlanCompactionRequest, svc.PlanCompactionResponse),
    "CheckCapacity": RpcSpec(svc.CheckCapacityRequest, svc.CheckCapacityResponse),
    "SweepOrphans": RpcSpec(svc.SweepOrphansRequest, svc.SweepOrphansResponse),
    "CapToolResults": RpcSpec(svc.CapToolResultsRequest, svc.CapToolResultsResponse),
    "ClassifyProviderError": RpcSpec(
        svc.ClassifyProviderErrorRequest, svc.ClassifyProviderErrorResponse
    ),
}


class VectorFormatError(ValueError):
    """A vector file does not follow the format of docs/conventions.md."""


@dataclass(frozen=True)
class ExpectedError:
    """The `expect.error` part of a vector."""

    code: grpc.StatusCode
    reason: str
    field_violations: frozenset[str] | None
    capacity_report: trim_pb2.CapacityReport | None


@dataclass(frozen=True)
class Vector:
    """One conformance vector, as read from its file."""

    path: Path
    number: int
    name: str
    rule: str
    description: str
    rpc: str
    request: Mapping[str, Any]
    expect: Mapping[str, Any]

    @property
    def spec(self) -> RpcSpec:
        return RPCS[self.rpc]

    @property
    def sections(self) -> frozenset[int]:
        """The spec section numbers (§N) the rule names."""
        return frozenset(int(n) for n in SECTION.findall(self.rule))

    @property
    def amendments(self) -> frozenset[int]:
        """The second-edition rules (§10.N) the rule names, as N."""
        return frozenset(int(n) for n in AMENDMENT.findall(self.rule))

    @property
    def subsections(self) -> frozenset[tuple[int, int]]:
        """The numbered subsections (§N.M) the rule names, as (N, M)."""
        return frozenset((int(a), int(b)) for a, b in SUBSECTION.findall(self.rule))

    def request_message(self) -> Message:
        message = self.spec.request_type()
        json_format.ParseDict(dict(self.request), message, ignore_unknown_fields=False)
        return message

    def expected_response(self) -> Message | None:
        if "response" not in self.expect:
            return None
        message = self.spec.response_type()
        json_format.ParseDict(dict(self.expect["response"]), message, ignore_unknown_fields=False)
        return message

    def expected_error(self) -> ExpectedError | None:
        raw = self.expect.get("error")
        if raw is None:
            return None
        report: trim_pb2.CapacityReport | None = None
        if "capacityReport" in raw:
            report = trim_pb2.CapacityReport()
            json_format.ParseDict(raw["capacityReport"], report, ignore_unknown_fields=False)
        violations = raw.get("fieldViolations")
        return ExpectedError(
            code=grpc.StatusCode[raw["code"]],
            reason=raw["reason"],
            field_violations=None if violations is None else frozenset(violations),
            capacity_report=report,
        )


def _require(condition: bool, path: Path, problem: str) -> None:
    if not condition:
        raise VectorFormatError(f"{path.name}: {problem}")


def parse_vector(path: Path) -> Vector:
    """Reads one vector file and checks its shape and that its messages parse strictly."""
    match = VECTOR_FILE.match(path.name)
    _require(match is not None, path, "file name must be NNN-short-name.json")
    assert match is not None
    raw = json.loads(path.read_text(encoding="utf-8"))
    _require(isinstance(raw, dict), path, "top level must be an object")
    _require(
        set(raw) == _TOP_KEYS, path, f"keys must be exactly {sorted(_TOP_KEYS)}, got {sorted(raw)}"
    )
    for key in ("name", "rule", "description", "rpc"):
        _require(
            isinstance(raw[key], str) and raw[key].strip() != "", path, f"{key!r} must be text"
        )
    _require(raw["name"] == match.group(2), path, f"name {raw['name']!r} must match the file name")
    _require(raw["rpc"] in RPCS, path, f"rpc {raw['rpc']!r} is not a unary HistoryService RPC")
    _require(isinstance(raw["request"], dict), path, "'request' must be an object")
    expect = raw["expect"]
    _require(
        isinstance(expect, dict)
        and len(expect) == 1
        and next(iter(expect)) in ("response", "error"),
        path,
        "'expect' must hold exactly one of 'response' or 'error'",
    )
    if "error" in expect:
        error = expect["error"]
        _require(isinstance(error, dict), path, "'expect.error' must be an object")
        _require(
            set(error) <= _ERROR_KEYS,
            path,
            f"unknown keys in expect.error: {set(error) - _ERROR_KEYS}",
        )
        _require(
            isinstance(error.get("code"), str) and error["code"] in grpc.StatusCode.__members__,
            path,
            "expect.error.code must be a gRPC status code name",
        )
        _require(
            isinstance(error.get("reason"), str) and error["reason"].startswith("ERROR_REASON_"),
            path,
            "expect.error.reason must be an ErrorReason value name",
        )
        violations = error.get("fieldViolations")
        _require(
            violations is None
            or (isinstance(violations, list) and all(isinstance(v, str) for v in violations)),
            path,
            "expect.error.fieldViolations must be a list of field paths",
        )
        _require(
            violations is None or len(set(violations)) == len(violations),
            path,
            "expect.error.fieldViolations must not repeat a path (it is compared as a set)",
        )
    else:
        _require(isinstance(expect["response"], dict), path, "'expect.response' must be an object")
    vector = Vector(
        path=path,
        number=int(match.group(1)),
        name=raw["name"],
        rule=raw["rule"],
        description=raw["description"],
        rpc=raw["rpc"],
        request=raw["request"],
        expect=expect,
    )
    try:
        vector.request_message()
        vector.expected_response()
        vector.expected_error()
    except json_format.ParseError as exc:
        raise VectorFormatError(f"{path.name}: {exc}") from exc
    return vector


def vectors_dir() -> Path:
    """The vectors directory: $TURNKEEPER_CONFORMANCE_DIR when set, else the one next to this module."""
    configured = os.environ.get("TURNKEEPER_CONFORMANCE_DIR")
    return Path(configured) if configured else VECTORS_DIR


def load_vectors(directory: Path | None = None) -> list[Vector]:
    """Every vector of the directory, ordered by file name."""
    root = directory or vectors_dir()
    return [parse_vector(path) for path in sorted(root.glob("*.json"))]


# --- errors -------------------------------------------------------------------------------------


@dataclass
class DecodedError:
    """A failed call with its `google.rpc.Status` details unpacked."""

    code: grpc.StatusCode
    message: str
    status: status_pb2.Status | None
    error_infos: list[error_details_pb2.ErrorInfo] = field(default_factory=list)
    bad_requests: list[error_details_pb2.BadRequest] = field(default_factory=list)
    precondition_failures: list[error_details_pb2.PreconditionFailure] = field(default_factory=list)
    capacity_reports: list[trim_pb2.CapacityReport] = field(default_factory=list)
    unknown_details: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str | None:
        return self.error_infos[0].reason if len(self.error_infos) == 1 else None

    @property
    def field_violations(self) -> list[str]:
        return [v.field for request in self.bad_requests for v in request.field_violations]

    def summary(self) -> str:
        parts = [f"{self.code.name}: {self.message}"]
        parts += [f"ErrorInfo(reason={i.reason}, domain={i.domain})" for i in self.error_infos]
        if self.bad_requests:
            parts.append(f"BadRequest fields={self.field_violations}")
        parts += [f"CapacityReport {_one_line(r)}" for r in self.capacity_reports]
        parts += [f"unknown detail {u}" for u in self.unknown_details]
        return "; ".join(parts)


def _unpack(detail: any_pb2.Any, decoded: DecodedError) -> None:
    targets: list[tuple[type[Message], list[Any]]] = [
        (error_details_pb2.ErrorInfo, decoded.error_infos),
        (error_details_pb2.BadRequest, decoded.bad_requests),
        (error_details_pb2.PreconditionFailure, decoded.precondition_failures),
        (trim_pb2.CapacityReport, decoded.capacity_reports),
    ]
    for message_type, sink in targets:
        if detail.TypeName() == message_type.DESCRIPTOR.full_name:
            message = message_type()
            if not detail.Unpack(message):
                raise DecodeError(f"cannot unpack {detail.type_url}")
            sink.append(message)
            return
    decoded.unknown_details.append(detail.type_url)


class FailedCall(Protocol):
    """What a failed call exposes, for both `grpc.aio.AioRpcError` and a failed sync `grpc.Call`."""

    def code(self) -> grpc.StatusCode: ...

    def details(self) -> str | None: ...

    def trailing_metadata(self) -> Any: ...


def decode_rpc_error(error: FailedCall) -> DecodedError:
    """Decodes the status code and the `grpc-status-details-bin` trailer of a failed call."""
    trailers: Iterable[tuple[str, str | bytes]] = error.trailing_metadata() or ()
    raw: bytes | None = None
    for key, value in trailers:
        if key == STATUS_DETAILS_KEY:
            raw = value if isinstance(value, bytes) else value.encode("latin-1")
    decoded = DecodedError(code=error.code(), message=error.details() or "", status=None)
    if raw is not None:
        status = status_pb2.Status()
        status.ParseFromString(raw)
        decoded.status = status
        for detail in status.details:
            _unpack(detail, decoded)
    return decoded


# --- comparison ---------------------------------------------------------------------------------


def _text(message: Message) -> str:
    return text_format.MessageToString(message, as_utf8=True)


def _one_line(message: Message) -> str:
    return text_format.MessageToString(message, as_utf8=True, as_one_line=True)


def message_diff(expected: Message, actual: Message) -> str:
    """A unified diff of the text format of two messages (empty when they are equal)."""
    if expected == actual:
        return ""
    lines = difflib.unified_diff(
        _text(expected).splitlines(),
        _text(actual).splitlines(),
        fromfile="expected",
        tofile="actual",
        lineterm="",
    )
    return "\n".join(lines) or "(messages differ but print identically)"


def check_error(expected: ExpectedError, actual: DecodedError) -> list[str]:
    """The ways a decoded error differs from the expected one."""
    problems: list[str] = []
    if actual.code != expected.code:
        problems.append(f"status code: expected {expected.code.name}, got {actual.code.name}")
    if actual.status is None:
        problems.append(f"no {STATUS_DETAILS_KEY} trailer (google.rpc.Status) on the error")
        return problems
    if actual.status.code != expected.code.value[0]:
        problems.append(
            f"google.rpc.Status.code is {actual.status.code}, expected {expected.code.value[0]}"
        )
    if len(actual.error_infos) != 1:
        problems.append(f"expected exactly one ErrorInfo detail, got {len(actual.error_infos)}")
    else:
        info = actual.error_infos[0]
        if info.domain != ERROR_DOMAIN:
            problems.append(f"ErrorInfo.domain: expected {ERROR_DOMAIN!r}, got {info.domain!r}")
        if info.reason != expected.reason:
            problems.append(f"ErrorInfo.reason: expected {expected.reason}, got {info.reason}")
    if expected.field_violations is not None:
        if len(actual.bad_requests) != 1:
            problems.append(
                f"expected exactly one BadRequest detail, got {len(actual.bad_requests)}"
            )
        got = actual.field_violations
        if len(set(got)) != len(got):
            problems.append(f"BadRequest repeats a field: {got}")
        if set(got) != expected.field_violations:
            missing = sorted(expected.field_violations - set(got))
            extra = sorted(set(got) - expected.field_violations)
            problems.append(
                f"BadRequest fields differ: missing {missing}, unexpected {extra} (got {sorted(got)})"
            )
    if expected.capacity_report is not None:
        if len(actual.capacity_reports) != 1:
            problems.append(
                f"expected exactly one CapacityReport detail, got {len(actual.capacity_reports)}"
            )
        else:
            diff = message_diff(expected.capacity_report, actual.capacity_reports[0])
            if diff:
                problems.append("CapacityReport differs:\n" + diff)
    return problems


Outcome = Message | DecodedError


def check_outcome(vector: Vector, outcome: Outcome) -> list[str]:
    """The ways an RPC outcome differs from what the vector expects (empty when it conforms)."""
    expected_response = vector.expected_response()
    if expected_response is not None:
        if isinstance(outcome, DecodedError):
            return [f"expected a response, got an error: {outcome.summary()}"]
        diff = message_diff(expected_response, outcome)
        return ["response differs:\n" + diff] if diff else []
    expected_error = vector.expected_error()
    assert expected_error is not None
    if not isinstance(outcome, DecodedError):
        return [f"expected {expected_error.code.name}, got a response:\n{_text(outcome)}"]
    return check_error(expected_error, outcome)


async def call_vector(
    channel: grpc.aio.Channel, vector: Vector, deadline_seconds: float = 30.0
) -> Outcome:
    """Sends the vector's request and returns the response message or the decoded error."""
    spec = vector.spec
    method: grpc.aio.UnaryUnaryMultiCallable[Message, Message] = channel.unary_unary(
        spec.method(vector.rpc),
        request_serializer=lambda message: message.SerializeToString(),
        response_deserializer=spec.response_type.FromString,
    )
    try:
        response: Message = await method(vector.request_message(), timeout=deadline_seconds)
    except grpc.aio.AioRpcError as error:
        return decode_rpc_error(error)
    return response


def covered_sections(vectors: Sequence[Vector]) -> frozenset[int]:
    """Every spec section number named by some vector's rule."""
    return frozenset(n for vector in vectors for n in vector.sections)
