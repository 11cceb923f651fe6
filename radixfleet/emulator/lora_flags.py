"""SGLang's LoRA flags as the emulator reads them: `--enable-lora`, `--lora-paths` and the
bounds (`--max-loras-per-batch`, `--max-loaded-loras`, `--lora-eviction-policy`,
`--max-lora-rank`), with SGLang's start-up checks; a bad value raises ValueError saying which.
Both command lines use it (:mod:`radixfleet.emulator.launch_server`, `radixfleet emulate`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from radixfleet.replica import AdapterSpec, EvictionPolicy, LoraSpec
from radixfleet.replica.lora import DEFAULT_RANK
from radixfleet.sglang_flags import first_value


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
    """One `--lora-paths` entry: `NAME=PATH`, a JSON object with `lora_name`, `lora_path` and
    `pinned`, or a bare path (named by the path, as SGLang names it)."""
    if spec.lstrip().startswith("{"):
        try:
            entry = json.loads(spec)
        except json.JSONDecodeError:
            entry = None
        name = entry.get("lora_name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"--lora-paths: {spec!r} is not a JSON object with a lora_name")
        assert isinstance(entry, dict)
        path, pinned = entry.get("lora_path", name), entry.get("pinned", False)
        return AdapterSpec(name=name, path=str(path), rank=rank, pinned=bool(pinned))
    name, equals, path = spec.partition("=")
    if not equals:
        return AdapterSpec(name=spec, path=spec, rank=rank)
    return AdapterSpec(name=name, path=path, rank=rank)
