"""Issue 26 (5): a call waits according to its cost, not its method's share of the traffic.

grpc aio takes each registered method's calls from grpc core about one per turn of its serving
loop, so under load the method with the most calls waited longest, whatever it cost. The server
now takes them ahead (edge/accept_ahead.py) into the edge's receiving queue, which serves the
call that waited the most for its method's cost. Closed-loop clients in two processes send a mix
in which one method has three times the calls of another (bench/method_wait_probe.py's mixed
load, from harness.load); each method's median latency under it, over its median alone, must be about the same
multiple for every method. No timing threshold: methods are compared with each other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness import quantile
from harness.load import METHODS, method_loads, method_plan

CLIENTS = 128
SECONDS = 4.0
# Each method's wait over its cost may differ by this factor from another's (the share-driven
# waits differed by an order of magnitude).
FACTOR = 2.0


def test_each_method_waits_about_the_same_multiple_of_its_cost_whatever_its_share(
    server_factory: Callable[..., Any], figures: Any
) -> None:
    server = server_factory("--log-level", "warning", unix=False)
    alone = method_loads(server.address, [[m] for m in METHODS], 1.5)
    loaded = method_loads(server.address, method_plan("mixed", CLIENTS), SECONDS)
    assert server.alive()
    multiple = {}
    for method in METHODS:
        cost = quantile(alone[method][0], 0.5)
        served = loaded[method][0]
        assert served, f"no {method} call was served"
        multiple[method] = quantile(served, 0.5) / cost
        figures.add(f"{method}: p50 under load over p50 alone", f"{multiple[method]:.1f}")
    # The load must have formed a queue, or there is nothing to compare.
    assert max(multiple.values()) >= 4, multiple
    assert max(multiple.values()) <= FACTOR * min(multiple.values()), multiple
