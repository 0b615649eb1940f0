"""A small request must not expand past the memory it is allowed: each amplification (many tiny
items in some repeated field) sent to a sidecar under an address-space limit, on both engines.
The process lives, refuses it with INVALID_ARGUMENT naming `max_request_items` and the field, and
still answers a normal call after it."""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from harness.expansion import amplifications, normal_call
from robustness_support import BIG_MESSAGES, bad_request, error_info, proc_status_kib, rich_status
from turnkeeper.server.contract.methods import method_path

HEADROOM_MIB = 1024  # address space above the server's at rest; today's worst case needs 2 GiB
EXTRA_FLAGS = tuple(os.environ.get("EXPANSION_TEST_FLAGS", "").split())
"""Flags for the servers, e.g. a huge --max-request-items to see the test fail without the limit."""


@pytest.mark.parametrize("engine", ["native", "python"])
def test_amplifying_requests_are_refused_under_an_address_space_limit(
    engine: str, server_factory: Callable[..., Any], figures: Any
) -> None:
    server = server_factory("--engine", engine, *EXTRA_FLAGS, unix=False)
    cap = (proc_status_kib(server.pid, "VmSize") // 1024 + HEADROOM_MIB) << 20
    resource.prlimit(server.pid, resource.RLIMIT_AS, (cap, cap))
    method, body = normal_call()
    with grpc.insecure_channel(server.address, options=BIG_MESSAGES) as channel:
        for case in amplifications():
            with pytest.raises(grpc.RpcError) as raised:
                channel.unary_unary(case.path)(case.body, timeout=120)
            error = raised.value
            assert server.process.poll() is None, f"{case.name}: the server died"
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (case.name, error.details())
            status = rich_status(error)
            assert status is not None
            info = error_info(status)
            assert info is not None and info.reason == "ERROR_REASON_REQUEST_TOO_LARGE"
            assert info.metadata["limit"] == "max_request_items"
            found = bad_request(status)
            assert found is not None
            assert [v.field for v in found.field_violations] == [case.field], case.name
            channel.unary_unary(method_path(method))(body, timeout=30)
        figures.add(f"{engine}: peak RSS (MiB)", proc_status_kib(server.pid, "VmHWM") // 1024)
