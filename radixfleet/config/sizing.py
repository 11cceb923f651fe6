"""Memory arithmetic shared by catalog validation, rendering, scaling targets and the infra
program: a replica's KV cache on its GPUs and in host memory, and a pod's host memory."""

from __future__ import annotations

import math

from radixfleet.config.catalog import Model
from radixfleet.config.gpus import GIB, GPU_TYPES

# SGLang reserves this share of GPU memory for weights and KV cache on an 80 GB GPU
# (sglang `arg_groups/memory_hook.py`, see CALIBRATION.md); the rest is activations and graphs.
MEM_FRACTION_STATIC = 0.835
# SGLang's `--hicache-size` unit: a rank's pool holds `host_size * 1e9 // size_per_token`
# tokens (sglang 0.5.23 python/sglang/srt/mem_cache/pool_host/base.py).
HICACHE_GB = 10**9
# A pod's host memory before any KV tier: at least this, else its weights' staging room.
MIN_POD_MEMORY_GIB = 32
# Staging room over the weights of a pod's share (read, converted, copied to the GPUs), and
# what SGLang's own processes (tokenizer, scheduler, detokenizer) hold besides, GiB.
WEIGHT_STAGING = 1.2
SGLANG_PROCESSES_GIB = 16


def kv_capacity_tokens(model: Model) -> int:
    """Tokens of KV cache one replica holds: static memory minus weights, over KV bytes per token.

    Tensor and pipeline parallelism split both the weights and the KV heads across the replica's
    GPUs, so the replica's total capacity is computed over all of its GPUs at once.
    """
    gpu = GPU_TYPES[model.gpu_type]
    static_bytes = gpu.memory_bytes * MEM_FRACTION_STATIC * model.gpus_per_replica
    free_for_kv = static_bytes - model.architecture.weight_bytes
    return max(0, int(free_for_kv // model.architecture.kv_bytes_per_token))


def device_kv_bytes(model: Model) -> int:
    """Bytes of one replica's KV pool on its GPUs, over all of its ranks."""
    return kv_capacity_tokens(model) * model.architecture.kv_bytes_per_token


def weight_gib(model: Model) -> float:
    """Size of the model's weights in GiB: what a replica downloads on a cold start."""
    return model.architecture.weight_bytes / 1024**3


def hicache_gb_per_rank(model: Model) -> int:
    """`--hicache-size` of each of `model`'s ranks: the replica's host tier in SGLang's GB,
    over its ranks (each TP/PP rank is a process with a host pool of its own, holding its
    shard), floored; 0 without a tier."""
    if model.kv_cache is None:
        return 0
    return model.kv_cache.host_gib * GIB // (HICACHE_GB * model.gpus_per_replica)


# sglang 0.5.23 sizes a host pool against the pod's own memory limit (the cgroup's headroom,
# `mem_cache/host_memory.py`) less 10 GiB it keeps free, and refuses to start ("Not enough host
# memory available") when the pool does not fit (`pool_host/base.py`,
# HICACHE_HOST_MEMORY_RESERVE_BYTES): a pod with a host tier asks for that room too.
HICACHE_RESERVE_GIB = 10


def pod_host_kv_gib(model: Model) -> int:
    """GiB one pod asks for its host KV tier: its share of the replica's ranks' pools, and the
    room SGLang keeps free beside them."""
    if model.kv_cache is None:
        return 0
    return math.ceil(model.kv_cache.host_gib / model.nodes) + HICACHE_RESERVE_GIB


def pod_memory_gib(model: Model) -> int:
    """Host memory one pod of `model` requests and is limited to, GiB: room to stage the weights
    of its share plus SGLang's own processes, and its share of the host KV tier (without it the
    kernel kills the pod when the tier fills). The renderer and the catalog's checks read it."""
    staging = math.ceil(weight_gib(model) / model.nodes * WEIGHT_STAGING) + SGLANG_PROCESSES_GIB
    return max(MIN_POD_MEMORY_GIB, staging) + pod_host_kv_gib(model)


# What a GPU node keeps of its memory from pods, GiB: 5 % of it, at least 10. The kubelet's
# kube-reserved and eviction threshold (on EKS's AMIs 255 MiB + 11 MiB a pod, some 8 GiB on a
# p5.48xlarge), the system and the daemon sets of every GPU node (device plugin, DCGM exporter,
# CNI, KServe's model cache agent) take under 1 % of a large node; the rest is headroom for the
# node's page cache and bursts, which a node packed with pods at their limits would not have.
NODE_RESERVE_SHARE = 0.05
NODE_RESERVE_MIN_GIB = 10


def node_reserve_gib(memory_gib: int) -> int:
    """GiB of a node of `memory_gib` that no pod may count on (NODE_RESERVE_SHARE)."""
    return max(NODE_RESERVE_MIN_GIB, math.ceil(memory_gib * NODE_RESERVE_SHARE))
