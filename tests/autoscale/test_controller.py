"""The autoscaler's act layer on recording fakes: what it writes, in which order, and when not.

Knative is played by `FakeRevisions` (annotations land on the Revision; `settle` makes the pods
follow), Prometheus by `FakePrometheus` answering the exact PromQL of
radixfleet/controllers/autoscale/queries.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
import pytest

from radixfleet import labels
from radixfleet.adapters.prometheus import MetricsUnavailable, Sample
from radixfleet.adapters.prometheus_fake import FakePrometheus
from radixfleet.controllers.autoscale.controller import Controller, run_tick
from radixfleet.controllers.autoscale.fakes import (
    FakeAutoscalePolicies,
    FakeInferenceServices,
    FakePods,
    FakeRevisions,
    FakeWaker,
)
from radixfleet.controllers.autoscale.knative import DELETION_COST, MAX_SCALE, MIN_SCALE
from radixfleet.controllers.autoscale.queries import QueryConfig, model_queries, pod_queries
from radixfleet.controllers.autoscale.state import Verb, status_of
from radixfleet.controllers.canary.fakes import FakeEvents
from radixfleet.kit.errors import KubeError

NS, ISVC, REV = "team-search", "llama", "llama-predictor-00001"
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def isvc(revision: str = REV, max_replicas: int = 8) -> dict[str, Any]:
    predictor = {"latestReadyRevision": revision, "latestRolledoutRevision": revision,
                 "traffic": [{"revisionName": revision, "percent": 100}]}  # fmt: skip
    return {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": ISVC, "namespace": NS},
        "spec": {"predictor": {"minReplicas": 0, "maxReplicas": max_replicas}},
        "status": {"components": {"predictor": predictor}},
    }  # fmt: skip


def revision(name: str = REV, ready: int = 2, bounds: tuple[int, int] | None = None) -> Any:
    annotations = {} if bounds is None else {MIN_SCALE: str(bounds[0]), MAX_SCALE: str(bounds[1])}
    return {
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "status": {"actualReplicas": ready, "desiredReplicas": ready},
    }


def policy(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "radixfleet.io/v1alpha1", "kind": "AutoscalePolicy",
        "metadata": {"name": ISVC, "namespace": NS},
        "spec": {"inferenceService": ISVC, **spec},
    }  # fmt: skip


def answers(
    pods: dict[str, dict[str, float]], *, rate: float = 5.0, namespace: str = NS
) -> dict[str, Any]:
    """Prometheus' answers: per pod gauges (running, queued, kv_usage, cached_tokens_rate)."""
    config = QueryConfig()
    per_pod = pod_queries(namespace=namespace, revision=REV, config=config)
    out: dict[str, Any] = {
        query: [
            Sample({"pod": pod}, gauges[field]) for pod, gauges in pods.items() if field in gauges
        ]
        for field, query in per_pod.items()
    }
    out[model_queries(namespace=namespace, revision=REV, config=config)["arrival_rate"]] = rate
    return out


def gauges(kv: float, cached: float = 0.0, running: float = 10.0) -> dict[str, float]:
    return {"running": running, "queued": 0.0, "kv_usage": kv, "cached_tokens_rate": cached}


class World:
    """A controller on fakes, with the cluster as the test sets it up."""

    def __init__(self, ready: int = 2, bounds: tuple[int, int] | None = (2, 2)) -> None:
        self.isvcs = FakeInferenceServices()
        self.revisions = FakeRevisions()
        self.pods = FakePods()
        self.policies = FakeAutoscalePolicies()
        self.events = FakeEvents()
        self.prometheus = FakePrometheus()
        self.waker = FakeWaker()
        self.isvcs.add(isvc())
        self.revisions.add(revision(ready=ready, bounds=bounds))
        for i in range(ready):
            self.pods.add(NS, f"pod-{i}", REV)
        self.controller = Controller(
            isvcs=self.isvcs, revisions=self.revisions, pods=self.pods, policies=self.policies,
            events=self.events, prometheus=self.prometheus, waker=self.waker,
        )  # fmt: skip

    def tick(self, at: datetime, *, generation: int | None = None, **spec: Any) -> Any:
        body = policy(**spec)
        if generation is not None:
            body["metadata"]["generation"] = generation
        body["status"] = self.policies.items.get((NS, ISVC), {}).get("status")
        self.policies.items.setdefault((NS, ISVC), body)
        return self.controller.reconcile_policy(body, now=at)


def test_scale_up_writes_status_then_bounds_on_the_revision() -> None:
    world = World()
    world.prometheus.answers = answers({"pod-0": gauges(0.95), "pod-1": gauges(0.95)})
    decision = world.tick(T0)
    assert (decision.verb, decision.desired) == (Verb.SCALE_UP, 3)
    (call,) = world.revisions.calls
    assert call.annotations == {MIN_SCALE: "3", MAX_SCALE: "3"}
    assert world.policies.status_writes[-1]["desired"] == 3
    assert [e.reason for e in world.events.calls] == ["AutoscaleUp"]


