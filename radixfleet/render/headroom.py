"""GPU headroom: GPUs a pool keeps free for a burst's first replicas, held by placeholder pods.

A new replica waits a minute or more on its cold start; one that also waits for a GPU node
waits minutes more (the node's boot, the device plugin, the image). The cluster autoscaler's
own answer is overprovisioning: pods of a priority below every workload's hold the spare
capacity, the scheduler evicts them the moment a real pod needs the room (preemption), and the
autoscaler, which counts pending pods above `--expendable-pods-priority-cutoff` (-10), adds a
node for the evicted ones. So a pool with `headroom_gpus: N` runs N single-GPU pause pods at
priority -5 on its own nodes: a predictor lands on a warm GPU at once and the headroom is
rebuilt behind it. The placeholders never preempt anything themselves (`preemptionPolicy:
Never`), ask for almost no CPU or memory, and run as non-root on a read-only root.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radixfleet import labels
from radixfleet.config import GpuPool
from radixfleet.render.operator import NAMESPACE

Manifest = dict[str, Any]

PRIORITY_CLASS = "radixfleet-gpu-headroom"
# Below every workload (0 is the default) and above the cluster autoscaler's expendable
# cutoff (-10), under which it would not add nodes for evicted placeholders.
PRIORITY = -5
COMPONENT = "gpu-headroom"
PAUSE_USER = 65535  # the pause image's own user


def priority_class() -> Manifest:
    """The PriorityClass every placeholder runs at."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS, "labels": _labels()},
        "value": PRIORITY,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": "Placeholders holding GPUs free for new replicas; workloads preempt them.",
    }


def headroom(pools: Sequence[GpuPool], *, image: str, namespace: str = NAMESPACE) -> list[Manifest]:
    """The PriorityClass once, then a Deployment of placeholders per pool that asks for
    headroom; nothing when none does."""
    wanting = [pool for pool in pools if pool.headroom_gpus]
    if not wanting:
        return []
    return [priority_class(), *(_deployment(p, image=image, namespace=namespace) for p in wanting)]


def deployment_name(pool: GpuPool) -> str:
    return f"{COMPONENT}-{pool.name}"


def _labels(pool: GpuPool | None = None) -> dict[str, str]:
    found = {"app.kubernetes.io/component": COMPONENT, labels.MANAGED_BY: labels.MANAGER}
    if pool is not None:
        found[labels.GPU_POOL] = pool.name
    return found


def _deployment(pool: GpuPool, *, image: str, namespace: str) -> Manifest:
    selector = {"app.kubernetes.io/component": COMPONENT, labels.GPU_POOL: pool.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(pool),
            "namespace": namespace,
            "labels": _labels(pool),
        },
        "spec": {
            "replicas": pool.headroom_gpus,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": _labels(pool)}, "spec": _pod(pool, image=image)},
        },
    }


def _pod(pool: GpuPool, *, image: str) -> Manifest:
    return {
        "priorityClassName": PRIORITY_CLASS,
        "terminationGracePeriodSeconds": 0,  # holds nothing: a preemption frees the GPU at once
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "nodeSelector": {labels.GPU_POOL: pool.name},
        "tolerations": [labels.gpu_toleration()],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": PAUSE_USER,
            "runAsGroup": PAUSE_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(image)],
    }


def _container(image: str) -> Manifest:
    one_gpu = {labels.GPU_RESOURCE: 1}
    return {
        "name": "pause",
        "image": image,
        "resources": {
            "requests": {"cpu": "5m", "memory": "8Mi", **one_gpu},
            "limits": {"memory": "8Mi", **one_gpu},
        },
        "securityContext": {
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
