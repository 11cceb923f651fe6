"""Where things run: the labels, taints and affinities of a region's system and GPU nodes,
its storage class, and the kubeconfig its components reach it by (no static credentials).
"""

from __future__ import annotations

import json

from infra.manifests.base import Manifest
from radixfleet import labels
from radixfleet.config import GpuPool
from radixfleet.config.gpus import gpu_label_value
from radixfleet.render import modelcache

NODE_ROLE = f"{labels.GROUP}/node-role"
# Encrypted gp3, the default storage class of every cluster.
STORAGE_CLASS = "gp3-encrypted"


def gpu_node_labels(pool: GpuPool) -> dict[str, str]:
    """Labels of a GPU pool's nodes: what InferenceServices select and controllers count, and
    where KServe's model cache agent runs."""
    found = {
        labels.GPU_TYPE: gpu_label_value(pool.gpu_type),
        labels.GPU_POOL: pool.name,
        labels.CAPACITY_TYPE: pool.capacity,
        NODE_ROLE: "gpu",
        # The NVIDIA device plugin chart's default affinity looks for this label, which
        # node-feature-discovery would otherwise have to set.
        "nvidia.com/gpu.present": "true",
    }
    if pool.model_cache_gib:
        found.update(modelcache.NODE_LABELS)
    return found


SYSTEM_NODE_LABELS = {NODE_ROLE: "system"}
GPU_TOLERATION = labels.gpu_toleration()
# Add-ons that must run on GPU nodes select them by the GPU type label's presence.
GPU_NODE_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": labels.GPU_TYPE, "operator": "Exists"}]}
            ]
        }
    }
}


def kubeconfig(*, cluster: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that authenticates with `aws eks get-token`: no static credentials."""
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster, "--region", region],
        }
    }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": endpoint, "certificate-authority-data": ca_data},
            }
        ],
        "users": [{"name": cluster, "user": user}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
        "current-context": cluster,
    }
    return json.dumps(config)


def system_placement() -> Manifest:
    """Values that keep an add-on on the system nodes, never on a GPU node."""
    return {"nodeSelector": SYSTEM_NODE_LABELS}