def test_the_status_says_which_generation_of_the_policy_it_decided_on() -> None:
    """Kubernetes' convention (kstatus, Argo CD): a status is current for the spec only when
    its observedGeneration equals metadata.generation."""
    world = World()
    world.prometheus.answers = answers({"pod-0": gauges(0.5), "pod-1": gauges(0.5)})
    world.tick(T0, generation=3)
    assert world.policies.status_writes[-1]["observedGeneration"] == 3
    world.tick(T0 + timedelta(minutes=1), generation=4)
    assert world.policies.status_writes[-1]["observedGeneration"] == 4


def test_an_unchanged_decision_writes_nothing_to_the_revision() -> None:
    world = World()
    world.prometheus.answers = answers({"pod-0": gauges(0.7), "pod-1": gauges(0.7)})
    for k in range(3):
        assert world.tick(T0 + timedelta(seconds=10 * k)).verb is Verb.HOLD
    assert world.revisions.calls == []
    assert len(world.policies.status_writes) == 3  # the windows move on
    assert world.events.calls == []


def test_not_due_does_nothing() -> None:
    world = World()
    world.prometheus.answers = answers({"pod-0": gauges(0.7), "pod-1": gauges(0.7)})
    world.tick(T0)
    assert world.tick(T0 + timedelta(seconds=3)) is None
    assert len(world.policies.status_writes) == 1


def test_scale_down_orders_the_drain_before_lowering_the_count() -> None:
    world = World(ready=3, bounds=(3, 3))
    world.prometheus.answers = answers(
        {
            "pod-0": gauges(0.05, cached=900.0),
            "pod-1": gauges(0.05, cached=3.0),
            "pod-2": gauges(0.05, cached=400.0),
        }
    )
    costs_when_scaled: list[dict[str, str]] = []
    set_scale = world.revisions.set_scale

    def spy(namespace: str, name: str, annotations: dict[str, str]) -> None:
        costs_when_scaled.append(
            {
                p["metadata"]["name"]: p["metadata"]["annotations"][DELETION_COST]
                for p in world.pods.of_revision(NS, REV)
            }
        )
        set_scale(namespace, name, annotations)

    world.revisions.set_scale = spy  # type: ignore[method-assign]
    decision = world.tick(T0, scaleDown={"stabilizationSeconds": 0})
    assert decision.verb is Verb.SCALE_DOWN
    assert decision.victims == ("pod-1",)
    assert costs_when_scaled == [{"pod-1": "0", "pod-2": "10", "pod-0": "20"}]
    assert world.revisions.calls[-1].annotations[MIN_SCALE] == str(decision.desired)


def test_a_canarys_baseline_pods_are_drained_last() -> None:
    """The stable revision's pods in a canary's baseline (radixfleet/controllers/canary/baseline.py)
    cost the most to delete, whatever their cache is worth: the rollout is judged against them."""
    world = World(ready=3, bounds=(3, 3))
    baseline = world.pods.items[(NS, "pod-1")]["metadata"]
    baseline["labels"][labels.POOL] = labels.BASELINE_POOL
    world.prometheus.answers = answers(
        {
            "pod-0": gauges(0.05, cached=900.0),
            "pod-1": gauges(0.05, cached=3.0),  # the least cache: first to go, but a baseline
            "pod-2": gauges(0.05, cached=400.0),
        }
    )
    world.tick(T0, scaleDown={"stabilizationSeconds": 0})
    costs = {p["metadata"]["name"]: p["metadata"]["annotations"][DELETION_COST]
             for p in world.pods.of_revision(NS, REV)}  # fmt: skip
    assert costs == {"pod-2": "0", "pod-0": "10", "pod-1": "20"}


def test_scale_to_zero_hands_the_last_replica_to_the_kpa() -> None:
    world = World(ready=1, bounds=(1, 1))
    world.prometheus.answers = answers({"pod-0": gauges(0.0, running=0.0)}, rate=0.0)
    idle_since = T0 - timedelta(hours=2)
    zeros = [{"at": (T0 - timedelta(seconds=s)).isoformat(), "value": 0.0}
             for s in range(300, 0, -10)]  # fmt: skip
    last_tick = T0 - timedelta(seconds=10)
    world.policies.add(policy() | {"status": {
        "inferenceService": ISVC, "revision": REV, "desired": 1, "recommendations": zeros,
        "lastActiveAt": idle_since.isoformat(), "lastTickAt": last_tick.isoformat(),
    }})  # fmt: skip
    decision = world.tick(T0)
    assert decision.desired == 0
    assert world.revisions.calls[-1].annotations == {MIN_SCALE: "0", MAX_SCALE: "8"}


