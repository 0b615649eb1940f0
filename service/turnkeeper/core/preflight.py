"""The capacity pre-flight (spec §3, §9 Capacity): fails a request before it reaches the provider.

It runs whatever the proactive budget is, 0 included: raising the budget never makes a request fit.
What the pre-flight adds to the prepared messages (hooks, tool schemas, reserved output) also
bounds the budget trim of PrepareModelCall (spec §12), so it is computed once, here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnkeeper.core.pricing import price_text
from turnkeeper.core.saturation import saturate
from turnkeeper.v1 import resolution_pb2, trim_pb2


def _priced(texts: Sequence[str]) -> int:
    # Looked at first: protobuf's repeated fields iterate by index until IndexError, whose message
    # is formatted, and a request most often has no hooks or schemas.
    return sum(map(price_text, texts)) if texts else 0


# Not frozen, like TrimPlan (core/trimming.py): built per call, never changed.
@dataclass(slots=True)
class Extras:
    """The rest of the request beside its messages, in tokens (§9 Capacity)."""

    hook_tokens: int
    schema_tokens: int
    reserved_output_tokens: int

    @classmethod
    def of(
        cls, hook_texts: Sequence[str], tool_schemas: Sequence[str], reserved_output_tokens: int
    ) -> Extras:
        return cls(_priced(hook_texts), _priced(tool_schemas), reserved_output_tokens)

    @property
    def total(self) -> int:
        return self.hook_tokens + self.schema_tokens + self.reserved_output_tokens


def room(capacity: resolution_pb2.Capacity, extras: Extras) -> int | None:
    """What the prepared messages may use, `capacity - extras` (§12), on the known window or the
    safety window; None when that is below 1 (the trim then aims at the budget as before)."""
    left = capacity.safety_tokens - extras.total
    return left if left >= 1 else None


def check_capacity(
    message_tokens: int,
    image_tokens: int,
    extras: Extras,
    capacity: resolution_pb2.Capacity,
) -> trim_pb2.CapacityReport:
    total = message_tokens + extras.total
    report = trim_pb2.CapacityReport(
        message_tokens=message_tokens,
        image_tokens=image_tokens,
        hook_tokens=extras.hook_tokens,
        tool_schema_tokens=extras.schema_tokens,
        reserved_output_tokens=extras.reserved_output_tokens,
        # The reported total saturates; the decision is taken on the exact sum.
        total_tokens=saturate(total),
        fits=total <= capacity.safety_tokens,
    )
    # Copied, not passed to the constructor, which merges it through its encoding (slower).
    report.capacity.CopyFrom(capacity)
    return report
