"""The gateway's circuit breaker, per worker, as smg 1.13 documents it (`--cb-*` flags).

Closed, a worker takes requests and its consecutive failures are counted (a success resets the
count; a run older than the window starts again). At the threshold the circuit opens: the
worker gets no requests for the open timeout. Then it is half-open: requests go to it again,
and a run of successes closes the circuit while one failure opens it again.

Without it, the twin's router keeps sending a crashed replica the prompts its cache holds until
Kubernetes readiness drops the pod (30 s), and each of those requests fails; with it, about ten
do, as in the real gateway.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BreakerSettings:
    """smg 1.13's defaults (`smg launch --help`)."""

    failure_threshold: int = 10
    success_threshold: int = 3
    open_seconds: float = 60.0
    window_seconds: float = 120.0


class CircuitBreaker:
    """One worker's circuit; see the module docstring. Time is an argument."""

    __slots__ = ("_failures", "_opened_at", "_run_started_at", "_successes", "settings")

    def __init__(self, settings: BreakerSettings) -> None:
        self.settings = settings
        self._failures = 0
        self._run_started_at = 0.0
        self._opened_at: float | None = None
        self._successes = 0  # in the half-open state

    def allows(self, now: float) -> bool:
        """Whether the worker may be sent a request at `now` (closed or half-open)."""
        return self._opened_at is None or now - self._opened_at >= self.settings.open_seconds

    def is_open(self, now: float) -> bool:
        """Whether the worker is shut out at `now`."""
        return not self.allows(now)

    def failure(self, now: float) -> None:
        """A request to the worker failed (a 5xx, a reset connection)."""
        if self._opened_at is not None:  # half-open (or still open): one failure reopens
            self._opened_at, self._successes = now, 0
            return
        if self._failures == 0 or now - self._run_started_at > self.settings.window_seconds:
            self._failures, self._run_started_at = 0, now
        self._failures += 1
        if self._failures >= self.settings.failure_threshold:
            self._opened_at, self._failures = now, 0

    def success(self, now: float) -> None:
        """A request to the worker succeeded."""
        if self._opened_at is None:
            self._failures = 0
            return
        if not self.allows(now):
            return  # a request sent before the circuit opened: no evidence of recovery
        self._successes += 1
        if self._successes >= self.settings.success_threshold:
            self._opened_at, self._successes = None, 0
