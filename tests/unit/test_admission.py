"""Admission control (issue 9): the in-flight request-bytes budget and the heavy-call cap."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from turnkeeper.server.api.errors import RequestError
from turnkeeper.server.edge.admission import Admission, AdmissionLimits

LIMITS = AdmissionLimits(max_inflight_bytes=1000, heavy_call_bytes=300, max_heavy_calls=2)


def _details(error: RequestError) -> tuple[error_details_pb2.ErrorInfo, float]:
    status = error.to_status()
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    proto = status_pb2.Status.FromString(dict(status.trailing_metadata)["grpc-status-details-bin"])
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    assert proto.details[0].Unpack(info) and proto.details[1].Unpack(retry)
    return info, retry.retry_delay.ToTimedelta().total_seconds()


def test_the_heavy_call_cap_refuses_the_next_heavy_call_but_not_a_light_one() -> None:
    admission = Admission(LIMITS)
    first, second = admission.acquire(300), admission.acquire(400)
    assert first and second
    with pytest.raises(RequestError) as refused:
        admission.acquire(300)
    info, delay = _details(refused.value)
    assert info.reason == "ERROR_REASON_OVERLOADED" and info.domain == "turnkeeper.v1"
    assert info.metadata["limit"] == "max_heavy_calls"
    assert delay == LIMITS.retry_after_seconds
    assert admission.acquire(10) is False  # light calls still run
    admission.release(300, True)
    assert admission.acquire(300) is True


def test_the_byte_budget_refuses_a_call_that_would_pass_it() -> None:
    admission = Admission(LIMITS)
    admission.acquire(200)
    admission.acquire(700)
    with pytest.raises(RequestError) as refused:
        admission.acquire(200)
    assert _details(refused.value)[0].metadata["limit"] == "max_inflight_request_bytes"
    admission.release(700, True)
    admission.acquire(200)
    assert admission.inflight_bytes == 400 and admission.refused == 1


def test_a_call_bigger_than_the_budget_runs_alone() -> None:
    """Otherwise it could never run; the message-size limit bounds it instead."""
    admission = Admission(LIMITS)
    admission.acquire(5000)
    with pytest.raises(RequestError):
        admission.acquire(1)
    admission.release(5000, True)
    assert admission.inflight_bytes == 0 and admission.heavy_calls == 0
