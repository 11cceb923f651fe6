"""The failover policy in the fleet twin: the controller's own `decide`, in virtual time.

`radixfleet` (a twin traffic-policy factory, named in a scenario as
`radixfleet.controllers.failover.twin:radixfleet`) turns each epoch's `RegionObservation`s into the
signals the controller would read, calls `radixfleet.controllers.failover.decide.decide` exactly as
the controller does, and hands the twin the weights and the raised floors. What the twin stands in
for:

- a region's own Prometheus: its error and TTFT ratios over the epoch. A region that is down
  is blind (its Prometheus went with it, the worst case), so it is judged by the others' view:
  every region that is up probes it (blackbox), and by its Route 53 health check;
- the Route 53 health check: the baseline's checker (30 s x 3) run alongside;
- the weighted record: while a client's own region has its full weight the client stays home
  (as with latency records); otherwise it spreads over the regions by the records' weights.

`route53_fast` is the baseline at Route 53's fast settings (10 s x 3) with a 10 s TTL, so that
the comparison at the same TTL is in the same run.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from radixfleet.controllers.failover.decide import decide
from radixfleet.controllers.failover.spec import FailoverPolicySpec
from radixfleet.controllers.failover.state import (
    FailoverStatus,
    HealthCheck,
    Observed,
    RegionSignals,
)
from radixfleet.twin.interfaces import FleetObservation, RegionObservation, TrafficDecision
from radixfleet.twin.registry import PolicyContext
from radixfleet.twin.traffic import Route53

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
TTL_S = 10.0  # the goal's record TTL


def at(seconds: float) -> datetime:
    """Virtual seconds as the datetime `decide` expects."""
    return EPOCH + timedelta(seconds=seconds)


def default_spec(regions: list[str], models: list[str]) -> FailoverPolicySpec:
    """The CRD's defaults for a scenario's regions and models."""
    return FailoverPolicySpec.model_validate(
        {
            "hostedZoneId": "ZTWIN",
            "recordName": "model.twin.example",
            "models": models,
            "regions": [{"name": name} for name in regions],
        }
    )


class RadixfleetFailover:
    """The failover controller over the twin's observations."""

    def __init__(self, spec: FailoverPolicySpec, *, ttl_s: float = TTL_S) -> None:
        self.spec = spec
        self.interval_s = float(spec.interval_seconds)
        self.ttl_s = ttl_s
        self.status: FailoverStatus | None = None
        self.weights = {r.name: r.weight for r in spec.regions}
        self.checker = _HealthChecker(spec.region_names)

    def decide(self, observed: FleetObservation, now: float) -> TrafficDecision:
        """One interval of the controller."""
        checks = self.checker.check(observed, now)
        signals = {r.name: self._signals(r, observed, checks[r.name]) for r in observed.regions}
        decision = decide(Observed(signals, dict(self.weights)), self.spec, self.status, at(now))
        self.status = decision.status
        if decision.weights is not None:
            self.weights = dict(decision.weights)
        return TrafficDecision(self._matrix(), self._floors())

    def _signals(
        self, region: RegionObservation, fleet: FleetObservation, check: HealthCheck
    ) -> RegionSignals:
        peers = sum(1 for r in fleet.regions if r.name != region.name and r.endpoint_up)
        if not region.endpoint_up:
            return RegionSignals(reachable=False, health_check=check, peers_down=peers)
        requests = region.requests
        return RegionSignals(
            availability=1.0,
            error_rate=region.failed / requests if requests else None,
            ttft_bad_ratio=1.0 - region.ttft_ok / requests if requests else None,
            requests=float(requests),
            # The twin counts replicas over all models; one model per scenario keeps it exact.
            ready_replicas=dict.fromkeys(self.spec.models, region.ready_replicas),
            health_check=check,
            peers_up=peers,
        )

    def _matrix(self) -> dict[str, dict[str, float]]:
        total = sum(self.weights.values())
        spread = {n: w / total for n, w in self.weights.items()} if total else {}
        out = {}
        for region in self.spec.regions:
            mine = self.weights.get(region.name, 0)
            full = region.weight > 0 and mine >= region.weight
            out[region.name] = {region.name: 1.0} if full else dict(spread)
        return out

    def _floors(self) -> dict[tuple[str, str], int]:
        if self.status is None:
            return {}
        return {
            (r.name, model): floor
            for r in self.status.regions
            for model, floor in r.raised_floors.items()
        }


class _HealthChecker:
    """Route 53's checker (30 s x 3) as the baseline plays it, read as a status."""

    def __init__(self, regions: list[str], *, interval_s: float = 30.0, threshold: int = 3):
        self.route53 = _Checks(regions, interval_s=interval_s, threshold=threshold)
        self.next_at = 0.0

    def check(self, observed: FleetObservation, now: float) -> dict[str, HealthCheck]:
        if now >= self.next_at:
            for region in observed.regions:
                self.route53.check(region.name, up=region.endpoint_up)
            self.next_at = now + self.route53.interval_s
        return {
            name: HealthCheck.HEALTHY if ok else HealthCheck.UNHEALTHY
            for name, ok in self.route53.healthy.items()
        }


class _Checks:
    """Streaks of disagreeing checks flip a status after `threshold` (Route 53's rule)."""

    def __init__(self, regions: list[str], *, interval_s: float, threshold: int) -> None:
        self.interval_s, self.threshold = interval_s, threshold
        self.healthy = dict.fromkeys(regions, True)
        self.streak = dict.fromkeys(regions, 0)

    def check(self, name: str, *, up: bool) -> None:
        if up == self.healthy[name]:
            self.streak[name] = 0
            return
        self.streak[name] += 1
        if self.streak[name] >= self.threshold:
            self.healthy[name], self.streak[name] = up, 0


def radixfleet(ctx: PolicyContext) -> RadixfleetFailover:
    """Twin factory: the controller with the CRD's defaults and a 10 s record TTL."""
    regions, models = ctx.scenario.regions, ctx.scenario.models
    spec = default_spec([r.name for r in regions], [m.name for m in models])
    return RadixfleetFailover(spec)


def route53_fast(ctx: PolicyContext) -> Any:
    """Twin factory: Route 53 health-check failover at 10 s x 3 with a 10 s TTL."""
    baseline = Route53(ctx.scenario, interval_s=10.0, threshold=3)
    baseline.ttl_s = TTL_S
    return baseline
