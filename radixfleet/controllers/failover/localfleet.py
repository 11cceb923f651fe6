"""The failover controller on the local fleet: floors through its scalers, eyes on its entries.

- `LocalFleetFloors`: the `Floors` port on a `LocalFleet` (raising a floor scales the model up to it
  at once; releasing gives the model back its spec's replica count).
- `LocalFleetObserver`: what the controller sees of the local fleet, each interval: every region's
  entry probed over HTTP, standing for the blackbox probes the other regions' Prometheus run
  against it (one probe from this machine is every peer's view: they share the loopback), the
  ready replicas of each model, and the weights and health checks from Route 53 (moto's server
  in tests). The entries carry no SGLang traffic metrics of their own, so those stay unjudged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import requests

from radixfleet.adapters.route53 import WeightedRecords
from radixfleet.controllers.failover.observe import health_checks, read_records
from radixfleet.controllers.failover.spec import FailoverPolicySpec
from radixfleet.controllers.failover.state import HealthCheck, Observed, RegionSignals
from radixfleet.localfleet import LocalFleet

PROBE_TIMEOUT_S = 1.0


@dataclass
class LocalFleetFloors:
    """Floors as replica counts of the local fleet's models."""

    fleet: LocalFleet
    raised: dict[tuple[str, str], int] = field(default_factory=dict)

    def raise_floor(self, region: str, model: str, replicas: int) -> None:
        desired = self._desired(region, model)
        self.raised[(region, model)] = max(replicas, self.raised.get((region, model), 0))
        if replicas > desired:
            self.fleet.scale(region, model, replicas, wait=False)

    def release_floor(self, region: str, model: str) -> None:
        if self.raised.pop((region, model), None) is not None:
            initial = self.fleet.spec.region(region).model(model).replicas
            self.fleet.scale(region, model, initial, wait=False)

    def _desired(self, region: str, model: str) -> int:
        scaler = self.fleet.scaler(region, model)

        async def read() -> int:
            return scaler.desired()

        return self.fleet.run(read())


@dataclass
class LocalFleetObserver:
    """An `Observer` for `Controller`: the local fleet's entries, replicas and Route 53."""

    fleet: LocalFleet
    route53: WeightedRecords
    session: requests.Session = field(default_factory=requests.Session)

    def __call__(self, spec: FailoverPolicySpec, namespace: str, now: datetime) -> Observed:
        records = read_records(self.route53, spec)
        checks = health_checks(self.route53, records)
        up = {r.name: self._probe(r.name) for r in spec.regions}
        signals = {
            r.name: self._signals(spec, r.name, up, checks.get(r.name, HealthCheck.UNKNOWN))
            for r in spec.regions
        }
        return Observed(signals=signals, weights=records.weights())

    def _signals(
        self, spec: FailoverPolicySpec, region: str, up: dict[str, bool], check: HealthCheck
    ) -> RegionSignals:
        peers = len(up) - 1
        ready = {m: self.fleet.ready_count(region, m) for m in spec.models}
        return RegionSignals(
            ready_replicas=ready,
            health_check=check,
            peers_up=peers if up[region] else 0,
            peers_down=0 if up[region] else peers,
        )

    def _probe(self, region: str) -> bool:
        try:
            answer = self.session.get(
                self.fleet.entry_url(region) + "/health", timeout=PROBE_TIMEOUT_S
            )
        except requests.RequestException:
            return False
        return answer.status_code == 200
