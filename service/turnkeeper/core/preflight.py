"""The capacity pre-flight (spec §3, §9 Capacity): fails a request before it reaches the provider.

It runs whatever the proactive budget is, 0 included: raising the budget never makes a request fit.
"""

from __future__ import annotations

from collections.abc import Iterable

from turnkeeper.core.pricing import price_text
from turnkeeper.core.saturation import saturate
from turnkeeper.v1 import resolution_pb2, trim_pb2


def check_capacity(
    message_tokens: int,
    image_tokens: int,
    hook_texts: Iterable[str],
    tool_schemas: Iterable[str],
    reserved_output_tokens: int,
    capacity: resolution_pb2.Capacity,
) -> trim_pb2.CapacityReport:
    hook_tokens = sum(price_text(t) for t in hook_texts)
    schema_tokens = sum(price_text(s) for s in tool_schemas)
    total = message_tokens + hook_tokens + schema_tokens + reserved_output_tokens
    return trim_pb2.CapacityReport(
        message_tokens=message_tokens,
        image_tokens=image_tokens,
        hook_tokens=hook_tokens,
        tool_schema_tokens=schema_tokens,
        reserved_output_tokens=reserved_output_tokens,
        # The reported total saturates; the decision is taken on the exact sum.
        total_tokens=saturate(total),
        capacity=capacity,
        fits=total <= capacity.safety_tokens,
    )
