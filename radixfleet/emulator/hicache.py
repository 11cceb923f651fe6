"""SGLang HiCache's flags, read into the emulated replica's host tier and storage backend.

`--enable-hierarchical-cache` (or `--enable-hicache`) turns HiCache on; without it the other
`--hicache-*` flags change nothing, as in SGLang. The host pool holds `--hicache-size` GB per
rank (tensor parallel x pipeline parallel ranks) when that is not 0, else `--hicache-ratio`
(default 2.0) times the device pool (:func:`radixfleet.replica.tiers.host_tier_tokens`);
`--hicache-write-policy` says when the GPU's blocks are copied there.

`--hicache-storage-backend` adds a storage tier. Whatever backend it names (file, mooncake,
hf3fs, ...), the emulator's is an in-process :class:`~radixfleet.replica.tiers.TierStore`: it
is *not* shared with other emulator processes and does not outlive this one, so a prefix
another replica wrote is never found there. It holds ``RADIXFLEET_EMULATOR_STORAGE_TOKENS``
tokens (default :data:`DEFAULT_STORAGE_TOKENS`). `--hicache-storage-backend-extra-config` is
accepted and has no effect, like the prefetch policy, memory layout and I/O backend flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from radixfleet.profile import ReplicaProfile
from radixfleet.replica.tiers import HostTierSpec, WritePolicy, host_tier_tokens
from radixfleet.sglang_flags import first_value

#: The storage tier's size when the environment does not give one: ten million tokens (1.3 TB
#: of Llama-3.1-8B's KV), more than a short run writes, as a large file system or Mooncake
#: pool would be.
DEFAULT_STORAGE_TOKENS = 10_000_000
STORAGE_TOKENS_ENV = "RADIXFLEET_EMULATOR_STORAGE_TOKENS"

#: The class SGLang names a storage backend by in `cached_tokens_details.storage_backend`
#: (the backend object's type name); a backend not listed is named by its flag value.
BACKEND_CLASSES = {
    "file": "HiCacheFile",
    "mooncake": "MooncakeStore",
    "hf3fs": "HiCacheHF3FS",
    "nixl": "HiCacheNixl",
}


@dataclass(frozen=True, slots=True)
class HiCacheConfig:
    """What the HiCache flags ask of one replica."""

    size_gb: int = 0  # per rank; 0: use the ratio
    ratio: float | None = None  # None: SGLang's default (2.0)
    write_policy: WritePolicy = WritePolicy.WRITE_THROUGH
    storage_backend: str | None = None
    storage_tokens: int = DEFAULT_STORAGE_TOKENS
    ranks: int = 1  # tensor parallel x pipeline parallel size

    def host_tier(self, profile: ReplicaProfile) -> HostTierSpec:
        """The host tier of a replica with `profile`."""
        tokens = host_tier_tokens(
            size_gb=self.size_gb,
            ratio=self.ratio,
            device_tokens=profile.kv_capacity_tokens,
            bytes_per_token=profile.kv_bytes_per_token,
            ranks=self.ranks,
        )
        return HostTierSpec(tokens=tokens, write_policy=self.write_policy)

    @property
    def storage_backend_class(self) -> str | None:
        """The backend's name in a request's `cached_tokens_details`."""
        if self.storage_backend is None:
            return None
        return BACKEND_CLASSES.get(self.storage_backend, self.storage_backend)


def hicache_from_flags(
    flags: Mapping[str, list[str]], environ: Mapping[str, str]
) -> HiCacheConfig | None:
    """The HiCache of an sglang command line parsed by `sglang_flags.parse_args` (None when
    `--enable-hierarchical-cache` is absent), its storage sized from the environment."""
    if "enable_hierarchical_cache" not in flags:
        return None
    ratio = first_value(flags, "hicache_ratio")
    return HiCacheConfig(
        size_gb=int(first_value(flags, "hicache_size") or 0),
        ratio=None if ratio is None else float(ratio),
        write_policy=WritePolicy(first_value(flags, "hicache_write_policy") or "write_through"),
        storage_backend=first_value(flags, "hicache_storage_backend"),
        storage_tokens=storage_tokens(environ),
        ranks=int(first_value(flags, "tp_size") or 1) * int(first_value(flags, "pp_size") or 1),
    )


def storage_tokens(environ: Mapping[str, str]) -> int:
    """The storage tier's size from ``RADIXFLEET_EMULATOR_STORAGE_TOKENS``, or the default."""
    value = environ.get(STORAGE_TOKENS_ENV, "")
    if not value:
        return DEFAULT_STORAGE_TOKENS
    tokens = int(value)  # a ValueError names the bad value
    if tokens <= 0:
        raise ValueError(f"{STORAGE_TOKENS_ENV} must be a positive number of tokens, not {value}")
    return tokens
