"""Model weights kept on the GPU nodes' own disks: KServe's LocalModelCache.

A replica's cold start downloads its weights from the model store first (a 16 GB model at
S3's ~260 MB/s per pod: about a minute, CALIBRATION.md) and only then loads them. KServe's
local model cache downloads each model once per node, ahead of any replica, and mounts it into
every predictor that names the same `storageUri`: the replica reads its weights from the node's
disk, the cold start the fleet twin prices. A region's GPU pools with `model_cache_gib` are one
`LocalModelNodeGroup` per GPU type (the nodes an InferenceService of that type may land on), and
each storage URI of the models that run on them gets a `LocalModelCache` on their groups.

KServe's node agent keeps the weights under `NODE_PATH` on every node of the group; the group's
PersistentVolume names that path, and its node affinity keeps a cached model's pods on the
group's nodes. The kubelet creates that folder root-owned, where the agent (non-root) cannot
write: `folder_keeper` hands it over first. Which models KServe can cache:
`radixfleet/config/modelcache.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radixfleet import labels
from radixfleet.config import Model, Region
from radixfleet.config.gpus import gpu_label_value
from radixfleet.config.modelcache import (
    CachedWeights,
    cache_limit_gib,
    cached_weights,
    node_group_name,
)

Manifest = dict[str, Any]

API_VERSION = "serving.kserve.io/v1alpha1"
# KServe's node agent mounts this host folder (its chart's DaemonSet); the group's volume is it.
NODE_PATH = "/models"
STORAGE_CLASS = "radixfleet-model-cache"
# The GPU nodes of caching pools carry KServe's own label for the nodes its agent runs on. Its
# chart's agent DaemonSet selects it whatever the values say (the chart deep-merges the values'
# nodeSelector into a base that has it), so a label of ours would add to it, never replace it.
NODE_LABELS = {"kserve/localmodel": "worker"}


def model_cache(region: Region, models: Sequence[Model]) -> list[Manifest]:
    """Each caching GPU type's node group, then a cache per storage URI the region caches;
    nothing when no pool of the region caches."""
    weights = cached_weights(region, models)
    types = sorted({t for w in weights for t in w.gpu_types})
    return [
        *(node_group(t, cache_limit_gib(region, t)) for t in types),
        *(local_model_cache(w) for w in weights),
    ]


def node_group(gpu_type: str, limit_gib: int) -> Manifest:
    """The GPU type's nodes, each holding up to `limit_gib` of weights under `NODE_PATH`."""
    size = {"storage": f"{limit_gib}Gi"}
    on_the_type = {"key": labels.GPU_TYPE, "operator": "In", "values": [gpu_label_value(gpu_type)]}
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalModelNodeGroup",
        "metadata": {"name": node_group_name(gpu_type), "labels": _labels()},
        "spec": {
            "storageLimit": size["storage"],
            "persistentVolumeSpec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Filesystem",
                "capacity": size,
                "local": {"path": NODE_PATH},
                "storageClassName": STORAGE_CLASS,
                # KServe deletes the volumes it made with the cache; nothing else reclaims them.
                "persistentVolumeReclaimPolicy": "Delete",
                "nodeAffinity": {
                    "required": {"nodeSelectorTerms": [{"matchExpressions": [on_the_type]}]}
                },
            },
            "persistentVolumeClaimSpec": {
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Filesystem",
                "resources": {"requests": size},
                "storageClassName": STORAGE_CLASS,
            },
        },
    }


def local_model_cache(weights: CachedWeights) -> Manifest:
    """The weights on every node of their GPU types' groups. KServe mounts the claim
    `<name>-<group>` into the predictors of every tenant that serves them, the group being the
    one the InferenceService names (`serving.kserve.io/nodegroup`)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalModelCache",
        "metadata": {"name": weights.name, "labels": _labels()},
        "spec": {
            "sourceModelUri": weights.storage_uri,
            "modelSize": f"{weights.gib}Gi",
            "nodeGroups": [node_group_name(t) for t in weights.gpu_types],
        },
    }


# KServe's node agent runs as its image's user (distroless `nonroot`) and creates its folders in
# `NODE_PATH`; its download jobs write there with the group KServe's config gives them
# (`localModel.fsGroup`, 1000). The kubelet creates the host folder for the agent root-owned, so
# the agent could not write to it: `folder_keeper` hands it to them first.
AGENT_UID = 65532
JOBS_GID = 1000
FOLDER_KEEPER = "model-cache-folder"


def folder_keeper(*, image: str, namespace: str) -> Manifest:
    """A DaemonSet on the caching nodes whose init container makes `NODE_PATH` the agent's
    and its jobs' (owner `AGENT_UID`, group `JOBS_GID`, group-writable, new folders keeping
    the group), then idles. The init container is root with only the capabilities a change of
    owner and mode needs; `image` is any image with coreutils (the controllers')."""
    selector = {"app.kubernetes.io/component": FOLDER_KEEPER}
    folder = "/host/models"
    prepare = {
        "name": "prepare",
        "image": image,
        "command": ["install", "-d", "-o", str(AGENT_UID), "-g", str(JOBS_GID), "-m", "2775",
                    folder],
        "securityContext": {
            "runAsUser": 0, "runAsNonRoot": False, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]},
        },
        "volumeMounts": [{"name": "models", "mountPath": folder}],
        "resources": {"requests": {"cpu": "5m", "memory": "16Mi"}, "limits": {"memory": "16Mi"}},
    }  # fmt: skip
    idle = {
        "name": "idle",
        "image": image,
        "command": ["sleep", "infinity"],
        "securityContext": {
            "runAsUser": AGENT_UID, "runAsNonRoot": True, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
        },
        "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"memory": "8Mi"}},
    }  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": FOLDER_KEEPER, "namespace": namespace, "labels": _labels()},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**selector, labels.MANAGED_BY: labels.MANAGER}},
                "spec": {
                    "nodeSelector": dict(NODE_LABELS),
                    "tolerations": [labels.gpu_toleration()],
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 0,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "initContainers": [prepare],
                    "containers": [idle],
                    "volumes": [{"name": "models", "hostPath": {"path": NODE_PATH,
                                                                "type": "DirectoryOrCreate"}}],
                },
            },
        },
    }  # fmt: skip


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/component": "model-cache", labels.MANAGED_BY: labels.MANAGER}
