"""The failover reads every region's serving signals through that region's entry, on the local
fleet, and takes a slow region out on them.

As in a deployed fleet (`radixfleet/dataplane/signals.py`): each region has its own Prometheus
(Debian's, scraping only that region's replicas), reachable from outside only through the
region's entry with the fleet token. The controller is the one the operator runs, with its
Prometheus clients built by `prometheus_per_region`; Route 53, the policy store, the events and
the floors are the failover's in-memory fakes (Route 53's control plane cannot run here; moto's
server is what tests/failover/test_local_fleet.py uses for the records themselves).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from radixfleet.controllers.canary.fakes import FakeEvents
from radixfleet.controllers.failover.controller import Controller, prometheus_per_region
from radixfleet.controllers.failover.decide import judge
from radixfleet.controllers.failover.fakes import FakeFailoverPolicies, FakeFloors, FakeRoute53
from radixfleet.controllers.failover.spec import FailoverPolicySpec
from radixfleet.controllers.failover.state import Verdict
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.localfleet.procs import processes_with_marker

pytestmark = [pytest.mark.fleet, pytest.mark.prometheus]

REPLICAS = {"us": 2, "eu": 1}
SLOW = "eu"
REQUESTS_PER_REGION = 12
INTERVAL_S = 5
POLICY_NAMESPACE = "radixfleet-system"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Where tests/localfleet builds the emulator's tokenizer: built once per session.
    return tmp_path_factory.getbasetemp() / "tokenizer-cache"


@pytest.fixture(scope="module")
def fleet(cache_dir: Path) -> Iterator[LocalFleet]:
    regions = [RegionSpec(name=r, models=[ModelSpec(name="m", replicas=n)])
               for r, n in REPLICAS.items()]  # fmt: skip
    local = LocalFleet(LocalFleetSpec(regions=regions, cold_start_s=1.0), cache_dir=cache_dir)
    with local:
        for region in REPLICAS:
            assert local.start_region_prometheus(region) is not None, "Debian's prometheus"
        yield local
    assert processes_with_marker(local.fleet_id) == [], "processes outlived the fleet"


def _policy(fleet: LocalFleet) -> dict[str, Any]:
    regions = [{"name": r, "prometheusUrl": fleet.signals_url(r)} for r in REPLICAS]
    return {
        "apiVersion": "radixfleet.io/v1alpha1", "kind": "FailoverPolicy",
        # As infra declares it: in the operator's namespace, reading the tenants' namespaces.
        "metadata": {"name": "m", "namespace": POLICY_NAMESPACE},
        "spec": {
            "hostedZoneId": "Z1", "recordName": "m.example.com", "models": ["m"],
            "namespaces": ["default"],
            "regions": regions, "intervalSeconds": INTERVAL_S, "unhealthyAfter": 2,
            "signals": {"ttftSloSeconds": 1.0, "minRequests": 5, "windowSeconds": 60},
            "prescale": {"enabled": False},  # a slow region goes out on its second bad interval
        },
    }  # fmt: skip


def _controller(token: str, route53: FakeRoute53) -> Controller:
    return Controller(
        route53=route53, prometheus_for=prometheus_per_region("", token=token),
        policies=FakeFailoverPolicies(), events=FakeEvents(), floors=FakeFloors(),
    )  # fmt: skip


def _ask(fleet: LocalFleet, region: str, i: int) -> int:
    body = {"model": "m", "prompt": f"Request {i}: say hello", "max_tokens": 2}
    url = fleet.entry_url(region) + "/v1/completions"
    return requests.post(url, json=body, timeout=60).status_code


def _traffic(fleet: LocalFleet) -> None:
    with ThreadPoolExecutor(max_workers=2 * REQUESTS_PER_REGION) as pool:
        asked = [
            pool.submit(_ask, fleet, r, i) for r in REPLICAS for i in range(REQUESTS_PER_REGION)
        ]
        assert [f.result() for f in asked] == [200] * len(asked)


def _observed_requests(controller: Controller, spec: FailoverPolicySpec, region: str) -> float:
    signals = controller.observe(spec, POLICY_NAMESPACE, datetime.now(UTC)).signals[region]
    return signals.requests or 0.0


def test_a_slow_region_seen_through_its_entry_loses_its_traffic(fleet: LocalFleet) -> None:
    fleet.set_faults(SLOW, "m", slowdown=100.0)  # every first token well past the 1 s SLO
    _traffic(fleet)
    route53 = FakeRoute53(weights={r: 100 for r in REPLICAS})
    controller = _controller(fleet.fleet_token, route53)
    policy = _policy(fleet)
    spec = FailoverPolicySpec.model_validate(policy["spec"])
    deadline = time.monotonic() + 60  # each Prometheus scrapes every second; CI may be busy
    while min(_observed_requests(controller, spec, r) for r in REPLICAS) < REQUESTS_PER_REGION:
        assert time.monotonic() < deadline, "the requests never showed in the regions' metrics"
        time.sleep(1.0)

    observed = controller.observe(spec, POLICY_NAMESPACE, datetime.now(UTC))
    for region, replicas in REPLICAS.items():  # each region's own Prometheus, not a shared one
        signals = observed.signals[region]
        assert signals.reachable and signals.availability == 1.0
        assert signals.ready_replicas == {"m": replicas}
    assert judge(observed.signals["us"], spec).verdict is Verdict.GOOD
    slow = judge(observed.signals[SLOW], spec)
    assert slow.verdict is Verdict.BAD and "TTFT" in " ".join(slow.reasons)

    for _ in range(2):  # unhealthyAfter intervals
        decision = controller.reconcile(policy, now=datetime.now(UTC))
        assert decision is not None
        policy["status"] = controller.policies.statuses[-1]  # type: ignore[attr-defined]
        time.sleep(INTERVAL_S)
    assert route53.weights == {"us": 100, SLOW: 0}


def test_without_the_fleet_token_every_region_is_blind_and_nothing_moves(
    fleet: LocalFleet,
) -> None:
    route53 = FakeRoute53(weights={r: 100 for r in REPLICAS})
    controller = _controller("not-the-fleet-token", route53)
    policy = _policy(fleet)
    decision = controller.reconcile(policy, now=datetime.now(UTC))
    assert decision is not None
    spec = FailoverPolicySpec.model_validate(policy["spec"])
    observed = controller.observe(spec, POLICY_NAMESPACE, datetime.now(UTC))
    assert not any(s.reachable for s in observed.signals.values())
    assert route53.writes == []
