"""Chaos in a failover: the failover controller dies in the middle of moving a region's traffic.

The world is tests/failover/test_local_fleet.py's: three regions of the local fleet, weighted
Route 53 records in moto's server (TTL 5 s), clients resolving the name as DNS clients do and
retrying a failed request once after its Retry-After. Region "us" stops serving; the controller
sees it, pre-scales the others, records the shift in its status, and dies before it writes the
weights (the worst moment: the status says "failed over", Route 53 does not). A new controller,
with nothing but the recorded status, must write the same weights, and no request may be lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from radixfleet.adapters.route53 import AwsRoute53, client
from radixfleet.controllers.canary.fakes import FakeEvents
from radixfleet.controllers.failover.controller import Controller
from radixfleet.controllers.failover.fakes import FakeFailoverPolicies
from radixfleet.controllers.failover.localfleet import LocalFleetFloors, LocalFleetObserver
from radixfleet.localfleet import LocalFleet
from tests.failover.aws import zone_with_weighted_records
from tests.failover.test_local_fleet import (
    CLIENTS,
    DOWN,
    RATE_RPS,
    REGIONS,
    TARGET_S,
    TTL_S,
    Resolver,
    Ticker,
    _client_request,
    _no_prometheus,
    aws,
    fleet,
)

__all__ = ["aws", "fleet"]  # the moto server and the three regions, as the failover tests run them

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

TRAFFIC_S = 28.0  # from the stop


class ControllerKilledError(Exception):
    """The controller's process died here (raised in place of its first weights write)."""


@dataclass
class DyingRoute53(AwsRoute53):
    """Route 53 through which the controller dies at its first weights write."""

    died: threading.Event = field(default_factory=threading.Event)

    def set_weights(
        self, zone_id: str, name: str, record_type: str, weights: Mapping[str, int]
    ) -> list[str]:
        if not self.died.is_set():
            self.died.set()
            raise ControllerKilledError("killed before writing the weights")
        return super().set_weights(zone_id, name, record_type, weights)


def failover(route53: AwsRoute53, store: FakeFailoverPolicies, fleet: LocalFleet) -> Controller:
    """A fresh controller process: all it shares with an earlier one is the policy's status."""
    return Controller(
        route53=route53, prometheus_for=_no_prometheus, policies=store, events=FakeEvents(),
        floors=LocalFleetFloors(fleet), observer=LocalFleetObserver(fleet, route53),
    )  # fmt: skip


def test_a_failover_controller_killed_before_writing_weights_is_replaced_and_loses_nothing(
    aws: str, fleet: LocalFleet
) -> None:
    zone = zone_with_weighted_records(aws, regions=REGIONS, model="m", ttl=TTL_S)
    route53 = AwsRoute53(client(endpoint_url=aws), sleep=time.sleep)
    dying = DyingRoute53(client(endpoint_url=aws), sleep=time.sleep)
    store = FakeFailoverPolicies()
    policy: dict[str, Any] = {
        "apiVersion": "radixfleet.io/v1alpha1", "kind": "FailoverPolicy",
        "metadata": {"name": "m", "namespace": "default"},
        "spec": {
            "hostedZoneId": zone.zone_id, "recordName": zone.name, "models": ["m"],
            "regions": [{"name": r} for r in REGIONS], "intervalSeconds": 5,
            "unhealthyAfter": 2, "healthyAfter": 3, "minHoldSeconds": 60,
        },
    }  # fmt: skip
    resolvers = [Resolver(route53, zone, seed) for seed in range(CLIENTS)]
    first = Ticker(failover(dying, store, fleet), policy)
    second = Ticker(failover(route53, store, fleet), policy)
    killed_at: float | None = None
    with first, ThreadPoolExecutor(max_workers=64) as pool:
        t0 = time.monotonic()
        futures, i = [], 0
        fleet.stop_region(DOWN)
        while time.monotonic() - t0 < TRAFFIC_S:
            if killed_at is None and dying.died.is_set():
                killed_at = time.monotonic() - t0
                first.__exit__()
                second.__enter__()
            futures.append(pool.submit(_client_request, fleet, resolvers[i % CLIENTS], i, t0))
            i += 1
            time.sleep(1.0 / RATE_RPS)
        outcomes = [f.result(timeout=60) for f in futures]
    second.__exit__()
    fleet.start_region(DOWN)
    assert killed_at is not None, "the controller never tried to move traffic"
    late = [o.sent_at for o in outcomes if o.first_region == DOWN]
    lost = [o for o in outcomes if not o.final_ok]
    last = max(late, default=0.0)
    print(f"\nkilled {killed_at:.1f} s after the stop; {len(outcomes)} requests, {len(lost)} lost;"
          f" last new request to {DOWN} {last:.1f} s after the stop")  # fmt: skip
    assert [type(e) for e in first.errors] == [ControllerKilledError]
    assert second.errors == []
    weights = {s: r.weight for s, r in route53.records(zone.zone_id, zone.name, "CNAME").items()}
    assert weights == {"us": 0, "eu": 100, "ap": 100}
    assert last < TARGET_S
    assert lost == []
