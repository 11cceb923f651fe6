"""Kubernetes API errors that keep the HTTP status, and the one rule of what is temporary.

`KubeError.status` is the API server's HTTP status (None: no answer at all). A 409 Conflict is
temporary: the object changed since it was read, so the caller re-reads and tries again (the
status writer does so itself; a tick that still meets one is retried by kopf). 429 and 5xx are
temporary too; anything else (403, 404, 422) needs a person or a new decision, except a 403
from an admission policy that says `RETRY_SHORTLY` (the quota's policy refuses a tenant's
writes until the quota controller has accounted it: seconds, not a person, end that refusal).
The errors implement `radixfleet.adapters.retry.Retryable`, so the one `RetryPolicy` times
every retry. No client library is imported here.
"""

from __future__ import annotations

CONFLICT = 409
TEMPORARY_STATUSES = frozenset({CONFLICT, 429, 500, 502, 503, 504})
FORBIDDEN = 403
# The words an admission policy of ours ends a refusal with when it will pass by itself soon.
RETRY_SHORTLY = "retry shortly"


class KubeError(Exception):
    """A Kubernetes API call failed; `status` is the HTTP status (None: no response)."""

    def __init__(
        self, message: str, *, status: int | None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self._retry_after = retry_after

    @property
    def temporary(self) -> bool:
        """Whether a later attempt (after a re-read, for a 409) can succeed."""
        if self.status == FORBIDDEN:
            return str(self).endswith(RETRY_SHORTLY)
        return self.status is None or self.status in TEMPORARY_STATUSES

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked us to wait (its Retry-After header), if it said."""
        return self._retry_after


class ConflictError(KubeError):
    """409: the object changed since it was read; re-read and decide again."""
