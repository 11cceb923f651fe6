"""The failover's act layer on fakes: order of actions, status, Events, re-checks, errors.

Prometheus answers come from the same PromQL the controller sends (`region_queries`), so a
changed query shows up here as missing data, not as a silently passing test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
import pytest

from radixfleet.adapters.prometheus import MetricsUnavailable, Prometheus, Sample
from radixfleet.adapters.prometheus_fake import FakePrometheus
from radixfleet.adapters.route53 import Route53Error
from radixfleet.controllers.canary.fakes import FakeEvents
from radixfleet.controllers.failover.controller import Controller, run_tick, status_of
from radixfleet.controllers.failover.fakes import FakeFailoverPolicies, FakeFloors, FakeRoute53
from radixfleet.controllers.failover.queries import QueryConfig, region_queries
from radixfleet.controllers.failover.spec import FailoverPolicySpec, Region
from radixfleet.controllers.failover.state import Phase
from radixfleet.kit.errors import KubeError

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
REGIONS = ("us", "eu", "ap")
SPEC: dict[str, Any] = {
    "hostedZoneId": "Z1",
    "recordName": "llama.example.com",
    "models": ["llama"],
    "regions": [{"name": "us", "setIdentifier": "us-east-1"}, {"name": "eu"}, {"name": "ap"}],
    "unhealthyAfter": 2,
    "healthyAfter": 2,
    "minHoldSeconds": 30,
    "failback": {"stepPercent": 100, "stepSeconds": 0},
}


class Unreachable(FakePrometheus):
    """A Prometheus that never answers."""

    def vector(self, promql: str, *, at: datetime | None = None) -> list[Sample]:
        raise MetricsUnavailable("connection refused", query=promql)


def answers(*, up: float, ready: int, errors: float = 0.0) -> dict[str, Any]:
    spec = FailoverPolicySpec.model_validate(SPEC)
    q = region_queries(
        namespaces=["fleet"], models=spec.models, window_seconds=spec.signals.window_seconds,
        slo_seconds=spec.signals.ttft_slo_seconds, config=QueryConfig(),
    )  # fmt: skip
    return {
        q.availability: up,
        q.error_rate: errors,
        q.ttft_bad_ratio: 0.0,
        q.requests: 100.0,
        q.ready_by_model: [Sample({"model": "llama"}, float(ready))],
    }


class World:
    """Fakes for every port, and a policy object as kopf hands it over."""

    def __init__(self) -> None:
        self.route53 = FakeRoute53(weights={"us-east-1": 100, "eu": 100, "ap": 100})
        self.proms: dict[str, Prometheus] = {
            r: FakePrometheus(answers(up=1.0, ready=2)) for r in REGIONS
        }
        self.policies = FakeFailoverPolicies()
        self.events = FakeEvents()
        self.floors = FakeFloors()
        self.controller = Controller(
            route53=self.route53, prometheus_for=self._prometheus, policies=self.policies,
            events=self.events, floors=self.floors,
        )  # fmt: skip
        self.policy: dict[str, Any] = {
            "apiVersion": "radixfleet.io/v1alpha1", "kind": "FailoverPolicy",
            "metadata": {"name": "llama", "namespace": "fleet"}, "spec": SPEC,
        }  # fmt: skip
        self.now = T0

    def _prometheus(self, region: Region) -> Prometheus:
        return self.proms[region.name]

    def tick(self, seconds: int = 10) -> Any:
        decision = self.controller.reconcile(self.policy, now=self.now)
        if self.policies.statuses:
            self.policy["status"] = self.policies.statuses[-1]
        self.now += timedelta(seconds=seconds)
        return decision

    def kill(self, region: str) -> None:
        self.proms[region] = FakePrometheus(answers(up=0.0, ready=0))
        self.route53.healthy[region if region != "us" else "us-east-1"] = False


def test_a_dead_region_is_floored_around_then_weighted_out() -> None:
    world = World()
    world.tick()
    world.kill("us")
    world.tick()
    world.tick()
    assert world.route53.weights == {"us-east-1": 0, "eu": 100, "ap": 100}
    assert world.floors.calls == [("raise", "eu", "llama", 4), ("raise", "ap", "llama", 4)]
    status = status_of(world.policy)
    assert status is not None and status.region("us").phase is Phase.UNHEALTHY
    assert world.policy["status"]["weights"] == {"us": 0, "eu": 100, "ap": 100}
    reasons = [e.reason for e in world.events.calls]
    assert reasons == ["RegionUnhealthy", "PreScaled", "WeightsSet"]
    assert world.events.calls[0].warning
    # The series the Regions dashboard reads.
    sample = world.controller.metrics.registry.get_sample_value
    assert sample("radixfleet_region_weight", {"region": "us", "model_name": "llama"}) == 0
    assert sample("radixfleet_region_weight", {"region": "eu", "model_name": "llama"}) == 100
    assert sample("radixfleet_region_healthy", {"region": "us"}) == 0
    assert sample("radixfleet_failover_events_total", {"region": "us", "direction": "out"}) == 1


def test_failback_after_the_hold_and_floors_released() -> None:
    world = World()
    world.tick()
    world.kill("us")
    world.tick()
    world.tick()
    world.proms["us"] = FakePrometheus(answers(up=1.0, ready=3))  # its floor: ceil(6/3 x 1.2)
    world.route53.healthy["us-east-1"] = True
    for _ in range(6):
        world.tick()
    assert world.route53.weights == {"us-east-1": 100, "eu": 100, "ap": 100}
    released = [c for c in world.floors.calls if c[0] == "release"]
    assert {c[1] for c in released} == {"eu", "ap", "us"}
    assert world.floors.floors == {}


def test_ticks_inside_an_interval_do_nothing() -> None:
    world = World()
    world.tick(seconds=3)
    assert world.tick(seconds=3) is None
    assert len(world.policies.statuses) == 1


def test_a_blind_region_stays_in_while_its_health_check_is_healthy() -> None:
    world = World()
    world.proms["us"] = Unreachable()
    for _ in range(5):
        world.tick()
    assert world.route53.weights["us-east-1"] == 100
    assert world.policy["status"]["regions"][0]["verdict"] == "unknown"


def test_the_shift_is_deferred_when_a_gaining_region_now_fails_its_check() -> None:
    world = World()
    world.tick()
    world.kill("us")
    world.tick()

    # eu's health check fails, though its Prometheus looks fine: no weight goes to it.
    regions = [{"name": "us", "setIdentifier": "us-east-1", "weight": 100},
               {"name": "eu", "weight": 200}, {"name": "ap"}]  # fmt: skip
    world.policy["spec"] = {**SPEC, "regions": regions}
    world.route53.healthy["eu"] = False
    world.tick()
    assert world.route53.weights == {"us-east-1": 100, "eu": 100, "ap": 100}
    assert world.events.calls[-1].reason in ("ShiftDeferred", "WeightsSet")
    assert any(e.reason == "ShiftDeferred" for e in world.events.calls)


def test_a_floor_that_cannot_be_raised_does_not_hold_the_shift() -> None:
    world = World()
    world.tick()
    world.kill("us")
    world.floors.next_error = KubeError("forbidden", status=403)
    world.tick()
    world.tick()
    assert world.route53.weights["us-east-1"] == 0
    assert any(e.reason == "FloorFailed" and e.warning for e in world.events.calls)


def test_route53_unreadable_keeps_the_records_as_they_are() -> None:
    world = World()
    world.tick()
    world.route53.next_error = Route53Error("throttled", code="Throttling", status=400)
    world.tick()
    assert world.route53.writes == []


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (Route53Error("throttled", code="Throttling", status=400), kopf.TemporaryError),
        (Route53Error("denied", code="AccessDenied", status=403), kopf.PermanentError),
        # One 409 rule for every controller (radixfleet.kit.errors): re-read and retry.
        (KubeError("conflict storm", status=409), kopf.TemporaryError),
        (KubeError("forbidden", status=403), kopf.PermanentError),
        (KubeError("apiserver down", status=503), kopf.TemporaryError),
    ],
    ids=["throttled", "denied", "kube-conflict-retries", "kube-permanent", "kube-temporary"],
)
def test_errors_become_kopfs_retry_vocabulary(error: Exception, kind: type[Exception]) -> None:
    world = World()
    if isinstance(error, KubeError):
        world.policies.next_error = error
    else:

        class Failing(FakeRoute53):
            def set_weights(self, *args: Any, **kwargs: Any) -> list[str]:
                raise error

        # A record moved by hand: the decision puts it back, and the write fails.
        world.controller.route53 = Failing(weights={"us-east-1": 100, "eu": 7, "ap": 100})
    with pytest.raises(kind):
        run_tick(world.controller, world.policy, now=world.now)


def test_an_invalid_spec_is_permanent() -> None:
    world = World()
    world.policy["spec"] = {**SPEC, "regions": [{"name": "only-one"}]}
    with pytest.raises(kopf.PermanentError):
        run_tick(world.controller, world.policy, now=world.now)
