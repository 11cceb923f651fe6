"""Replay a given list of requests in the twin, on a fixed fleet, to compare with the local fleet.

The local fleet and the twin run the same replica model; to compare their routers on the very
same requests, the requests are written as a Mooncake-format trace (arrival times in ms, token
counts, 512-token block ids) and replayed by a scenario at the trace's own rate, so each request
arrives once, when it did (radixfleet.twin.workload keeps a trace's records and times when its
rate is the trace's own).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from radixfleet.profile import builtin_profile
from radixfleet.twin.load import GIB, parse_scenario
from radixfleet.twin.run import run_scenario
from radixfleet.workload.traces import TraceRequest

MOONCAKE_BLOCK_TOKENS = 512


def write_trace(requests: Sequence[TraceRequest], path: Path) -> Path:
    """`requests` as a Mooncake-format JSONL trace; their block ids must be 512-token blocks."""
    if any(r.block_tokens != MOONCAKE_BLOCK_TOKENS for r in requests):
        raise ValueError("a Mooncake trace has 512-token blocks")
    lines = (
        json.dumps({"timestamp": r.at * 1000, "input_length": r.input_tokens,
                    "output_length": r.output_tokens, "hash_ids": list(r.hash_ids)})
        for r in requests
    )  # fmt: skip
    path.write_text("".join(line + "\n" for line in lines))
    return path


def fixed_fleet_hit_rates(
    requests: Sequence[TraceRequest],
    *,
    routing: Mapping[str, str],
    replicas: int,
    kv_tokens: int,
    workdir: Path,
    seed: int = 0,
    block_tokens: int = 16,
    profile: str = "h100-llama-3.1-8b",
    host_tokens: int | None = None,
) -> dict[str, float]:
    """Per policy name, the prefix hit rate of `requests` on `replicas` always-on replicas of
    `profile` with `kv_tokens` of KV cache each, routed by `routing[name]`; with `host_tokens`,
    each replica runs SGLang HiCache with a host tier of that many tokens (write-through), as a
    local fleet's replica does with `--enable-hierarchical-cache --hicache-ratio` (host over GPU
    tokens)."""
    trace = write_trace(requests, workdir / "trace.jsonl")
    replica = workdir / "replica.yaml"
    replica.write_text(yaml.safe_dump({"base": profile, "kv_capacity_tokens": kv_tokens}))
    scenario = _scenario(
        requests, trace=trace, replica=replica, routing=routing, replicas=replicas, seed=seed,
        block_tokens=block_tokens,
    )  # fmt: skip
    if host_tokens is not None:
        # The scenario sizes a host tier in GiB; the twin turns it back into tokens with the
        # profile's bytes per token, so a whole number of tokens in bytes round-trips exactly.
        host_gib = host_tokens * builtin_profile(profile).kv_bytes_per_token / GIB
        scenario["models"][0]["kv_tiers"] = {"host_gib": host_gib}
    parsed = parse_scenario(yaml.safe_dump(scenario), source=str(trace))
    outcome = run_scenario(parsed, oracles=False)
    if outcome.results["workload"]["requests"] != len(requests):
        raise RuntimeError("the twin did not replay each request once")
    metrics = outcome.results["metrics"]
    return {name: float(metrics[_label(i)]["prefix_hit_rate"]) for i, name in enumerate(routing)}


def _label(index: int) -> str:
    # Policy sets are named by DNS labels in a scenario; the caller's names need not be.
    return f"policy-{index}"


def _scenario(
    requests: Sequence[TraceRequest],
    *,
    trace: Path,
    replica: Path,
    routing: Mapping[str, str],
    replicas: int,
    seed: int,
    block_tokens: int,
) -> dict[str, Any]:
    count = len(requests)
    # The twin's span of a trace (its last request plus one mean gap): at `count / span` req/s
    # it replays the trace as it is.
    span = requests[-1].at * count / max(count - 1, 1)
    pool = {"name": "gpus", "gpus": replicas, "warm_gpus": replicas}
    return {
        "name": "fixed-fleet-replay", "seed": seed, "duration_s": span,
        "regions": [{"name": "r", "gpu_pools": [pool]}],
        "models": [{"name": "m", "pool": "gpus", "profile": str(replica),
                    "block_tokens": block_tokens, "min_replicas": replicas,
                    "initial_replicas": replicas, "max_replicas": replicas}],
        "tenants": [{"name": "t", "model": "m"}],
        "workload": {"sources": [{"kind": "mooncake", "tenant": "t", "path": str(trace),
                                  "rate_rps": count / span}]},
        "policies": [{"name": _label(i), "routing": policy, "autoscale": "fixed",
                      "traffic": "static"} for i, policy in enumerate(routing.values())],
    }  # fmt: skip
