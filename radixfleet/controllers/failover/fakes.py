"""In-memory fakes of the failover's ports, for tests, the local fleet and the twin.

They keep every call they saw and can be told to fail the next one. `FakeRoute53` plays the
weighted records (by set identifier) and their health checks; `FakeFloors` keeps the floors the
controller raised; `FakeFailoverPolicies` keeps every status written.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from radixfleet.adapters.route53 import HealthStatus, Route53Error, WeightedRecord, changes_for
from radixfleet.kit.errors import KubeError


@dataclass
class FakeRoute53:
    """Weighted records by set identifier and health checks by id."""

    weights: dict[str, int] = field(default_factory=dict)
    healthy: dict[str, bool | None] = field(default_factory=dict)  # set id -> check status
    writes: list[dict[str, int]] = field(default_factory=list)
    next_error: Route53Error | None = None

    def records(self, zone_id: str, name: str, record_type: str) -> dict[str, WeightedRecord]:
        self._maybe_fail()
        return {
            sid: WeightedRecord(sid, w, f"hc-{sid}", {"Name": name, "SetIdentifier": sid})
            for sid, w in self.weights.items()
        }

    def health(self, health_check_id: str) -> HealthStatus:
        healthy = self.healthy.get(health_check_id.removeprefix("hc-"), True)
        return HealthStatus(healthy=healthy, checkers=8, healthy_checkers=8 if healthy else 0)

    def set_weights(
        self, zone_id: str, name: str, record_type: str, weights: Mapping[str, int]
    ) -> list[str]:
        self._maybe_fail()
        changes = changes_for(self.records(zone_id, name, record_type), weights)
        changed = [c["ResourceRecordSet"]["SetIdentifier"] for c in changes]
        self.weights.update({sid: weights[sid] for sid in changed})
        if changed:
            self.writes.append({sid: weights[sid] for sid in changed})
        return changed

    def _maybe_fail(self) -> None:
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error


@dataclass
class FakeFailoverPolicies:
    """Keeps each status written; `items` are the policies `get` finds, by (namespace, name)."""

    statuses: list[dict[str, Any]] = field(default_factory=list)
    next_error: KubeError | None = None
    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.items.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
        self.statuses.append(copy.deepcopy(status))


@dataclass
class FakeFloors:
    """Floors by (region, model), and the calls in order."""

    floors: dict[tuple[str, str], int] = field(default_factory=dict)
    calls: list[tuple[str, str, str, int | None]] = field(default_factory=list)
    next_error: KubeError | None = None

    def raise_floor(self, region: str, model: str, replicas: int) -> None:
        self.calls.append(("raise", region, model, replicas))
        self._maybe_fail()
        self.floors[(region, model)] = max(replicas, self.floors.get((region, model), 0))

    def release_floor(self, region: str, model: str) -> None:
        self.calls.append(("release", region, model, None))
        self._maybe_fail()
        self.floors.pop((region, model), None)

    def _maybe_fail(self) -> None:
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error
