"""The canary controller rolling out a new model version on the real KServe and Knative Serving of
the test cluster: its traffic steps become KServe's `canaryTrafficPercent`, KServe and Knative
split the revision's traffic, and the controller promotes a good canary or rolls back a slow
one, posting Events on the InferenceService.

The controller's Kubernetes adapters are the ones it runs with; its Prometheus is the
recording fake with the answers of tests/canary/test_controller.py (no Prometheus scrapes the
test cluster's pods here; tests/cluster/test_operator.py has the operator judge from a real one),
so the verdicts are fixed and what is tested is the act layer on real
objects: the self-checking traffic patch, KServe's revisions and traffic, the policy's status.
Virtual time advances ten seconds a tick (the analysis interval) while real time advances one.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from radixfleet.adapters.prometheus_fake import FakePrometheus
from radixfleet.controllers.canary.controller import Controller
from radixfleet.controllers.canary.kube import (
    FIELD_MANAGER,
    KubeCanaryPolicies,
    KubeInferenceServices,
)
from radixfleet.controllers.canary.ports import StaleRevisionError
from radixfleet.controllers.canary.spec import POLICY_ANNOTATION, Metric
from radixfleet.controllers.canary.state import Phase, RolloutStatus, rollout_of
from radixfleet.kit.kube import KubeEvents
from testbed import images, session
from testbed.cluster import Cluster
from testbed.emulated import (
    emulated_isvc,
    get,
    model_volume,
    predictor_status,
    revision_serving,
    traffic_split,
)
from tests.canary.test_controller import CANARY, GOOD, STABLE, answers
from tests.cluster.conftest import REPO
from tests.cluster.events import stored

NAME = "llama"  # the revisions are then the ones the fake's answers name: llama-predictor-0000N
KSERVE = ("serving.kserve.io", "v1beta1", "inferenceservices")
OURS = ("radixfleet.io", "v1alpha1", "canarypolicies")
READY_TIMEOUT_S = 300.0
ROLLOUT_TIMEOUT_S = 240.0
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TICK = timedelta(seconds=10)
SLOW = GOOD | {Metric.TTFT_P95: 2 * GOOD[Metric.TTFT_P95]}
# Two canaries side by side, each in its namespace: one as good as the stable, one 2x slower.
NAMESPACES = {"good": "canary-good", "slow": "canary-slow"}


@dataclass(frozen=True)
class Rollout:
    """What a rollout did: the traffic percents the controller set, in order, and its end."""

    percents: list[int | None]
    status: RolloutStatus
    predictor: dict[str, Any]  # KServe's status.components.predictor at the end


@pytest.fixture(scope="module")
def canaries(kserve: Cluster) -> Iterator[Cluster]:
    """In each namespace a CanaryPolicy and `llama` served by revision 1 (Ready, all the
    traffic), then a new version applied: revision 2 created and Ready at 0% of the traffic."""
    image = images.radixfleet()
    session.load_images(kserve, [image])
    kserve.kubectl(
        "apply", "--server-side", "--field-manager=radixfleet", "-k", str(REPO / "runtimes")
    )
    for namespace in NAMESPACES.values():
        kserve.kubectl("create", "namespace", namespace)
        policy = {"apiVersion": "radixfleet.io/v1alpha1", "kind": "CanaryPolicy",
                  "metadata": {"name": "default", "namespace": namespace},
                  "spec": {"steps": [10, 50]}}  # fmt: skip
        first = _version(image.pinned, namespace, version="1")
        session.apply(
            kserve, [*model_volume(kserve, namespace=namespace, model=NAME), policy, first]
        )
    for namespace in NAMESPACES.values():
        _wait(kserve, namespace, created=STABLE)
    # As a platform team ships a new version: `kubectl apply` of the changed manifest.
    session.apply(kserve, [_version(image.pinned, ns, version="2") for ns in NAMESPACES.values()])
    for namespace in NAMESPACES.values():
        _wait(kserve, namespace, created=CANARY)
    try:
        yield kserve
    finally:
        for namespace in NAMESPACES.values():
            kserve.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _version(image: str, namespace: str, *, version: str) -> dict[str, Any]:
    isvc = emulated_isvc(
        image, name=NAME, namespace=namespace, mode="Knative",
        annotations={POLICY_ANNOTATION: "default"}, env={"MODEL_VERSION": version},
    )  # fmt: skip
    # New revisions start at 0% of the traffic; the canary controller moves them from there.
    isvc["spec"]["predictor"]["canaryTrafficPercent"] = 0
    return isvc


def _wait(cluster: Cluster, namespace: str, *, created: str) -> None:
    session.wait_for(
        functools.partial(revision_serving, cluster, NAME, namespace, created),
        timeout_s=READY_TIMEOUT_S,
        what=f"{namespace}/{NAME}: revision {created} Ready",
    )


def _roll_out(cluster: Cluster, kube_client: Any, namespace: str, metrics: Any) -> Rollout:
    """Tick the controller until the rollout ends, waiting after each step until KServe's traffic
    split is the one the step asked for (what the analysis of the next step would measure)."""
    api = client.CustomObjectsApi(kube_client)
    now = T0
    controller = Controller(
        KubeInferenceServices(kube_client),
        KubeCanaryPolicies(kube_client),
        KubeEvents(kube_client, clock=lambda: now, component=FIELD_MANAGER),
        FakePrometheus(answers(metrics, namespace=namespace)),
    )

    def percent_now() -> int | None:
        isvc = api.get_namespaced_custom_object(*KSERVE[:2], namespace, KSERVE[2], NAME)
        percent: int | None = isvc["spec"]["predictor"].get("canaryTrafficPercent")
        return percent

    # Where the rollout starts, read before the first tick (which may already take a step when
    # KServe reports the canary Ready by then).
    percents: list[int | None] = [percent_now()]
    deadline = time.monotonic() + ROLLOUT_TIMEOUT_S
    while time.monotonic() < deadline:
        policy = api.get_namespaced_custom_object(*OURS[:2], namespace, OURS[2], "default")
        controller.reconcile_policy(policy, now=now)
        percent = percent_now()
        if percents[-1] != percent:
            percents.append(percent)
            _wait_for_split(cluster, namespace, percent)
        policy = api.get_namespaced_custom_object(*OURS[:2], namespace, OURS[2], "default")
        status = rollout_of(policy, NAME)
        if status is not None and status.phase in (Phase.PROMOTED, Phase.ROLLED_BACK):
            return Rollout(percents, status, predictor_status(cluster, NAME, namespace))
        now += TICK
        time.sleep(1.0)
    pytest.fail(f"{namespace}: the rollout did not end in {ROLLOUT_TIMEOUT_S:.0f} s: {percents}")


def _wait_for_split(cluster: Cluster, namespace: str, percent: int | None) -> None:
    canary = 100 if percent is None else percent
    want = {CANARY: canary, STABLE: 100 - canary}
    want = {revision: share for revision, share in want.items() if share}
    session.wait_for(
        lambda: traffic_split(predictor_status(cluster, NAME, namespace)) == want,
        timeout_s=READY_TIMEOUT_S,
        what=f"{namespace}/{NAME}: KServe's traffic split {want}",
    )


def test_a_stale_canary_is_never_giventraffic_split(canaries: Cluster, kube_client: Any) -> None:
    # The JSON patch tests the canary revision in the same request that moves the traffic.
    namespace = NAMESPACES["good"]
    with pytest.raises(StaleRevisionError):
        KubeInferenceServices(kube_client).set_canary_percent(
            namespace, NAME, percent=50, canary_revision="llama-predictor-00009"
        )
    spec = get(canaries, "isvc", NAME, "-n", namespace)["spec"]
    assert spec["predictor"]["canaryTrafficPercent"] == 0


def test_a_good_canary_is_promoted_step_by_step(canaries: Cluster, kube_client: Any) -> None:
    namespace = NAMESPACES["good"]
    rollout = _roll_out(canaries, kube_client, namespace, GOOD)
    assert rollout.percents == [0, 10, 50, None]
    assert rollout.status.phase is Phase.PROMOTED
    assert rollout.predictor["latestRolledoutRevision"] == CANARY
    assert traffic_split(rollout.predictor) == {CANARY: 100}
    reasons = [e["reason"] for e in stored(kube_client, namespace, component=FIELD_MANAGER)]
    assert reasons[-1] == "CanaryPromote", reasons


def test_a_2x_slow_canary_is_rolled_back(canaries: Cluster, kube_client: Any) -> None:
    namespace = NAMESPACES["slow"]
    rollout = _roll_out(canaries, kube_client, namespace, SLOW)
    assert rollout.percents[-1] == 0 and max(p or 0 for p in rollout.percents) == 10
    assert rollout.status.phase is Phase.ROLLED_BACK
    assert rollout.predictor["latestRolledoutRevision"] == STABLE
    assert traffic_split(rollout.predictor) == {STABLE: 100}
    reasons = [e["reason"] for e in stored(kube_client, namespace, component=FIELD_MANAGER)]
    assert reasons[-1] == "CanaryRollback", reasons
