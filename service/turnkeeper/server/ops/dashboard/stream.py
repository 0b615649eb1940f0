"""The dashboard's Server-Sent Events stream: the TrimEvents feed, one SSE message per item.

Each feed item becomes one message whose SSE event name says what it is (`trim` for a published
trim, `meter` for a context meter update of spec §10.5, otherwise the item's oneof name:
`heartbeat`, `gap`) and whose data is the item in the protobuf JSON mapping. Trims, meter updates
and heartbeats carry the feed cursor as the SSE id, so the browser's automatic reconnect sends it
back as `Last-Event-ID` and the feed resumes after it (a restart or an overflow shows up as a
`gap` message, never silently).

A page that opens without a cursor is backfilled: its stream starts just before the oldest event
the feed retains, so the replay and the live tail are one subscription (no event lost or sent
twice between them). Trim and meter messages also carry `dashboard`: the session's latest state
and the totals from ledger.py, counted over everything the feed retains; a resumed stream first
reads the retained events up to its cursor into the ledger without sending them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response
from google.protobuf import duration_pb2, json_format

from turnkeeper.server.contract.errors import RequestError
from turnkeeper.server.events import cursor as cursors
from turnkeeper.server.events.feed import EventFeed
from turnkeeper.v1 import errors_pb2, events_pb2, history_service_pb2

from .ledger import Ledger

log = logging.getLogger(__name__)

# Idle heartbeats keep the page's resume position current and reveal a dead connection quickly.
HEARTBEAT_SECONDS = 5
# How long the browser waits before reconnecting after the stream ends (e.g. a sidecar restart).
RETRY_MILLISECONDS = 1000
# A browser that does not read for this long is cut off; it reconnects and resumes by cursor.
SEND_TIMEOUT_SECONDS = 30.0
# A resumed stream reads the retained events up to its cursor for at most this long.
PRIME_SECONDS = 2.0

_EVENT_NAMES = {"event": "trim", "meter_update": "meter"}


@dataclass(frozen=True)
class Message:
    """One SSE message: event name, JSON data and, for resumable positions, the feed cursor."""

    event: str
    data: str
    id: str | None


def to_message(
    item: history_service_pb2.TrimEventsResponse, dashboard: dict[str, Any] | None = None
) -> Message:
    kind = item.WhichOneof("item")
    if kind is None:
        raise ValueError("a feed item with nothing set")
    body = getattr(item, kind)
    fields = json_format.MessageToDict(body)
    if dashboard is not None:
        fields["dashboard"] = dashboard
    data = json.dumps(fields, separators=(",", ":"))
    # Events, meter updates and heartbeats carry a resume position; gaps do not. An empty id would
    # reset the browser's position, so none is sent then.
    cursor = getattr(body, "cursor", "") or None
    return Message(_EVENT_NAMES.get(kind, kind), data, cursor)


def resume_cursor(request: web.Request) -> str:
    """The browser's own `Last-Event-ID` (automatic reconnects) wins over `?after=` (the page's
    reconnects after the stream failed for good, where EventSource cannot set headers)."""
    return (request.headers.get("Last-Event-ID") or request.query.get("after", "")).strip()


def _request(after: str, runtime: str | None) -> history_service_pb2.TrimEventsRequest:
    """The page's subscription: one runtime's items (the session's token scope), or every
    runtime's for None."""
    interval = duration_pb2.Duration(seconds=HEARTBEAT_SECONDS)
    return history_service_pb2.TrimEventsRequest(
        after_cursor=after,
        heartbeat_interval=interval,
        include_meter_updates=True,
        runtime_ids=[runtime] if runtime is not None else [],
    )


async def prime(feed: EventFeed, ledger: Ledger, resume: str, runtime: str | None = None) -> None:
    """Reads the retained events at or before `resume` into `ledger`, sending nothing: a resumed
    page keeps its counts. Skipped when the cursor is of another run (the feed then replays what
    it retains anyway); bounded in time, since the last event before the cursor may be gone."""
    oldest = await feed.oldest_cursor()
    if not oldest or cursors.not_after(oldest, resume) is not True:
        return
    stream = feed.subscribe(_request(oldest, runtime))
    try:
        async with asyncio.timeout(PRIME_SECONDS):
            async for item in stream:
                kind = item.WhichOneof("item")
                if kind == "heartbeat":
                    return  # the replay is over
                if kind not in ("event", "meter_update"):
                    continue
                cursor = getattr(item, kind).cursor
                if not cursors.not_after(cursor, resume):
                    return
                ledger.read(item)
                if kind == "event" and cursor == resume:
                    return
    except TimeoutError:
        log.info("dashboard: gave up reading the retained events before %r", resume)
    except RequestError:
        pass  # shutting down: the live subscription reports it
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


async def _items(
    feed: EventFeed, after: str, runtime: str | None = None
) -> AsyncGenerator[history_service_pb2.TrimEventsResponse]:
    """The feed from `after` (one runtime's items, or every runtime's for None); an unreadable
    cursor is reported as a gap of unknown size (what was missed is unknown, as after a restart)
    followed by a live tail. Ends when the feed closes."""
    request = _request(after, runtime)
    stream = feed.subscribe(request)
    try:
        try:
            first = await anext(stream)
        except RequestError as error:
            if error.reason != errors_pb2.ERROR_REASON_INVALID_SUBSCRIPTION:
                raise
            log.info("dashboard: unreadable resume cursor %r: %s", after, error.message)
            request.after_cursor = ""
            stream = feed.subscribe(request)
            first = await anext(stream)
            yield history_service_pb2.TrimEventsResponse(
                gap=events_pb2.Gap(cause=events_pb2.GAP_CAUSE_RESTART, after_cursor=after)
            )
        yield first
        async for item in stream:
            yield item
    except StopAsyncIteration:  # the feed closed before its first item
        return
    finally:  # unregisters the subscriber when the page leaves
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


async def stream_feed(
    request: web.Request, feed: EventFeed, runtime: str | None = None
) -> web.StreamResponse:
    """GET handler body: streams until the feed closes (shutdown) or the browser goes away;
    `runtime` limits it to one runtime's items (the session's token scope)."""
    ledger = Ledger()
    after = resume_cursor(request)
    if after:
        await prime(feed, ledger, after, runtime)
    else:
        after = await feed.oldest_cursor()  # backfill a page that opens
    async with contextlib.aclosing(_items(feed, after, runtime)) as items:
        try:
            first = await anext(items)
        except StopAsyncIteration:  # the feed closed between subscribing and the first item
            raise web.HTTPServiceUnavailable(text="the event feed is closed") from None
        except RequestError as error:  # shutting down: the page retries
            raise web.HTTPServiceUnavailable(text=error.message) from None
        async with sse_response(request, send_timeout=SEND_TIMEOUT_SECONDS) as response:
            try:
                await _send(response, ledger, first, retry=RETRY_MILLISECONDS)
                async for item in items:
                    await _send(response, ledger, item)
            except (ConnectionResetError, TimeoutError):
                pass  # the browser left or stopped reading; it resumes by cursor
        return response


async def _send(
    response: EventSourceResponse,
    ledger: Ledger,
    item: history_service_pb2.TrimEventsResponse,
    retry: int | None = None,
) -> None:
    session = ledger.read(item)
    message = to_message(item, None if session is None else ledger.annotation(session))
    await response.send(message.data, id=message.id, event=message.event, retry=retry)
