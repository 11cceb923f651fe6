"""What one InferenceService commits of a GPU budget: maxReplicas x GPUs per replica, by GPU type.

ResourceQuota counts pods that exist, so a scale-to-zero model would be admitted with a
`maxReplicas` its tenant can never pay for. An InferenceService is counted instead by what it
may grow to. GPUs per replica are the larger of the `radixfleet.io/gpus-per-replica`
annotation and the predictor's own request (times the nodes of a multi-node replica): a
hand-written manifest cannot ask for fewer GPUs than its pods will take. Pure: no I/O.

`admission.py` spells the same reading in CEL; a test keeps the two in agreement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from radixfleet import labels


class BadAskError(ValueError):
    """An InferenceService whose GPU ask cannot be read (a non-integer count)."""


@dataclass(frozen=True)
class Ask:
    """One InferenceService's claim. `max_replicas` None: unbounded (KServe's default)."""

    namespace: str
    name: str
    gpu_type: str | None
    gpus_per_replica: int
    max_replicas: int | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gpus(self) -> int:
        """GPUs committed: every replica it may scale to; 0 while it cannot be admitted."""
        return self.gpus_per_replica * (self.max_replicas or 0)

    @property
    def problem(self) -> str | None:
        """Why no budget could admit this ask, or None."""
        if self.gpus_per_replica <= 0:
            return None
        if self.gpu_type is None:
            return f"{self.key} asks for GPUs without the {labels.GPU_TYPE} annotation"
        if not self.max_replicas or self.max_replicas <= 0:
            return (
                f"{self.key} asks for {self.gpus_per_replica} GPUs per replica without "
                "maxReplicas: an unbounded InferenceService cannot fit a GPU budget"
            )
        return None

    def describe(self) -> str:
        return f"maxReplicas {self.max_replicas} x {self.gpus_per_replica} GPUs"


def ask_of(isvc: Mapping[str, Any]) -> Ask:
    """Read an InferenceService's GPU claim; raises BadAskError on a non-integer count."""
    meta = isvc.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    predictor = (isvc.get("spec") or {}).get("predictor") or {}
    max_replicas = predictor.get("maxReplicas")
    return Ask(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        gpu_type=annotations.get(labels.GPU_TYPE) or None,
        gpus_per_replica=max(_annotated(annotations), _requested(predictor)),
        max_replicas=None if max_replicas is None else _integer(max_replicas, "maxReplicas"),
    )


def _annotated(annotations: Mapping[str, Any]) -> int:
    value = annotations.get(labels.GPUS_PER_REPLICA)
    return 0 if value is None else _integer(value, labels.GPUS_PER_REPLICA)


def _requested(predictor: Mapping[str, Any]) -> int:
    """GPUs of one replica from the predictor: its pod's request, times nodes when multi-node."""
    resources = (predictor.get("model") or {}).get("resources") or {}
    # The larger of limit and request: for an extended resource they must be equal anyway.
    per_pod = max(
        _integer((resources.get(kind) or {}).get(labels.GPU_RESOURCE, 0), labels.GPU_RESOURCE)
        for kind in ("limits", "requests")
    )
    if per_pod == 0:
        return 0
    worker = predictor.get("workerSpec") or {}
    nodes = worker.get("pipelineParallelSize", 1)
    return per_pod * _integer(nodes, "pipelineParallelSize")


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise BadAskError(f"{what}: {value!r} is not an integer")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadAskError(f"{what}: {value!r} is not an integer") from None
