"""Traffic baselines: every client to its own region, and Route 53 health-check failover.

:class:`Route53` follows AWS's documented defaults (CALIBRATION.md): each region's endpoint is
checked every 30 s and marked unhealthy after 3 failed checks in a row (healthy again after 3
good ones); weighted records send each region's clients to its own region while it is healthy
and otherwise spread them over the healthy regions by their traffic shares; when no record is
healthy Route 53 answers with all of them. Clients keep a cached answer up to the 60 s TTL.
"""

from __future__ import annotations

from collections.abc import Sequence

from radixfleet.twin.interfaces import FleetObservation, TrafficDecision, uniform_weights
from radixfleet.twin.scenario import Scenario


class Static:
    """No steering: each region's clients always go to their own region."""

    interval_s = 10.0
    ttl_s = 60.0

    def __init__(self, regions: Sequence[str]) -> None:
        self._weights = uniform_weights(regions)

    def decide(self, observed: FleetObservation, now: float) -> TrafficDecision:
        """The identity matrix, whatever happens."""
        return TrafficDecision(self._weights)


class Route53:
    """Route 53 weighted records with health checks (interval x threshold, then the TTL)."""

    ttl_s = 60.0

    def __init__(self, scenario: Scenario, *, interval_s: float = 30.0, threshold: int = 3) -> None:
        self.interval_s = interval_s
        self.threshold = threshold
        self._shares = {r.name: r.traffic_share for r in scenario.regions}
        self._healthy = {name: True for name in self._shares}
        self._streak = {name: 0 for name in self._shares}

    def decide(self, observed: FleetObservation, now: float) -> TrafficDecision:
        """One round of health checks, then the weights they imply."""
        for region in observed.regions:
            self._check(region.name, up=region.endpoint_up)
        return TrafficDecision(self._weights())

    def _check(self, name: str, *, up: bool) -> None:
        # A streak counts checks that disagree with the current status; `threshold` flips it.
        if up == self._healthy[name]:
            self._streak[name] = 0
            return
        self._streak[name] += 1
        if self._streak[name] >= self.threshold:
            self._healthy[name] = up
            self._streak[name] = 0

    def _weights(self) -> dict[str, dict[str, float]]:
        healthy = [name for name, ok in self._healthy.items() if ok] or list(self._healthy)
        spread = {name: (self._shares[name] if name in healthy else 0.0) for name in self._shares}
        return {home: ({home: 1.0} if home in healthy else spread) for home in self._shares}
