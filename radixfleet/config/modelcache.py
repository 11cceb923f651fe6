"""Which weights a region keeps on its GPU nodes' disks (KServe's local model cache), and how
much room they take: one answer for the catalog's checks, the manifests and the Pulumi program.

A pool with `model_cache_gib` caches the weights of every model of its GPU type that runs in
its region and that KServe can cache: weights it downloads (`s3://`, `gs://`, `hf://`; a claim
is already a volume) behind a single storage URI (a model with LoRA adapters has several, and
KServe mounts the cache for one only). Models that share weights (a prefill and a decode role)
share one cache: KServe refuses two caches of one storage URI.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from radixfleet.config.catalog import GpuPool, Model, Region
from radixfleet.config.gpus import gpu_label_value
from radixfleet.config.sizing import weight_gib

CACHEABLE_SCHEMES = ("s3://", "gs://", "hf://")
# Of a node's volume, what images, emptyDirs and JIT caches need beside cached weights.
NODE_RESERVED_GIB = 100


@dataclass(frozen=True)
class CachedWeights:
    """One storage URI's weights, cached on the nodes of each of `gpu_types`."""

    name: str  # the first model (catalog order) with these weights: the cache's name
    storage_uri: str
    gib: int  # the weights rounded up to whole GiB, as a node group's limit counts them
    gpu_types: tuple[str, ...]


def node_group_name(gpu_type: str) -> str:
    """The node group of a GPU type's nodes; every InferenceService names its own."""
    return f"{gpu_label_value(gpu_type)}-nodes"


def cacheable(model: Model) -> bool:
    """Whether KServe can serve `model` from a node's cache (module docstring)."""
    return model.storage_uri.startswith(CACHEABLE_SCHEMES) and not model.lora_adapters


def caching_pools(region: Region, gpu_type: str) -> list[GpuPool]:
    """The pools of `region` with GPUs of `gpu_type` that keep a model cache."""
    return [p for p in region.gpu_pools if p.gpu_type == gpu_type and p.model_cache_gib]


def cached_weights(region: Region, models: Sequence[Model]) -> list[CachedWeights]:
    """The weights `region`'s GPU pools cache, one entry per storage URI, in catalog order."""
    cached = [
        m
        for m in models
        if region.name in m.regions and cacheable(m) and caching_pools(region, m.gpu_type)
    ]
    first: dict[str, Model] = {}
    for model in cached:
        first.setdefault(model.storage_uri, model)
    return [
        CachedWeights(
            name=model.name,
            storage_uri=uri,
            gib=math.ceil(weight_gib(model)),
            gpu_types=tuple(sorted({m.gpu_type for m in cached if m.storage_uri == uri})),
        )
        for uri, model in first.items()
    ]


def cache_limit_gib(region: Region, gpu_type: str) -> int:
    """What each node of the GPU type's caching pools holds: the smallest pool's share."""
    return min(p.model_cache_gib for p in caching_pools(region, gpu_type))
