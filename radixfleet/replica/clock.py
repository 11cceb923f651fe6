"""Clocks: where "now" comes from for the drivers of the replica model.

The model itself takes `now` as an argument on every call and never reads a clock; the
real-time driver (the emulator) reads a :class:`MonotonicClock`, the twin a :class:`VirtualClock`
it moves forward itself. Both satisfy the one-method :class:`Clock` protocol.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A source of the current time in seconds."""

    def now(self) -> float:
        """The current time in seconds; never decreases."""
        ...


class MonotonicClock:
    """Real time, from the process's monotonic clock."""

    def now(self) -> float:
        """Seconds since an arbitrary fixed point, never decreasing."""
        return time.monotonic()


class VirtualClock:
    """Time that moves only when its owner moves it (the twin, tests)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        """The virtual time last set."""
        return self._now

    def advance_to(self, when: float) -> None:
        """Move time forward to `when`; moving backwards is a bug in the caller."""
        if when < self._now:
            raise ValueError(f"virtual time cannot go back from {self._now} to {when}")
        self._now = when
