"""The replica profile: every performance constant of one SGLang replica, in one typed object.

The emulated replica, the fleet twin and the catalog all read a replica's speed, KV budget and
cold start from a :class:`ReplicaProfile`. The defaults are CALIBRATION.md's numbers for one
H100 SXM 80 GB serving Llama-3.1-8B-Instruct in bf16 on SGLang 0.5.x; :data:`BUILTIN_PROFILES`
holds a few named variants and :func:`load_profile` reads another one from YAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from radixfleet.bounded_yaml import check_bounds


class ProfileError(ValueError):
    """A profile file that cannot be read or does not validate; the message names file and field."""


# The longest context a replica profile may have (2M tokens, past every model served today);
# the emulator never builds an answer longer than this.
MAX_CONTEXT_TOKENS = 2**21


class ReplicaProfile(BaseModel):
    """Performance constants of one SGLang replica (one model on one GPU group).

    Times are seconds, sizes are tokens unless a name says otherwise. The prefill and decode
    formulas are CALIBRATION.md's fitted estimates; their coefficients are fields so that
    another GPU or model is a YAML file, not a code change.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "h100-llama-3.1-8b"
    gpu_type: str = "H100-SXM-80GB"
    gpu_count: int = Field(default=1, ge=1, description="GPUs per replica (tensor parallel size)")
    model_path: str = "meta-llama/Llama-3.1-8B-Instruct"
    weights_gb: float = Field(default=16.0, gt=0, description="model weights in GB (bf16)")

    # KV cache and batching limits.
    kv_bytes_per_token: int = Field(default=131_072, gt=0)
    mem_fraction_static: float = Field(default=0.835, gt=0, le=1)
    kv_capacity_tokens: int = Field(default=420_000, gt=0, description="max_total_num_tokens")
    max_running_requests: int = Field(default=2048, gt=0)
    chunked_prefill_size: int = Field(default=8192, gt=0)
    context_length: int = Field(default=131_072, gt=0, le=MAX_CONTEXT_TOKENS)
    page_size: int = Field(default=1, gt=0)
    max_queued_requests: int | None = Field(default=None, gt=0, description="None: unbounded")

    # prefill(n new, p cached) = overhead + n / tokens_per_s + attention * n * (p + n / 2)
    prefill_overhead_s: float = Field(default=0.015, ge=0)
    prefill_tokens_per_s: float = Field(default=35_000.0, gt=0)
    prefill_attention_s: float = Field(default=1.31e-9, ge=0)

    # decode step(B, L) = overhead + per_request * B + per_context_token * L
    decode_overhead_s: float = Field(default=0.0065, ge=0)
    decode_per_request_s: float = Field(default=0.00002, ge=0)
    decode_per_context_token_s: float = Field(default=52e-9, ge=0)

    # Cold start phases until /health answers 200, weights already on the node.
    container_start_s: float = Field(default=15.0, ge=0, description="container and imports")
    weights_load_s: float = Field(default=15.0, ge=0, description="weights from local disk")
    graph_capture_s: float = Field(default=30.0, ge=0, description="CUDA graphs and warm-up")
    s3_bandwidth_mb_s: float = Field(default=260.0, gt=0, description="weights download speed")

    # Loading KV blocks back from the HiCache tiers (radixfleet/replica/tiers.py), per GPU of
    # the replica (each GPU loads its own shard). Host: pinned memory over PCIe Gen5 x16, 64 GB/s
    # raw; SGLang's kernel I/O backend reaches about 40. Storage: a backend over the network or
    # NVMe; 10 GB/s is an RDMA link of 100 Gb/s or two local NVMe drives.
    host_to_device_gb_s: float = Field(default=40.0, gt=0, description="host tier to GPU")
    storage_to_device_gb_s: float = Field(default=10.0, gt=0, description="storage tier to GPU")

    # Moving a prompt's KV from a prefill replica to a decode replica (P/D disaggregation,
    # radixfleet/replica/disagg.py). 50 GB/s is a p5's EFA (3,200 Gb/s over 8 GPUs, 400 Gb/s
    # each) that mooncake or nixl reaches with RDMA; the setup is the bootstrap handshake and
    # the registration of the destination pages, paid once per transfer.
    kv_transfer_gb_s: float = Field(default=50.0, gt=0, description="prefill to decode link")
    kv_transfer_setup_s: float = Field(default=0.002, ge=0, description="per-transfer setup")

    @property
    def cold_start_seconds(self) -> float:
        """Seconds from process start to a healthy replica, with the weights on the node."""
        return self.container_start_s + self.weights_load_s + self.graph_capture_s

    def cold_start_from_s3_seconds(self) -> float:
        """Cold start when the weights must first be downloaded from the model store."""
        return self.cold_start_seconds + self.weights_gb * 1000.0 / self.s3_bandwidth_mb_s

    def prefill_seconds(self, new_tokens: int, cached_tokens: int) -> float:
        """Time of one prefill pass over `new_tokens` after `cached_tokens` of cached prefix."""
        if new_tokens <= 0:
            return 0.0
        attention = self.prefill_attention_s * new_tokens * (cached_tokens + new_tokens / 2)
        return self.prefill_overhead_s + new_tokens / self.prefill_tokens_per_s + attention

    def load_seconds(self, *, host_tokens: int, storage_tokens: int) -> float:
        """Time to load KV tokens back from the host and the storage tiers onto the GPUs."""
        per_gpu = self.kv_bytes_per_token / self.gpu_count
        host = host_tokens * per_gpu / (self.host_to_device_gb_s * 1e9)
        return host + storage_tokens * per_gpu / (self.storage_to_device_gb_s * 1e9)

    def decode_step_seconds(self, batch: int, context_tokens: int) -> float:
        """Time of one decode step for `batch` requests holding `context_tokens` in total."""
        if batch <= 0:
            return 0.0
        return (
            self.decode_overhead_s
            + self.decode_per_request_s * batch
            + self.decode_per_context_token_s * context_tokens
        )

    def scaled(self, *, time_factor: float) -> ReplicaProfile:
        """A copy whose every duration is multiplied by `time_factor` (faults, fast tests)."""
        return self.model_copy(
            update={
                "prefill_overhead_s": self.prefill_overhead_s * time_factor,
                "prefill_tokens_per_s": self.prefill_tokens_per_s / time_factor,
                "prefill_attention_s": self.prefill_attention_s * time_factor,
                "decode_overhead_s": self.decode_overhead_s * time_factor,
                "decode_per_request_s": self.decode_per_request_s * time_factor,
                "decode_per_context_token_s": self.decode_per_context_token_s * time_factor,
                "container_start_s": self.container_start_s * time_factor,
                "weights_load_s": self.weights_load_s * time_factor,
                "graph_capture_s": self.graph_capture_s * time_factor,
                "host_to_device_gb_s": self.host_to_device_gb_s / time_factor,
                "storage_to_device_gb_s": self.storage_to_device_gb_s / time_factor,
                "kv_transfer_gb_s": self.kv_transfer_gb_s / time_factor,
                "kv_transfer_setup_s": self.kv_transfer_setup_s * time_factor,
            }
        )


