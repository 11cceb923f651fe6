"""GPU memory arithmetic shared by catalog validation, scaling targets and the infra program."""

from __future__ import annotations

from radixfleet.config.catalog import Model
from radixfleet.config.gpus import GPU_TYPES

# SGLang reserves this share of GPU memory for weights and KV cache on an 80 GB GPU
# (sglang `arg_groups/memory_hook.py`, see CALIBRATION.md); the rest is activations and graphs.
MEM_FRACTION_STATIC = 0.835


def kv_capacity_tokens(model: Model) -> int:
    """Tokens of KV cache one replica holds: static memory minus weights, over KV bytes per token.

    Tensor and pipeline parallelism split both the weights and the KV heads across the replica's
    GPUs, so the replica's total capacity is computed over all of its GPUs at once.
    """
    gpu = GPU_TYPES[model.gpu_type]
    static_bytes = gpu.memory_bytes * MEM_FRACTION_STATIC * model.gpus_per_replica
    free_for_kv = static_bytes - model.architecture.weight_bytes
    return max(0, int(free_for_kv // model.architecture.kv_bytes_per_token))


def weight_gib(model: Model) -> float:
    """Size of the model's weights in GiB: what a replica downloads on a cold start."""
    return model.architecture.weight_bytes / 1024**3
