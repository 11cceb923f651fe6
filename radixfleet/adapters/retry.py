"""Retrying as a pure policy, shared by every adapter: `(error, attempt) -> seconds or None`.

An adapter's errors say whether a later attempt can succeed (`temporary`) and how long the
server asked to wait (`retry_after`); the policy only reads those two, so Prometheus' HTTP
errors and Route 53's throttling go through the same tested rules. The sleep stays with the
caller, injected, so tests and the twin never wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@runtime_checkable
class Retryable(Protocol):
    """An error that knows whether retrying can help."""

    @property
    def temporary(self) -> bool: ...

    @property
    def retry_after(self) -> float | None: ...


@dataclass(frozen=True)
class RetryPolicy:
    """When to retry: temporary failures only, honouring Retry-After (capped).

    `backoff_seconds[i]` is the wait before attempt `i + 2`; its length is the number of
    retries. Errors that are not `Retryable` (no data, a bad query) are never retried.
    """

    backoff_seconds: tuple[float, ...] = (0.5, 1.0, 2.0)
    max_retry_after_seconds: float = 10.0

    def delay(self, error: BaseException, attempt: int) -> float | None:
        """Seconds to wait before attempt `attempt + 1` (attempts count from 1), or None."""
        if not isinstance(error, Retryable) or not error.temporary:
            return None
        if attempt > len(self.backoff_seconds):
            return None
        if error.retry_after is not None:
            return min(error.retry_after, self.max_retry_after_seconds)
        return self.backoff_seconds[attempt - 1]


NO_RETRY = RetryPolicy(backoff_seconds=())
