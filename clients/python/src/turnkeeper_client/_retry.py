"""The retry policy of the unary calls (docs/conventions.md, Client defaults).

Every unary RPC of HistoryService is idempotent, so a call refused with RESOURCE_EXHAUSTED or
UNAVAILABLE is called again, at most `max_attempts` times in all and within the call's deadline:

- with a `google.rpc.RetryInfo` (what an overloaded server sends) after its `retry_delay`, unless
  that is over `max_delay` or would pass the deadline: then the error is raised at once;
- without one, UNAVAILABLE (no connection, a server going away) after a jittered exponential
  backoff; RESOURCE_EXHAUSTED without RetryInfo (e.g. a message over a size limit) is not retried.

TrimEvents is not retried here: its watch resumes from its cursor (`_watch.Backoff`).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import grpc

from .errors import TurnkeeperError

# The codes a retry may cure; the policy's constants are checked against
# tests/conformance/client-defaults.json.
RETRYABLE_CODES = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE})


@dataclass(frozen=True)
class RetryPolicy:
    """How a unary call is retried; `retry=None` on a client turns retrying off.

    `max_attempts` counts the first call. `max_delay`: the longest RetryInfo delay waited for.
    `backoff`, `multiplier`, `jitter`: the wait before retry n of an UNAVAILABLE without RetryInfo,
    `backoff * multiplier ** (n - 1)`, plus or minus `jitter` of it.
    """

    max_attempts: int = 3
    max_delay: float = 5.0
    backoff: float = 0.1
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

    def delay(self, error: TurnkeeperError, retry: int) -> float | None:
        """The wait before retry number `retry` (1 for the first) after `error`; None: do not
        retry."""
        if error.code not in RETRYABLE_CODES or retry >= self.max_attempts:
            return None
        if error.retry_delay is not None:
            return error.retry_delay if error.retry_delay <= self.max_delay else None
        if error.code != grpc.StatusCode.UNAVAILABLE:
            return None
        base = self.backoff * self.multiplier ** (retry - 1)
        return max(0.0, base * (1.0 + random.uniform(-self.jitter, self.jitter)))


DEFAULT_RETRY = RetryPolicy()


class Attempts:
    """One call's attempts: the timeout each gets (what is left of the call's deadline) and the
    wait before the next one."""

    def __init__(self, policy: RetryPolicy | None, timeout: float | None) -> None:
        self._policy = policy
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._retries = 0

    def timeout(self) -> float | None:
        """The timeout of the next attempt: the time left before the call's deadline."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def next_delay(self, error: TurnkeeperError) -> float | None:
        """How long to wait before calling again after `error`; None: raise it now (not
        retryable, attempts used up, or the wait would pass the deadline)."""
        if self._policy is None:
            return None
        self._retries += 1
        delay = self._policy.delay(error, self._retries)
        if delay is None:
            return None
        left = self.timeout()
        if left is not None and delay >= left:
            return None
        return delay
