"""A call's ids, kept in a context variable for every record written in that call.

The access interceptor puts the call's request id and CallerContext ids in a context variable;
a filter copies them, and the OpenTelemetry trace and span ids, onto every record written in
that call, so the trim lines carry them as well as the access line.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeAlias

from opentelemetry import trace

from turnkeeper.server.telemetry.tracing import tracing_started

# The record attributes a call's context adds (empty ones are left out).
CALL_FIELDS = ("request_id", "session_id", "runtime_id", "agent_id", "trace_id", "span_id")
CALL_FIELD_SET = frozenset(CALL_FIELDS)

# The metadata key of a call's request id, in the caller's headers and in the server's trailers.
REQUEST_ID_KEY = "x-request-id"

_call_ids: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "turnkeeper_call_ids", default=MappingProxyType({})
)


def set_call_ids(ids: Mapping[str, str]) -> contextvars.Token[Mapping[str, str]]:
    """The ids of the call running in this context (non-empty ones only), for every record
    written within it. The mapping is kept, not copied: it must not change afterwards."""
    return _call_ids.set(ids)


def current_request_id() -> str | None:
    """The request id of the call running in this context, if any."""
    return _call_ids.get().get("request_id")


def reset_call_ids(token: contextvars.Token[Mapping[str, str]]) -> None:
    _call_ids.reset(token)


# A call's ids and its trace and span ids (None: no valid span).
CallContext: TypeAlias = tuple[Mapping[str, str], tuple[str, str] | None]


def call_context() -> CallContext:
    """The current call's ids and its trace and span ids (None: no valid span)."""
    if tracing_started():
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            return _call_ids.get(), (format(span.trace_id, "032x"), format(span.span_id, "016x"))
    return _call_ids.get(), None


def add_call_context(attributes: dict[str, object], context: CallContext | None = None) -> None:
    """A call's ids and trace context (the current one's by default) into a record's
    attributes, never replacing what they hold: an extra of the same name wins."""
    ids, spans = call_context() if context is None else context
    if ids:
        if attributes.keys().isdisjoint(ids):  # the usual case: one C-level update
            attributes.update(ids)
        else:
            for name, value in ids.items():
                attributes.setdefault(name, value)
    if spans is not None:
        attributes.setdefault("trace_id", spans[0])
        attributes.setdefault("span_id", spans[1])


class CallContextFilter(logging.Filter):
    """Adds the current call's ids and trace context to each record (never replacing extras)."""

    def filter(self, record: logging.LogRecord) -> bool:
        add_call_context(record.__dict__)
        return True
