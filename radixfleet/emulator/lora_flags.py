"""SGLang's LoRA flags as the emulator reads them: `--enable-lora`, `--lora-paths` and the
bounds (`--max-loras-per-batch`, `--max-loaded-loras`, `--lora-eviction-policy`,
`--max-lora-rank`), with SGLang's start-up checks; a bad value raises ValueError saying which.
Both command lines use it (:mod:`radixfleet.emulator.launch_server`, `radixfleet emulate`).
"""

from __future__ import annotations

from collections.abc import Mapping

from radixfleet.replica import AdapterSpec, EvictionPolicy, LoraSpec
from radixfleet.replica.lora import DEFAULT_RANK
from radixfleet.sglang_flags import first_value, lora_path_entry


def lora_from_flags(flags: Mapping[str, list[str]]) -> LoraSpec | None:
    """The replica's LoRA flags, None unless `--enable-lora` or `--lora-paths` is given."""
    paths = flags.get("lora_paths", [])
    if "enable_lora" not in flags and not paths:
        return None
    # SGLang also asserts that `--enable-lora` without `--lora-paths` names `--max-lora-rank`
    # and `--lora-target-modules`; not here, because a ServingRuntime's command line is started
    # alone in the tests while its InferenceService adds the paths. Without a rank, 16.
    rank = first_value(flags, "max_lora_rank")
    max_rank = None if rank is None else int(rank)
    loaded = first_value(flags, "max_loaded_loras")
    return LoraSpec(
        max_loras_per_batch=int(first_value(flags, "max_loras_per_batch") or 8),
        max_loaded_loras=None if loaded is None else int(loaded),
        eviction_policy=EvictionPolicy(first_value(flags, "lora_eviction_policy") or "lru"),
        max_lora_rank=max_rank,
        preloaded=tuple(lora_adapter(spec, rank=max_rank or DEFAULT_RANK) for spec in paths),
    )


def lora_adapter(spec: str, *, rank: int = DEFAULT_RANK) -> AdapterSpec:
    """One `--lora-paths` entry (`NAME=PATH`, a JSON object or a bare path; the cluster's
    entry reads the same entries, :func:`radixfleet.sglang_flags.lora_path_entry`)."""
    entry = lora_path_entry(spec)
    return AdapterSpec(name=entry.name, path=entry.path, rank=rank, pinned=entry.pinned)
