"""The capacity pre-flight of a prepared request (§3, §9 Capacity): what the request adds to its
history, and the FAILED_PRECONDITION error that stops a request that does not fit."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2

from turnkeeper.core.preflight import Extras, check_capacity
from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.engine.protocol import HistoryView
from turnkeeper.v1 import errors_pb2, resolution_pb2, trim_pb2
from turnkeeper.v1 import history_service_pb2 as svc


def request_extras(
    request: svc.PrepareModelCallRequest | svc.PlanCompactionRequest | svc.CheckCapacityRequest,
) -> Extras:
    return Extras.of(request.hook_texts, request.tool_schemas, request.reserved_output_tokens)


def preflight(
    view: HistoryView, extras: Extras, resolution: resolution_pb2.Resolution
) -> trim_pb2.CapacityReport:
    """The capacity pre-flight of a prepared request (§3, §9 Capacity); raises unless it fits."""
    report = check_capacity(view.total_tokens, view.image_tokens, extras, resolution.capacity)
    if not report.fits:
        raise _capacity_exceeded(report, resolution.route)
    return report


def _capacity_exceeded(
    report: trim_pb2.CapacityReport, route: resolution_pb2.Route
) -> RequestError:
    # An unknown capacity is never shown as a number: the safety fallback is not the model's
    # capacity (§3 Route, §10.5).
    capacity = report.capacity
    limit = (
        f"the model's context window is {capacity.model_context_window}"
        if capacity.known
        else "the model's context window is unknown and the request exceeds turnkeeper's "
        "safety limit for an unknown window"
    )
    description = (
        f"the prepared request needs {report.total_tokens} tokens but {limit} (messages "
        f"{report.message_tokens}, hooks {report.hook_tokens}, tool schemas "
        f"{report.tool_schema_tokens}, reserved output {report.reserved_output_tokens})"
    )
    metadata = {
        "total_tokens": str(report.total_tokens),
        "capacity_known": str(capacity.known).lower(),
    }
    if capacity.known:
        metadata["capacity_tokens"] = str(capacity.model_context_window)
    failure = error_details_pb2.PreconditionFailure(
        violations=[
            error_details_pb2.PreconditionFailure.Violation(
                type="CONTEXT_WINDOW",
                subject=f"{route.provider}/{route.model}",
                description=description,
            )
        ]
    )
    return RequestError(
        grpc.StatusCode.FAILED_PRECONDITION,
        errors_pb2.ERROR_REASON_CONTEXT_WINDOW_EXCEEDED,
        description,
        details=[failure, report],
        metadata=metadata,
    )
