"""What the fleet knows about GPUs: the accelerator types and the cloud instance families.

Both tables are data a platform team extends; every check that names a GPU type or an instance type
reads them, so an unknown one is an error in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class GpuType:
    """An accelerator as the fleet schedules it: the label value and the memory per device."""

    name: str
    memory_bytes: int


GPU_TYPES: dict[str, GpuType] = {
    gpu.name: gpu
    for gpu in (
        GpuType("H100", 80 * GIB),
        GpuType("H200", 141 * GIB),
        GpuType("A100-80GB", 80 * GIB),
        GpuType("A100-40GB", 40 * GIB),
        GpuType("L40S", 48 * GIB),
        GpuType("A10G", 24 * GIB),
        GpuType("L4", 24 * GIB),
    )
}


@dataclass(frozen=True)
class InstanceType:
    """A GPU instance type of a cloud: which GPU, how many per node, and the node's host memory
    (GiB, as the cloud sells it: the kubelet and the system take their share of it first)."""

    name: str
    gpu_type: str
    gpus: int
    memory_gib: int


# AWS GPU instance types the node pools may use (family.size -> GPU type, count and memory GiB,
# from AWS's published instance sizes).
INSTANCE_TYPES: dict[str, InstanceType] = {
    it.name: it
    for it in (
        InstanceType("p5.48xlarge", "H100", 8, 2048),
        InstanceType("p5e.48xlarge", "H200", 8, 2048),
        InstanceType("p5en.48xlarge", "H200", 8, 2048),
        InstanceType("p4de.24xlarge", "A100-80GB", 8, 1152),
        InstanceType("p4d.24xlarge", "A100-40GB", 8, 1152),
        InstanceType("g6e.xlarge", "L40S", 1, 32),
        InstanceType("g6e.12xlarge", "L40S", 4, 384),
        InstanceType("g6e.48xlarge", "L40S", 8, 1536),
        InstanceType("g5.xlarge", "A10G", 1, 16),
        InstanceType("g5.12xlarge", "A10G", 4, 192),
        InstanceType("g5.48xlarge", "A10G", 8, 768),
        InstanceType("g6.xlarge", "L4", 1, 16),
        InstanceType("g6.12xlarge", "L4", 4, 192),
        InstanceType("g6.48xlarge", "L4", 8, 768),
    )
}


def gpu_label_value(gpu_type: str) -> str:
    """The node label value for a GPU type: lower case, so it is a valid label value everywhere."""
    return gpu_type.lower()
