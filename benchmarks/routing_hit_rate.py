"""Prefix cache hit rate of smg's routing policies against an unlimited cache, side by side.

One local fleet per request rate (`radixfleet.fleet`), with a region per arm that differs only in
how its smg 1.13.0 gateway routes, each with the same emulated SGLang replicas (real H100 step
times) whose KV cache may hold less than the workload's prefixes, as a busy replica's does:

- `round_robin`: the baseline, over HTTP;
- `approximate`: `cache_aware` over HTTP, on the tree smg builds from the text it sent where;
- `event`: `cache_aware` over SGLang's gRPC protocol, on the index smg builds from the replicas'
  own KV-cache events (`--kv-index positional`, smg's defaults otherwise: its warm-up slice on).

The same seeded workload is replayed through each arm's region entry in turn: a shared-prefix
workload (SGLang's benchmark shape by default: a few long system prompts, many short questions
behind each, in random order, Poisson arrivals; `--groups 150 --prefix-tokens 6000 --replicas 8`
gives llm-d's multi-tenant shape). The hit rate is cached prompt tokens over prompt tokens, as
the replicas reported them in each answer's usage; the oracle is what one unlimited radix cache
would hit on the same token ids (16-token pages), which no routing can beat. The working set
(every prefix once) is reported against the fleet's KV budget, so a policy short of the oracle
is either routing badly or out of memory.

The twin replays the very same requests on its model of each arm (`round_robin`,
`smg_cache_aware_http`, `smg_cache_aware`; the median of three seeds), side by side.

Writes `routing_hit_rate.json` (per rate and arm: hit rate, its share of the oracle, the twin's
hit rate, TTFT p50/p95/p99, throughput, smg's decisions; the settings, seed and machine) and
`routing_hit_rate.png`. For reference, SGLang's v0.4 blog measured 75% vs 20% cache hits on 8
A100s (DP8) with a shared-prefix workload.

    uv run python benchmarks/routing_hit_rate.py [--rates 8 16] [--replicas 4] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.fleet import FleetSpec, LocalFleet, ModelSpec, RegionSpec
from radixfleet.fleet.spec import RouterPolicy, WorkerTransport
from radixfleet.machine import describe_machine
from radixfleet.twin.replay import fixed_fleet_hit_rates
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.records import WorkItem
from radixfleet.workload.replay import Replayer
from radixfleet.workload.stats import summarise
from radixfleet.workload.synthetic import SharedPrefixSpec, shared_prefix_workload

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
MODEL = "llama-3-1-8b"
PAGE_TOKENS = 16  # the emulator's cache page, and smg's block size for its event index
ARMS: dict[str, tuple[RouterPolicy, WorkerTransport]] = {
    "round_robin": ("round_robin", "http"),
    "approximate": ("cache_aware", "http"),
    "event": ("cache_aware", "grpc"),
}
# The twin's model of each arm (radixfleet/twin/routing.py), run on the very same requests.
TWIN_ROUTING = {
    "round_robin": "round_robin",
    "approximate": "smg_cache_aware_http",
    "event": "smg_cache_aware",
}
TWIN_SEEDS = 3  # which idle replica takes a miss is a coin toss: the median of a few
COLORS = {"round_robin": "#e45756", "approximate": "#f58518", "event": "#4c78a8"}


def fleet_spec(*, replicas: int, kv_tokens: int) -> FleetSpec:
    model = ModelSpec(
        name=MODEL, replicas=replicas, max_replicas=replicas,
        profile_overrides={"kv_capacity_tokens": kv_tokens},
    )  # fmt: skip
    regions = [
        RegionSpec(name=arm, router_policy=policy, router_workers=workers, models=[model])
        for arm, (policy, workers) in ARMS.items()
    ]
    return FleetSpec(regions=regions)


def oracle_hit_rate(prompts: list[str], tokenizer: EmulatorTokenizer) -> float:
    """Share of prompt tokens one unlimited radix cache would serve, in whole pages."""
    seen: set[int] = set()
    hit = total = 0
    for prompt in prompts:
        ids = tokenizer.encode(prompt)
        total += len(ids)
        matched, prefix = True, ()
        for start in range(0, len(ids) - len(ids) % PAGE_TOKENS, PAGE_TOKENS):
            prefix = (*prefix, hash(tuple(ids[start : start + PAGE_TOKENS])))
            key = hash(prefix)
            if matched and key in seen:
                hit += PAGE_TOKENS
            else:
                matched = False
            seen.add(key)
    return hit / total if total else 0.0


def run_rate(
    args: argparse.Namespace, rate: float, prompts: list[str], requests: list[Any]
) -> dict[str, Any]:
    """A fresh fleet (cold caches), the workload through every arm in turn."""
    out: dict[str, Any] = {}
    with LocalFleet(fleet_spec(replicas=args.replicas, kv_tokens=args.kv_tokens)) as fleet:
        for arm in ARMS:
            items = [
                WorkItem(r.at * args.rates[0] / rate, arm, MODEL, prompt, r.output_tokens)
                for r, prompt in zip(requests, prompts, strict=True)
            ]
            outcome = asyncio.run(Replayer(entries=fleet.entry_urls()).run(items))
            out[arm] = summarise(outcome).to_dict()
        decisions = fleet.routing_decisions()
    for arm in ARMS:
        out[arm]["smg_decisions"] = decisions[f"{arm}/{MODEL}"]
    return out


def twin_rate(args: argparse.Namespace, rate: float, requests: list[Any]) -> dict[str, float]:
    """The twin's hit rate per arm on the same requests at `rate` (median over seeds)."""
    scaled = [replace(r, at=r.at * args.rates[0] / rate) for r in requests]
    runs = []
    for seed in range(TWIN_SEEDS):
        with tempfile.TemporaryDirectory() as work:
            run = fixed_fleet_hit_rates(
                scaled, routing=TWIN_ROUTING, replicas=args.replicas,
                kv_tokens=args.kv_tokens, workdir=Path(work), seed=seed,
            )  # fmt: skip
            runs.append(run)
    return {arm: round(statistics.median(run[arm] for run in runs), 4) for arm in ARMS}