def test_a_schedule_floor_wakes_a_revision_at_zero_through_the_activator() -> None:
    world = World(ready=0, bounds=(0, 8))
    world.isvcs.add(isvc() | {"status": isvc()["status"] | {"url": "http://llama.team-search"}})
    world.prometheus.answers = answers({}, rate=0.0)
    schedule = [{"start": "11:00", "end": "13:00", "minReplicas": 2}]
    decision = world.tick(T0, warmPool={"schedule": schedule})
    assert decision.desired == 2
    assert world.revisions.calls[-1].annotations == {MIN_SCALE: "2", MAX_SCALE: "2"}
    assert world.waker.calls == ["http://llama.team-search"]
    world.revisions.settle(NS, REV)
    world.tick(T0 + timedelta(seconds=10), warmPool={"schedule": schedule})
    assert world.waker.calls == ["http://llama.team-search"]  # awake: no second request


def test_prometheus_down_halts_and_leaves_the_revision_alone() -> None:
    world = World()
    world.prometheus.next_error = MetricsUnavailable("down", query="q", status=503)
    decision = world.tick(T0)
    assert (decision.verb, decision.desired) == (Verb.HALT, 2)
    assert world.revisions.calls == []
    assert world.events.calls[-1].warning
    assert world.policies.status_writes[-1]["lastDecision"]["action"] == "halt"


def test_missing_inference_service_halts() -> None:
    world = World()
    world.isvcs.items.clear()
    decision = world.tick(T0)
    assert decision.verb is Verb.HALT
    assert "not found" in decision.reason
    assert world.revisions.calls == []


def test_a_new_serving_revision_releases_the_old_one() -> None:
    world = World()
    world.prometheus.answers = answers({"pod-0": gauges(0.7), "pod-1": gauges(0.7)})
    world.tick(T0)
    new = "llama-predictor-00002"
    world.isvcs.add(isvc(revision=new))
    world.revisions.add(revision(name=new, ready=1))
    world.tick(T0 + timedelta(seconds=10))
    released = [c for c in world.revisions.calls if c.name == REV]
    assert released[-1].annotations == {MIN_SCALE: "0", MAX_SCALE: "8"}
    assert status_of(world.policies.items[(NS, ISVC)]).revision == new  # type: ignore[union-attr]


def test_paused_writes_status_only() -> None:
    world = World()
    world.prometheus.answers = answers({"pod-0": gauges(0.99), "pod-1": gauges(0.99)})
    assert world.tick(T0, paused=True).verb is Verb.HOLD
    assert world.revisions.calls == []


def test_the_ceiling_is_the_inference_service_max() -> None:
    world = World()
    world.isvcs.add(isvc(max_replicas=3))
    world.prometheus.answers = answers({"pod-0": gauges(1.0), "pod-1": gauges(1.0)})
    assert world.tick(T0).desired == 3


@pytest.mark.parametrize(
    ("status", "expected"),
    [(503, kopf.TemporaryError), (409, kopf.TemporaryError), (403, kopf.PermanentError)],
)
def test_tick_errors_map_to_kopf(status: int, expected: type[Exception]) -> None:
    world = World()
    world.prometheus.answers = answers({"pod-0": gauges(0.7), "pod-1": gauges(0.7)})
    world.policies.next_error = KubeError("boom", status=status)
    body = policy()
    world.policies.add(body)
    with pytest.raises(expected):
        run_tick(world.controller, body, now=T0)


def test_invalid_spec_is_permanent() -> None:
    with pytest.raises(kopf.PermanentError):
        run_tick(World().controller, policy(minReplicas=9, maxReplicas=2), now=T0)


class RecordingWarmer:
    """Records what pre-warming was asked each timer call; fails when told to."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str | None, int | None, int | None]] = []
        self.fail = fail

    def tick(self, namespace: str, spec: Any, revision: str | None, observed: Any, *,
             now: datetime, desired: int | None = None) -> None:  # fmt: skip
        ready = observed.ready if observed else None
        self.calls.append((namespace, revision, ready, desired))
        if self.fail:
            raise KubeError("pods: connection refused", status=None)


def test_pre_warming_runs_at_every_timer_call_on_the_last_ticks_revision_and_view() -> None:
    world = World()
    warmer = RecordingWarmer()
    world.controller.warmer = warmer  # type: ignore[assignment]
    world.prometheus.answers = answers({"pod-0": gauges(0.5), "pod-1": gauges(0.5)})
    world.tick(T0)  # no status yet: nothing to warm for
    assert world.tick(T0 + timedelta(seconds=1)) is None  # not due: pre-warming runs all the same
    assert warmer.calls == [(NS, REV, 2, 2)]  # with the count the last tick asked for


def test_a_pre_warming_error_never_stops_the_scaling_tick() -> None:
    world = World()
    warmer = RecordingWarmer(fail=True)
    world.controller.warmer = warmer  # type: ignore[assignment]
    world.prometheus.answers = answers({"pod-0": gauges(0.95), "pod-1": gauges(0.95)})
    world.tick(T0)
    decision = world.tick(T0 + timedelta(seconds=10))
    assert len(warmer.calls) == 1  # it failed ...
    assert decision is not None  # ... and the tick decided, and wrote its status, all the same
    assert status_of(world.policies.items[(NS, ISVC)]) == decision.status
