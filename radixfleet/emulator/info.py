"""The informational bodies of an emulated replica: /v1/models, /model_info, /server_info.

/server_info reports SGLang's own server-argument defaults (from the flag list shipped in
`radixfleet/schemas/sglang/server-args.json`) overridden by what this replica runs with, plus
the scheduler's `internal_states`, as sglang 0.5.23 does.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from radixfleet.replica import AdapterSpec, ReplicaStats

if TYPE_CHECKING:
    from radixfleet.emulator.config import EmulatorConfig

SGLANG_VERSION = "0.5.23"


@functools.cache
def sglang_defaults() -> dict[str, Any]:
    """Every SGLang server argument with its default, from the shipped flag list."""
    text = resources.files("radixfleet.schemas").joinpath("sglang/server-args.json").read_text()
    return {arg["dest"]: arg["default"] for arg in json.loads(text)["arguments"]}


def models_list(config: EmulatorConfig, *, adapters: Sequence[AdapterSpec] = ()) -> dict[str, Any]:
    """OpenAI's model list: the one served model, then each loaded LoRA adapter as SGLang
    lists it (id its name, root its path, parent the served model, no max_model_len)."""
    created = int(time.time())
    base = {
        "id": config.model_name,
        "object": "model",
        "created": created,
        "owned_by": "sglang",
        "root": config.profile.model_path,
        "max_model_len": config.profile.context_length,
    }
    cards = [
        {
            "id": adapter.name,
            "object": "model",
            "created": created,
            "owned_by": "sglang",
            "root": adapter.path,
            "parent": config.model_name,
            "max_model_len": None,
        }
        for adapter in adapters
    ]
    return {"object": "list", "data": [base, *cards]}


def model_info(config: EmulatorConfig, *, tokenizer_dir: Path) -> dict[str, Any]:
    """SGLang's /model_info; paths point at the local tokenizer so routers need no download."""
    return {
        "model_path": str(tokenizer_dir),
        "tokenizer_path": str(tokenizer_dir),
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "served_model_name": config.model_name,
    }


def server_info(
    config: EmulatorConfig, *, tokenizer_dir: Path, stats: ReplicaStats, version: str
) -> dict[str, Any]:
    """SGLang's /server_info: server arguments, internal states and version."""
    profile = config.profile
    args = dict(sglang_defaults())
    args.update(
        model_path=str(tokenizer_dir),
        tokenizer_path=str(tokenizer_dir),
        served_model_name=config.model_name,
        host=config.host,
        port=config.port,
        context_length=profile.context_length,
        max_running_requests=profile.max_running_requests,
        max_total_tokens=profile.kv_capacity_tokens,
        max_queued_requests=profile.max_queued_requests,
        chunked_prefill_size=profile.chunked_prefill_size,
        mem_fraction_static=profile.mem_fraction_static,
        page_size=profile.page_size,
        tp_size=profile.gpu_count,
        dp_size=1,
        pp_size=1,
        schedule_policy=config.schedule_policy.value,
        enable_metrics=config.enable_metrics,
        api_key=None,  # never echo the key
    )
    internal = {
        "max_total_num_tokens": stats.max_total_num_tokens,
        "last_gen_throughput": stats.gen_throughput,
        "token_usage": stats.token_usage,
        "num_running_reqs": stats.num_running_reqs,
        "num_queue_reqs": stats.num_queue_reqs,
        "cache_hit_rate": stats.cache_hit_rate,
        "memory_usage": {
            "weight": profile.weights_gb / profile.gpu_count,
            "kvcache": profile.kv_capacity_tokens * profile.kv_bytes_per_token / 1e9,
        },
    }
    return {
        **args,
        "internal_states": [internal],
        "version": SGLANG_VERSION,
        "radixfleet_version": version,
        "emulated": True,
        "profile": profile.name,
    }


def loads(stats: ReplicaStats, *, max_running_requests: int) -> dict[str, Any]:
    """SGLang's load report (`GET /v1/loads`, and gRPC `GetLoads` field for field): the one
    data-parallel rank's queue, running set, KV usage, throughput and hit rate."""
    load = {
        "dp_rank": 0,
        "num_running_reqs": stats.num_running_reqs,
        "num_waiting_reqs": stats.num_queue_reqs,
        "num_total_reqs": stats.num_running_reqs + stats.num_queue_reqs,
        "num_used_tokens": stats.kv_used_tokens,
        "max_total_num_tokens": stats.max_total_num_tokens,
        "token_usage": stats.token_usage,
        "gen_throughput": stats.gen_throughput,
        "cache_hit_rate": stats.cache_hit_rate,
        "utilization": stats.token_usage,
        "max_running_requests": max_running_requests,
    }
    return {
        "timestamp": datetime.now(UTC).isoformat(),
        "version": SGLANG_VERSION,
        "dp_rank_count": 1,
        "loads": [load],
        "aggregate": {
            "total_running_reqs": load["num_running_reqs"],
            "total_waiting_reqs": load["num_waiting_reqs"],
            "total_reqs": load["num_total_reqs"],
            "avg_token_usage": load["token_usage"],
            "avg_throughput": load["gen_throughput"],
            "avg_utilization": load["utilization"],
        },
    }