def run(args: argparse.Namespace) -> dict[str, Any]:
    workload = SharedPrefixSpec(
        groups=args.groups,
        requests_per_group=args.per_group,
        prefix_tokens=args.prefix_tokens,
        question_tokens=64,
        output_tokens=8,
        rate=args.rates[0],
        seed=args.seed,
        block_tokens=512,  # Mooncake's, so the twin replays the same block ids
    )
    requests = shared_prefix_workload(workload)
    tokenizer = load_tokenizer()
    synth = PromptSynth(tokenizer)
    prompts = [synth.prompt(r, index=i) for i, r in enumerate(requests)]
    oracle = oracle_hit_rate(prompts, tokenizer)
    per_rate = {str(rate): run_rate(args, rate, prompts, requests) for rate in args.rates}
    twin = {str(rate): twin_rate(args, rate, requests) for rate in args.rates}
    return {
        "benchmark": "routing_hit_rate",
        "oracle_hit_rate": round(oracle, 4),
        "hit_rate": {
            rate: {arm: _rounded(r[arm]["prefix_cache_hit_rate"]) for arm in ARMS}
            for rate, r in per_rate.items()
        },
        "share_of_oracle": {
            rate: {arm: _share(r[arm]["prefix_cache_hit_rate"], oracle) for arm in ARMS}
            for rate, r in per_rate.items()
        },
        "twin_hit_rate": twin,
        "results": per_rate,
        "settings": {
            "rates": args.rates,
            "replicas_per_arm": args.replicas,
            "kv_capacity_tokens_per_replica": args.kv_tokens,
            "fleet_kv_tokens_per_arm": args.replicas * args.kv_tokens,
            "working_set_tokens": args.groups * args.prefix_tokens,
            "workload": vars(workload),
            "router": "smg 1.13.0 (PyPI), defaults but the policy; HTTP or gRPC workers",
            "seed": args.seed,
        },
        "machine": describe_machine(),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _share(value: float | None, oracle: float) -> float | None:
    return None if value is None or not oracle else round(value / oracle, 3)


def plot(result: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(9, 3.4), dpi=100)
    hits, ttft = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    rates = list(result["hit_rate"])
    width = 0.8 / len(ARMS)
    for offset, arm in enumerate(ARMS):
        xs = [i + (offset - 1) * width for i in range(len(rates))]
        hits.bar(xs, [(result["hit_rate"][r][arm] or 0) * 100 for r in rates], width,
                 label=arm, color=COLORS[arm])  # fmt: skip
        twin = [result["twin_hit_rate"][r][arm] * 100 for r in rates]
        hits.scatter(xs, twin, marker="x", color="#222", zorder=3,
                     label="twin" if offset == 0 else None)  # fmt: skip
        p95 = [result["results"][r][arm]["ttft_s"]["p95"] or 0 for r in rates]
        ttft.plot(rates, [v * 1000 for v in p95], marker="o", label=arm, color=COLORS[arm])
    hits.axhline(result["oracle_hit_rate"] * 100, color="#222", ls="--", label="oracle")
    hits.set_xticks(range(len(rates)), [f"{r} req/s" for r in rates])
    hits.set_ylabel("prefix cache hit rate (%)")
    hits.set_ylim(0, 100)
    hits.legend(fontsize=7)
    ttft.set_xlabel("requests / s")
    ttft.set_ylabel("TTFT p95 (ms)")
    ttft.legend(fontsize=7)
    settings = result["settings"]
    working, budget = settings["working_set_tokens"], settings["fleet_kv_tokens_per_arm"]
    fig.suptitle(
        f"{settings['replicas_per_arm']} replicas per arm; working set {working:,} tokens, "
        f"fleet KV {budget:,}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[8.0, 16.0])
    parser.add_argument("--replicas", type=int, default=4, help="replicas per arm")
    parser.add_argument("--groups", type=int, default=48, help="shared prefixes (tenants)")
    parser.add_argument("--per-group", type=int, default=6, help="requests per prefix")
    parser.add_argument("--prefix-tokens", type=int, default=4096)
    # The working set (48 x 4,096 tokens) fits the fleet's KV (4 x 64,000) but not one replica.
    parser.add_argument("--kv-tokens", type=int, default=64_000, help="KV cache per replica")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    started = time.monotonic()
    result = run(args)
    result["seconds"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "routing_hit_rate.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out / "routing_hit_rate.png")
    keys = ("oracle_hit_rate", "hit_rate", "twin_hit_rate", "share_of_oracle")
    print(json.dumps({k: result[k] for k in keys}))


if __name__ == "__main__":
    main()
