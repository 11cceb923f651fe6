"""What the decision layer reads and writes: each region's signals and the policy's status.

`RegionSignals` is one interval of one region as the controller saw it: its own Prometheus
(which may not answer), its Route 53 health check, and what the other regions' probes say of
it. `FailoverStatus` is the FailoverPolicy's `status`: every region's phase, streaks and raised
floors, and the weights in force; it is everything a restarted controller needs to resume.
Neither does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from pydantic import Field

from radixfleet.wire import Wire
from radixfleet.wire import finite as finite  # the decision reads it from here


class HealthCheck(StrEnum):
    """A Route 53 health check's status, as its checkers report it."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    UNKNOWN = "Unknown"  # not read, or the checkers disagree too much to say


class Verdict(StrEnum):
    """One interval of one region. Unknown counts neither way (halt, don't fail)."""

    GOOD = "good"
    BAD = "bad"
    UNKNOWN = "unknown"


class Phase(StrEnum):
    """Where a region is. Only Healthy and Recovering regions are given traffic on purpose."""

    HEALTHY = "Healthy"
    EVACUATING = "Evacuating"  # judged unhealthy but still serving: moves once survivors are warm
    UNHEALTHY = "Unhealthy"  # weight 0 (unless every region is: then nothing moves)
    RECOVERING = "Recovering"  # getting its weight back, `failbackPercent` at a time


@dataclass(frozen=True)
class RegionSignals:
    """One region over the last interval. None means "not measured", never zero.

    `reachable` is False when the region's Prometheus did not answer: then only the health
    check and the peers' view are known. `ttft_bad_ratio` is the share of requests whose first
    token came later than the SLO. `ready_replicas` counts ready replicas per model.
    `peers_down`/`peers_up` count the other regions whose probes see this region's endpoint
    down or up.
    """

    reachable: bool = True
    availability: float | None = None
    error_rate: float | None = None
    ttft_bad_ratio: float | None = None
    requests: float | None = None
    ready_replicas: Mapping[str, int] | None = None
    health_check: HealthCheck = HealthCheck.UNKNOWN
    peers_down: int = 0
    peers_up: int = 0


BLIND = RegionSignals(reachable=False)


@dataclass(frozen=True)
class Observed:
    """Every region's signals (a missing region is blind) and the weights in the records.

    `weights` are the weighted records' current weights by region name; None when they could
    not be read.
    """

    signals: Mapping[str, RegionSignals] = field(default_factory=dict)
    weights: Mapping[str, int] | None = None

    def of(self, region: str) -> RegionSignals:
        return self.signals.get(region, BLIND)


class RegionStatus(Wire):
    """One region's place in the failover: phase, streaks, failback progress, floors.

    `steady_replicas` are the ready replicas per model last seen while every region was
    healthy: the fleet's normal size, which pre-scaling divides among the survivors.
    `raised_floors` are the floors this controller raised in the region (released once every
    region is healthy again).
    """

    name: str
    phase: Phase = Phase.HEALTHY
    since: datetime | None = None
    last_step_at: datetime | None = None
    bad_intervals: int = Field(default=0, ge=0)
    good_intervals: int = Field(default=0, ge=0)
    failback_percent: int = Field(default=100, ge=0, le=100)
    verdict: Verdict | None = None
    reason: str = ""
    steady_replicas: dict[str, int] = Field(default_factory=dict)
    raised_floors: dict[str, int] = Field(default_factory=dict)


class LastDecision(Wire):
    """The latest decision and why, as `kubectl describe` and the CLI show it."""

    reason: str
    at: datetime
    shifted: bool = False


class FailoverStatus(Wire):
    """A FailoverPolicy's status."""

    regions: tuple[RegionStatus, ...] = ()
    weights: dict[str, int] = Field(default_factory=dict)
    healthy_regions: int = Field(default=0, ge=0)
    observed_at: datetime | None = None
    last_decision: LastDecision | None = None

    def region(self, name: str) -> RegionStatus:
        """The status of region `name` (a fresh healthy one if it was never recorded)."""
        return next((r for r in self.regions if r.name == name), RegionStatus(name=name))
