"""Provider-reported usage for the calibrated trim (spec §10.3)."""

from __future__ import annotations

from turnkeeper.v1 import trim_pb2


def reported_usage(
    previous: trim_pb2.CapacityReport, reported_input_tokens: int
) -> trim_pb2.ReportedUsage:
    """What the provider reported for the previous request, next to turnkeeper's estimate of it.

    `previous` is the CapacityReport of the PrepareModelCall (or CheckCapacity) that built that
    request; its estimate is everything sent, `total_tokens - reserved_output_tokens`, of which
    `tool_schema_tokens` were tool schemas. Pass the result as `reported_usage` of the next
    PrepareModelCall, or of a TrimHistory in `TRIM_MODE_REPORTED_USAGE`.
    """
    estimated = max(0, previous.total_tokens - previous.reserved_output_tokens)
    return trim_pb2.ReportedUsage(
        reported_input_tokens=reported_input_tokens,
        estimated_input_tokens=estimated,
        tool_schema_tokens=min(previous.tool_schema_tokens, estimated),
    )
