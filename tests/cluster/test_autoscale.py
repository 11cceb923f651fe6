"""The autoscaler's tick on a real Knative Revision of the test cluster: a serverless
InferenceService at one replica whose pods report a full KV cache is scaled up to its maximum,
the bounds land on the Revision (without a new generation: annotations are not spec, so nothing
for Knative to roll out) and on its PodAutoscaler, Knative really starts the second pod, and the
decision is in the AutoscalePolicy's status.

The controller's adapters are the ones it runs with; Prometheus is the recording fake, answering
for the real pods by name (no Prometheus scrapes the test cluster's pods yet).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from radixfleet.adapters.prometheus_fake import FakePrometheus
from radixfleet.controllers.autoscale.controller import Controller
from radixfleet.controllers.autoscale.knative import MAX_SCALE, MIN_SCALE
from radixfleet.controllers.autoscale.kube import (
    KubeAutoscalePolicies,
    KubeInferenceServices,
    KubePods,
    KubeRevisions,
)
from radixfleet.controllers.autoscale.state import Verb, status_of
from radixfleet.controllers.canary.fakes import FakeEvents
from testbed import images, session
from testbed.cluster import Cluster
from testbed.emulated import emulated_isvc, get, model_volume, ready
from tests.autoscale.test_controller import ISVC, REV, answers, gauges
from tests.cluster.conftest import REPO

NAMESPACE = "autoscale-check"
READY_TIMEOUT_S = 300.0
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def one_replica(kserve: Cluster) -> Iterator[Cluster]:
    """`llama` serverless, between one and two replicas, Ready with its one pod; its policy."""
    image = images.radixfleet()
    session.load_images(kserve, [image])
    kserve.kubectl(
        "apply", "--server-side", "--field-manager=radixfleet", "-k", str(REPO / "runtimes")
    )
    kserve.kubectl("create", "namespace", NAMESPACE)
    isvc = emulated_isvc(
        image.pinned, name=ISVC, namespace=NAMESPACE, mode="Knative", min_replicas=1,
        max_replicas=2,
    )  # fmt: skip
    policy = {"apiVersion": "radixfleet.io/v1alpha1", "kind": "AutoscalePolicy",
              "metadata": {"name": ISVC, "namespace": NAMESPACE},
              "spec": {"inferenceService": ISVC}}  # fmt: skip
    session.apply(kserve, [*model_volume(kserve, namespace=NAMESPACE, model=ISVC), isvc, policy])
    session.wait_for(
        lambda: ready(kserve, "isvc", ISVC, NAMESPACE),
        timeout_s=READY_TIMEOUT_S,
        what=f"InferenceService {NAMESPACE}/{ISVC} Ready",
    )
    try:
        yield kserve
    finally:
        kserve.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def _running(cluster: Cluster) -> list[str]:
    pods = get(cluster, "pods", "-n", NAMESPACE, "-l", f"serving.knative.dev/revision={REV}")
    return [
        p["metadata"]["name"]
        for p in pods["items"]
        if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]
    ]


def test_a_full_cache_scales_a_real_revision_up(one_replica: Cluster, kube_client: Any) -> None:
    pods = _running(one_replica)
    assert len(pods) == 1
    before = get(one_replica, "revision", REV, "-n", NAMESPACE)
    prometheus = FakePrometheus(answers({pods[0]: gauges(0.95)}, namespace=NAMESPACE))
    controller = Controller(
        isvcs=KubeInferenceServices(kube_client),
        revisions=KubeRevisions(kube_client),
        pods=KubePods(kube_client),
        policies=KubeAutoscalePolicies(kube_client),
        events=FakeEvents(),
        prometheus=prometheus,
    )
    policy = get(one_replica, "autoscalepolicy", ISVC, "-n", NAMESPACE)
    decision = controller.reconcile_policy(policy, now=T0)
    assert decision is not None and (decision.verb, decision.desired) == (Verb.SCALE_UP, 2)

    after = get(one_replica, "revision", REV, "-n", NAMESPACE)
    assert (
        after["metadata"]["annotations"][MIN_SCALE],
        after["metadata"]["annotations"][MAX_SCALE],
    ) == ("2", "2")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    autoscaler = get(one_replica, "podautoscaler", REV, "-n", NAMESPACE)
    assert autoscaler["metadata"]["annotations"][MIN_SCALE] == "2"
    session.wait_for(
        lambda: len(_running(one_replica)) == 2,
        timeout_s=READY_TIMEOUT_S,
        what=f"Knative to run a second pod of {REV}",
    )
    stored = get(one_replica, "autoscalepolicy", ISVC, "-n", NAMESPACE)
    status = status_of(stored)
    assert status is not None and status.desired == 2 and status.revision == REV
    # The generation the API server gave the policy, which the decision read (kstatus's rule).
    generation = policy["metadata"]["generation"]
    assert status.observed_generation == generation == stored["metadata"]["generation"]
    assert status == decision.status.model_copy(update={"observed_generation": generation})
