"""The unary calls being served, so that a drain whose grace runs out answers them itself.

When the grace period of a shutdown ends, grpc cancels every call still running, and a client
sees CANCELLED: not retryable by the usual policies, and indistinguishable from its own cancel.
A call the server accepted and could not finish is the server's to answer, so the drain ends
each one first with UNAVAILABLE (ERROR_REASON_SHUTTING_DOWN), which clients retry elsewhere.
"""

from __future__ import annotations

import asyncio

import grpc

from turnkeeper.server.contract.errors import RequestError
from turnkeeper.v1 import errors_pb2


class CallsInService:
    """The tasks of the unary calls between admission and their answer."""

    __slots__ = ("_emptied", "_ended", "_tasks")

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[object]] = set()
        self._ended: set[asyncio.Task[object]] = set()
        self._emptied: list[asyncio.Future[None]] = []

    def __len__(self) -> int:
        return len(self._tasks)

    def enter(self) -> asyncio.Task[object] | None:
        """Counts the calling task in; `leave` it with what this returned."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        return task

    def leave(self, task: asyncio.Task[object] | None) -> None:
        if task is not None:
            self._tasks.discard(task)
            self._ended.discard(task)
            if not self._tasks and self._emptied:
                for waiter in self._emptied:
                    if not waiter.done():
                        waiter.set_result(None)

    async def wait_empty(self, limit: float) -> bool:
        """Waits up to `limit` seconds until no call is in service; True if none is."""
        if self._tasks:
            emptied: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._emptied.append(emptied)
            try:
                await asyncio.wait((emptied,), timeout=limit)
            finally:
                self._emptied.remove(emptied)
        return not self._tasks

    def end_all(self) -> int:
        """Interrupts every call in service; each answers `refusal_if_ended`'s error. Returns
        how many there were."""
        running = [task for task in self._tasks if not task.done()]
        for task in running:
            self._ended.add(task)
            task.cancel()
        return len(running)

    def refusal_if_ended(self, task: asyncio.Task[object] | None) -> RequestError | None:
        """The answer of a call that `end_all` interrupted (None: cancelled by anyone else, the
        client or grpc, so the cancellation goes on)."""
        if task is None or task not in self._ended:
            return None
        task.uncancel()
        return RequestError(
            grpc.StatusCode.UNAVAILABLE,
            errors_pb2.ERROR_REASON_SHUTTING_DOWN,
            "the sidecar shut down before this call finished; send it to another replica or "
            "after the restart",
        )