_H100_8B = ReplicaProfile()

BUILTIN_PROFILES: dict[str, ReplicaProfile] = {
    _H100_8B.name: _H100_8B,
    # Same model on H200 (141 GB): the KV budget is CALIBRATION's; step times kept as H100's
    # because no measured H200 point exists yet, so the twin stays conservative.
    "h200-llama-3.1-8b": _H100_8B.model_copy(
        update={
            "name": "h200-llama-3.1-8b",
            "gpu_type": "H200-141GB",
            "kv_capacity_tokens": 920_000,
        }
    ),
    # 70B bf16 on TP4: 80 layers x 8 KV heads x 128 x 2 x 2 B per token; per GPU
    # 80 GB x 0.835 - 35 GB weights leaves ~32 GB, i.e. ~388k tokens across the group.
    "4xh100-llama-3.1-70b": _H100_8B.model_copy(
        update={
            "name": "4xh100-llama-3.1-70b",
            "gpu_count": 4,
            "model_path": "meta-llama/Llama-3.1-70B-Instruct",
            "weights_gb": 140.0,
            "kv_bytes_per_token": 327_680,
            "kv_capacity_tokens": 388_000,
            "prefill_overhead_s": 0.025,
            "prefill_tokens_per_s": 16_000.0,
            "prefill_attention_s": 1.64e-9,
            "decode_overhead_s": 0.014,
            "decode_per_request_s": 0.00005,
            "decode_per_context_token_s": 33e-9,
            "container_start_s": 20.0,
            "weights_load_s": 40.0,
            "graph_capture_s": 40.0,
        }
    ),
}

DEFAULT_PROFILE_NAME = _H100_8B.name


def builtin_profile(name: str) -> ReplicaProfile:
    """The built-in profile called `name`; raises ProfileError listing the known names."""
    try:
        return BUILTIN_PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(BUILTIN_PROFILES))
        raise ProfileError(f"unknown profile {name!r}; built-in profiles: {known}") from None


def load_profile(path: str | Path) -> ReplicaProfile:
    """Read a profile from YAML.

    The file is a mapping of ReplicaProfile fields. An optional `base: <built-in name>` key
    starts from that built-in profile; otherwise unset fields take the H100 + 8B defaults.
    """
    path = Path(path)
    data = _read_mapping(path)
    base_name = data.pop("base", DEFAULT_PROFILE_NAME)
    try:
        base = builtin_profile(str(base_name))
    except ProfileError as err:
        raise ProfileError(f"{path}: field 'base': {err}") from None
    try:
        return ReplicaProfile.model_validate({**base.model_dump(), **data})
    except ValidationError as err:
        raise ProfileError(f"{path}: {_describe(err)}") from None


def resolve_profile(spec: str | Path | None) -> ReplicaProfile:
    """A built-in profile by name, a YAML file by path, or the default for None."""
    if spec is None:
        return BUILTIN_PROFILES[DEFAULT_PROFILE_NAME]
    if str(spec) in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[str(spec)]
    return load_profile(spec)


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
        check_bounds(text)
        raw = yaml.safe_load(text)
    except OSError as err:
        raise ProfileError(f"{path}: cannot read profile: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ProfileError(f"{path}: not valid YAML: {err}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: a profile must be a mapping, got {type(raw).__name__}")
    return {str(key): value for key, value in raw.items()}


def _describe(err: ValidationError) -> str:
    parts = []
    for item in err.errors():
        field = ".".join(str(part) for part in item["loc"]) or "<root>"
        parts.append(f"field {field!r}: {item['msg']}")
    return "; ".join(parts)
