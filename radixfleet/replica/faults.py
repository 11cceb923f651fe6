"""Faults a replica can be told to show: for canary, failover and reliability work.

A crash drops every request and the cache and needs a restart (with a cold start); a hang
freezes the replica (requests and health checks stall); a slow-down multiplies every step
time; an error rate fails that share of new requests with a 500.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Beyond this a slowed replica is a hung one: say so with `hung` (a step of 1e308 times its
# length never ends, while /health would keep answering).
MAX_SLOWDOWN = 1000.0


@dataclass(frozen=True, slots=True)
class Faults:
    """The faults in force; the default is a healthy replica."""

    hung: bool = False
    slowdown: float = 1.0
    error_rate: float = 0.0

    def __post_init__(self) -> None:
        if not (self.slowdown > 0 and math.isfinite(self.slowdown)):
            raise ValueError(f"slowdown must be positive and finite, got {self.slowdown}")
        if self.slowdown > MAX_SLOWDOWN:
            raise ValueError(f"slowdown must be at most {MAX_SLOWDOWN:g} (use hung), got "
                             f"{self.slowdown}")  # fmt: skip
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"error_rate must be within [0, 1], got {self.error_rate}")


HEALTHY = Faults()
