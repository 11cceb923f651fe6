"""GPU headroom under the real kube-scheduler: a pool's placeholders hold its free GPUs, and a
serving pod that needs one takes it at once by preempting a placeholder.

The test node advertises 8 GPUs with the labels of infra/'s `h100` pool. The placeholders
rendered for that pool (radixfleet/render/headroom.py, what the Pulumi program deploys) take
every GPU other tests' pods left free, so the node has none to give; a pod of the default
priority asking for one GPU must then be scheduled by evicting a placeholder, and the
placeholder's replacement must wait Pending for want of a GPU, the signal on which the cluster
autoscaler adds a node (not run here: there are no cloud nodes to add).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from radixfleet import labels
from radixfleet.config import GpuPool
from radixfleet.render import headroom
from testbed import images, session
from testbed.cluster import Cluster
from testbed.layout import NODE_NAME

NAMESPACE = "headroom-check"
POOL = "h100"  # testbed/session.py's NODE_LABELS
SERVING_POD = "serving"


def _pool(gpus: int) -> GpuPool:
    return GpuPool(
        name=POOL, instance_type="p5.48xlarge", gpu_type="H100", gpus_per_node=8,
        max_nodes=4, headroom_gpus=gpus,
    )  # fmt: skip


def _allocatable_gpus(cluster: Cluster) -> int:
    node = json.loads(cluster.kubectl("get", "node", NODE_NAME, "-o", "json").stdout)
    return int(node["status"]["allocatable"].get(labels.GPU_RESOURCE, 0))


def _gpu_pods(cluster: Cluster) -> list[dict[str, Any]]:
    """Pods on the node that hold GPUs: scheduled, unfinished, asking for one or more."""
    pods = json.loads(cluster.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    return [
        pod
        for pod in pods
        if pod["spec"].get("nodeName") == NODE_NAME
        and pod["status"].get("phase") not in ("Succeeded", "Failed")
        and _gpus(pod) > 0
    ]


def _gpus(pod: dict[str, Any]) -> int:
    return sum(
        int(c.get("resources", {}).get("requests", {}).get(labels.GPU_RESOURCE, 0))
        for c in pod["spec"]["containers"]
    )


def _free_gpus(cluster: Cluster) -> int:
    """The node's GPUs no scheduled, unfinished pod requests."""
    return _allocatable_gpus(cluster) - sum(_gpus(pod) for pod in _gpu_pods(cluster))


def _pods(cluster: Cluster, selector: str) -> list[dict[str, Any]]:
    found = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json")
    return list(json.loads(found.stdout)["items"])


def _serving_pod(image: str) -> dict[str, Any]:
    """A pod of the default priority that needs one GPU, as a predictor does."""
    one_gpu = {labels.GPU_RESOURCE: 1}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": SERVING_POD, "namespace": NAMESPACE, "labels": {"app": "serving"}},
        "spec": {
            "nodeSelector": {labels.GPU_POOL: POOL},
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65535},
            "containers": [
                {"name": "serve", "image": image, "imagePullPolicy": "Never",
                 "resources": {"requests": one_gpu, "limits": one_gpu}}
            ],
        },
    }  # fmt: skip


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    session.apply(cluster, [{"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": NAMESPACE}}])  # fmt: skip
    try:
        yield NAMESPACE
    finally:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=120s")
        cluster.kubectl("delete", "priorityclass", headroom.PRIORITY_CLASS, "--ignore-not-found")


def test_a_serving_pod_takes_a_headroom_gpu_at_once_and_the_placeholder_waits(
    cluster: Cluster, namespace: str
) -> None:
    pause = images.pause()
    session.load_images(cluster, [pause])
    # The kubelet turns the advertised capacity into allocatable on its next status update.
    session.wait_for(lambda: _allocatable_gpus(cluster) > 0, timeout_s=60,
                     what="the node's advertised GPUs allocatable")  # fmt: skip
    # An earlier test's pod still terminating would free its GPU halfway through, and the
    # serving pod could take that one instead of a placeholder's.
    session.wait_for(
        lambda: not any(p["metadata"].get("deletionTimestamp") for p in _gpu_pods(cluster)),
        timeout_s=180, what="earlier tests' GPU pods gone",
    )  # fmt: skip
    free = _free_gpus(cluster)
    assert free >= 1, "other tests' pods hold every GPU of the node"
    pool = _pool(free)
    objects = headroom.headroom([pool], image=pause.pinned, namespace=namespace)
    for obj in objects:  # the node already has the sandbox image; never pull
        if obj["kind"] == "Deployment":
            obj["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Never"
    session.apply(cluster, objects)
    session.wait_rollout(cluster, namespace=namespace, deployment=headroom.deployment_name(pool))
    placeholders = f"app.kubernetes.io/component={headroom.COMPONENT}"
    before = {p["metadata"]["name"] for p in _pods(cluster, placeholders)}
    assert len(before) == free
    assert _free_gpus(cluster) == 0  # no GPU left but by preemption

    session.apply(cluster, [_serving_pod(pause.pinned)])
    session.wait_for(
        lambda: _phase(cluster, SERVING_POD) == "Running", timeout_s=90,
        what="the serving pod running on a GPU a placeholder held",
    )  # fmt: skip

    after = _pods(cluster, placeholders)
    evicted = before - {p["metadata"]["name"] for p in after}
    assert len(evicted) == 1, (before, [p["metadata"]["name"] for p in after])
    session.wait_for(
        lambda: _waiting_for_a_gpu(_pods(cluster, placeholders)) == 1, timeout_s=60,
        what="the evicted placeholder's replacement Pending for want of a GPU",
    )  # fmt: skip


def _phase(cluster: Cluster, pod: str) -> str | None:
    found = cluster.kubectl("get", "pod", pod, "-n", NAMESPACE, "-o", "json", check=False)
    return json.loads(found.stdout)["status"].get("phase") if found.returncode == 0 else None


def _waiting_for_a_gpu(pods: list[dict[str, Any]]) -> int:
    """Placeholders Pending and unschedulable for want of a GPU (what the autoscaler reads)."""
    return sum(
        1
        for pod in pods
        for condition in pod["status"].get("conditions", [])
        if condition["type"] == "PodScheduled"
        and condition.get("reason") == "Unschedulable"
        and labels.GPU_RESOURCE in condition.get("message", "")
    )
