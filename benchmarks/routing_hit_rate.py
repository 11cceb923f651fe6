"""Prefix cache hit rate of smg's routing policies against an unlimited cache, side by side.

One local fleet per request rate (`radixfleet.localfleet`), with a region per arm that differs only
in how its smg 1.13.0 gateway routes, each with the same emulated SGLang replicas (real H100 step
times, or a stated fraction of them) whose KV cache may hold less than the workload's prefixes:

- `round_robin`: the baseline, over HTTP;
- `approximate`: `cache_aware` over HTTP, on the tree smg builds from the text it sent where;
- `event`: `cache_aware` over SGLang's gRPC protocol, on the index smg builds from the replicas'
  own KV-cache events (`--kv-index positional`, smg's defaults otherwise: its warm-up slice on);
- with `--router-replicas N`, the same policies on N router replicas per model, the entry
  spreading requests over them at random (as a Kubernetes Service would) or by a consistent
  hash of the prompt's opening (`radixfleet.localfleet.entry.RouterPool`): `event_xN_random`,
  `approximate_xN_random`, `approximate_xN_prefix`.

Scenarios (`--scenario`), each replayed through every arm in turn with the same seeded requests:

- `shared-prefix`: SGLang's benchmark shape (a few long system prompts, many short questions
  behind each, random order, Poisson arrivals), 4 replicas whose KV holds the working set only
  together;
- `multi-tenant`: llm-d's shape, 150 tenants x a 6k-token context, 8 replicas, rising rates until
  the fleet saturates; the replicas step at 1/4 of H100 speed (`time_scale` 4) so that two CPU
  cores can drive them to saturation: the H100-equivalent rate is 4x, its TTFT a quarter;
- `mooncake`: whole sessions of Mooncake's public conversation trace (prompts of 12k tokens on
  average sharing a common head and their conversation's earlier turns, bursty arrivals),
  8 replicas; answers capped at 64 tokens so that the emulators' decode loops do not compete
  with the routers for the two cores.

Each rate runs `--repeats` fresh fleets (3 by default) and reports, per arm, the repeat with the
median hit rate, every repeat's hit rate and TTFT p90 listed beside it. The hit rate is cached
prompt tokens over prompt tokens, as the replicas reported them in each
answer's usage; the oracle is what one unlimited radix cache would hit on the same token ids
(16-token pages), which no routing can beat. The working set (every distinct block once) is
reported against the fleet's KV budget, so a policy short of the oracle is either routing badly
or out of memory. The twin replays the very same requests on its model of the single-router
arms (`round_robin`, `smg_cache_aware_http`, `smg_cache_aware`; the median of three seeds).

Writes `routing_hit_rate[_<scenario>].json` (per rate and arm: hit rate, its share of the oracle,
the twin's hit rate, TTFT p50/p90/p95/p99, throughput, smg's decisions; the settings, seed and
machine) and the matching `.png`. For reference, SGLang's v0.4 blog measured 75% vs 20% cache
hits on 8 A100s (DP8) with a shared-prefix workload; llm-d reports P90 TTFT 0.54 s vs 31 s for
approximate routing on its multi-tenant shape.

    uv run python benchmarks/routing_hit_rate.py [--scenario shared-prefix] [--rates 8 16]
        [--router-replicas 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from radixfleet.emulator.tokenizer import EmulatorTokenizer, load_tokenizer
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.localfleet.spec import RouterPolicy, RouterSpread, WorkerTransport
from radixfleet.machine import describe_machine
from radixfleet.profile import ReplicaProfile
from radixfleet.twin.replay import fixed_fleet_hit_rates
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.records import RequestResult, WorkItem
from radixfleet.workload.replay import Replayer
from radixfleet.workload.stats import percentile, summarise
from radixfleet.workload.synthetic import SharedPrefixSpec, shared_prefix_workload
from radixfleet.workload.traces import (
    TraceRequest,
    compress,
    iter_blocks,
    read_mooncake,
    sample_sessions,
)

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
MOONCAKE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake-conversation.jsonl"
MODEL = "llama-3-1-8b"
PAGE_TOKENS = 16  # the emulator's cache page, and smg's block size for its event index
TWIN_SEEDS = 3  # which idle replica takes a miss is a coin toss: the median of a few


@dataclass(frozen=True)
class Arm:
    """One way to route: smg's policy, how it reaches the replicas, how many smg replicas."""

    policy: RouterPolicy
    workers: WorkerTransport
    twin: str | None = None  # the twin's model of it (radixfleet/twin/routing.py), if any
    routers: int = 1
    spread: RouterSpread = "prefix"
    color: str = "#888"


BASE_ARMS = {
    "round_robin": Arm("round_robin", "http", twin="round_robin", color="#e45756"),
    "approximate": Arm("cache_aware", "http", twin="smg_cache_aware_http", color="#f58518"),
    "event": Arm("cache_aware", "grpc", twin="smg_cache_aware", color="#4c78a8"),
}


def router_replica_arms(count: int) -> dict[str, Arm]:
    """The cache-aware arms again on `count` router replicas per model."""
    return {
        f"event_x{count}_random": Arm("cache_aware", "grpc", routers=count, spread="random",
                                      color="#72b7b2"),
        f"approximate_x{count}_random": Arm("cache_aware", "http", routers=count,
                                            spread="random", color="#eeca3b"),
        f"approximate_x{count}_prefix": Arm("cache_aware", "http", routers=count,
                                            spread="prefix", color="#b279a2"),
    }  # fmt: skip


@dataclass(frozen=True)
class Scenario:
    """A workload and the fleet it runs on; `rates` unless the command line gives others."""

    replicas: int
    kv_tokens: int | None  # per replica; None keeps the profile's (420,000 for the 8B on H100)
    rates: tuple[float, ...]
    time_scale: float = 1.0  # replicas step this many times slower than an H100
    output_cap: int | None = None


SCENARIOS = {
    # The working set (48 x 4,096 tokens) fits the fleet's KV (4 x 64,000) but not one replica.
    "shared-prefix": Scenario(replicas=4, kv_tokens=64_000, rates=(8.0, 16.0)),
    "multi-tenant": Scenario(replicas=8, kv_tokens=None, rates=(5.0, 10.0, 20.0, 40.0),
                             time_scale=4.0),
    "mooncake": Scenario(replicas=8, kv_tokens=None, rates=(4.0, 8.0, 16.0), output_cap=64),
}  # fmt: skip


def workload(name: str, args: argparse.Namespace, rate: float) -> list[TraceRequest]:
    """The scenario's requests arriving at `rate` per second, Mooncake's 512-token blocks."""
    if name == "mooncake":
        cap = SCENARIOS[name].output_cap or 1 << 30
        sessions = sample_sessions(read_mooncake(MOONCAKE), count=args.requests, seed=args.seed)
        capped = [replace(r, output_tokens=min(r.output_tokens, cap)) for r in sessions]
        return compress(capped, rate=rate)
    groups, prefix = (150, 6000) if name == "multi-tenant" else (48, 4096)
    spec = SharedPrefixSpec(
        groups=groups, requests_per_group=args.per_group, prefix_tokens=prefix,
        question_tokens=64, output_tokens=8, rate=rate, seed=args.seed, block_tokens=512,
    )  # fmt: skip
    return shared_prefix_workload(spec)


def region_of(arm: str) -> str:
    """The local-fleet region an arm runs in (region names are DNS labels)."""
    return arm.replace("_", "-")


def fleet_spec(arms: dict[str, Arm], scenario: Scenario) -> LocalFleetSpec:
    overrides = {} if scenario.kv_tokens is None else {"kv_capacity_tokens": scenario.kv_tokens}
    model = ModelSpec(
        name=MODEL, replicas=scenario.replicas, max_replicas=scenario.replicas,
        profile_overrides=overrides,
    )  # fmt: skip
    regions = [
        RegionSpec(name=region_of(name), router_policy=arm.policy,
                   router_workers=arm.workers, routers=arm.routers, router_spread=arm.spread,
                   models=[model])
        for name, arm in arms.items()
    ]  # fmt: skip
    return LocalFleetSpec(regions=regions, time_scale=scenario.time_scale)


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


def working_set_tokens(requests: Sequence[TraceRequest]) -> int:
    """Tokens of every distinct block once: what the fleet must hold to miss nothing twice."""
    blocks: dict[int, int] = {}
    for request in requests:
        for block, length in iter_blocks(request):
            blocks[block] = max(blocks.get(block, 0), length)
    return sum(blocks.values())


def run_rate(
    arms: dict[str, Arm], scenario: Scenario, requests: list[TraceRequest], prompts: list[str]
) -> dict[str, Any]:
    """A fresh fleet (cold caches), the requests through every arm in turn."""
    out: dict[str, Any] = {}
    with LocalFleet(fleet_spec(arms, scenario)) as fleet:
        for name in arms:
            region = region_of(name)
            items = [
                WorkItem(r.at, region, MODEL, prompt, r.output_tokens)
                for r, prompt in zip(requests, prompts, strict=True)
            ]
            outcome = asyncio.run(Replayer(entries=fleet.entry_urls(), timeout_s=600).run(items))
            out[name] = {**summarise(outcome).to_dict(), "ttft_p90_s": _p90(outcome)}
        decisions = fleet.routing_decisions()  # each arm's region has its own routers
    for name in arms:
        out[name]["smg_decisions"] = decisions[f"{region_of(name)}/{MODEL}"]
    return out


def median_run(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm, the repeat with the median hit rate (its TTFTs and decisions with it), and
    every repeat's hit rate and TTFT p90 beside it: one replay of a fleet on two shared cores
    is at the mercy of the scheduler, the median of several is not."""
    out = {}
    for arm in repeats[0]:
        ordered = sorted(repeats, key=lambda r: r[arm]["prefix_cache_hit_rate"] or 0.0)
        middle = ordered[(len(ordered) - 1) // 2][arm]
        out[arm] = {
            **middle,
            "repeats_hit_rate": [_rounded(r[arm]["prefix_cache_hit_rate"]) for r in repeats],
            "repeats_ttft_p90_s": [r[arm]["ttft_p90_s"] for r in repeats],
        }
    return out


def _p90(outcome: list[RequestResult]) -> float | None:
    ttfts = [t for r in outcome if r.ok and (t := r.ttft) is not None]
    return round(percentile(ttfts, 90), 4) if ttfts else None


def twin_rate(
    arms: dict[str, Arm], scenario: Scenario, requests: list[TraceRequest]
) -> dict[str, float]:
    """The twin's hit rate per single-router arm on the same requests (median over seeds),
    at H100 speed: a fleet `time_scale` times slower is the same fleet at that many times
    the rate."""
    routing = {name: arm.twin for name, arm in arms.items() if arm.twin is not None}
    scaled = [replace(r, at=r.at / scenario.time_scale) for r in requests]
    kv = scenario.kv_tokens or ReplicaProfile().kv_capacity_tokens
    runs = []
    for seed in range(TWIN_SEEDS):
        with tempfile.TemporaryDirectory() as work:
            run = fixed_fleet_hit_rates(
                scaled, routing=routing, replicas=scenario.replicas, kv_tokens=kv,
                workdir=Path(work), seed=seed,
            )  # fmt: skip
            runs.append(run)
    return {name: round(statistics.median(run[name] for run in runs), 4) for name in routing}


def run(args: argparse.Namespace) -> dict[str, Any]:
    scenario = SCENARIOS[args.scenario]
    scenario = replace(scenario, rates=tuple(args.rates or scenario.rates))
    arms = dict(BASE_ARMS)
    if args.router_replicas > 1:
        arms |= router_replica_arms(args.router_replicas)
    tokenizer = load_tokenizer()
    synth = PromptSynth(tokenizer)
    first = workload(args.scenario, args, scenario.rates[0])
    prompts = [synth.prompt(r, index=i) for i, r in enumerate(first)]
    oracle = oracle_hit_rate(prompts, tokenizer)
    per_rate, twin = {}, {}
    for rate in scenario.rates:
        requests = [replace(r, at=r.at * scenario.rates[0] / rate) for r in first]
        repeats = [run_rate(arms, scenario, requests, prompts) for _ in range(args.repeats)]
        per_rate[f"{rate:g}"] = median_run(repeats)
        twin[f"{rate:g}"] = twin_rate(arms, scenario, requests)
    kv = scenario.kv_tokens or ReplicaProfile().kv_capacity_tokens
    return {
        "benchmark": "routing_hit_rate",
        "scenario": args.scenario,
        "oracle_hit_rate": round(oracle, 4),
        "hit_rate": {
            rate: {arm: _rounded(r[arm]["prefix_cache_hit_rate"]) for arm in arms}
            for rate, r in per_rate.items()
        },
        "share_of_oracle": {
            rate: {arm: _share(r[arm]["prefix_cache_hit_rate"], oracle) for arm in arms}
            for rate, r in per_rate.items()
        },
        "ttft_p90_s": {
            rate: {arm: r[arm]["ttft_p90_s"] for arm in arms} for rate, r in per_rate.items()
        },
        "twin_hit_rate": twin,
        "results": per_rate,
        "settings": {
            "rates": list(scenario.rates),
            "h100_equivalent_rates": [rate * scenario.time_scale for rate in scenario.rates],
            "time_scale": scenario.time_scale,
            "arms": {name: vars(arm) for name, arm in arms.items()},
            "replicas_per_arm": scenario.replicas,
            "kv_capacity_tokens_per_replica": kv,
            "fleet_kv_tokens_per_arm": scenario.replicas * kv,
            "working_set_tokens": working_set_tokens(first),
            "requests": len(first),
            "prompt_tokens": sum(r.input_tokens for r in first),
            "output_cap": scenario.output_cap,
            "repeats": args.repeats,
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
    arms = result["settings"]["arms"]
    fig = Figure(figsize=(10, 3.6), dpi=100)
    hits, ttft = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    rates = list(result["hit_rate"])
    width = 0.8 / len(arms)
    for offset, (name, arm) in enumerate(arms.items()):
        xs = [i + (offset - (len(arms) - 1) / 2) * width for i in range(len(rates))]
        shares = [(result["hit_rate"][r][name] or 0) * 100 for r in rates]
        hits.bar(xs, shares, width, label=name, color=arm["color"])
        if arm["twin"] is not None:
            twin = [result["twin_hit_rate"][r][name] * 100 for r in rates]
            hits.scatter(xs, twin, marker="x", color="#222", zorder=3,
                         label="twin" if offset == 0 else None)  # fmt: skip
        p90 = [result["ttft_p90_s"][r][name] or 0 for r in rates]
        ttft.plot([float(r) for r in rates], [v * 1000 for v in p90], marker="o", label=name,
                  color=arm["color"])  # fmt: skip
    hits.axhline(result["oracle_hit_rate"] * 100, color="#222", ls="--", label="oracle")
    hits.set_xticks(range(len(rates)), [f"{r} req/s" for r in rates])
    hits.set_ylabel("prefix cache hit rate (%)")
    hits.set_ylim(0, 100)
    hits.legend(fontsize=6)
    ttft.set_xlabel("requests / s")
    ttft.set_ylabel("TTFT p90 (ms)")
    ttft.set_yscale("log")
    ttft.legend(fontsize=6)
    settings = result["settings"]
    working, budget = settings["working_set_tokens"], settings["fleet_kv_tokens_per_arm"]
    fig.suptitle(
        f"{result['scenario']}: {settings['replicas_per_arm']} replicas per arm "
        f"(time scale {settings['time_scale']:g}); working set {working:,} tokens, "
        f"fleet KV {budget:,}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="shared-prefix")
    parser.add_argument("--rates", type=float, nargs="+", help="the scenario's by default")
    parser.add_argument(
        "--router-replicas",
        type=int,
        default=1,
        help="also run the cache-aware arms on this many router replicas",
    )
    parser.add_argument("--per-group", type=int, default=6, help="requests per prefix")
    parser.add_argument("--requests", type=int, default=300, help="Mooncake: at least so many")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="fresh fleets per rate; the median repeat is reported",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    started = time.monotonic()
    result = run(args)
    result["seconds"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "" if args.scenario == "shared-prefix" else "_" + args.scenario.replace("-", "_")
    (args.out / f"routing_hit_rate{suffix}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out / f"routing_hit_rate{suffix}.png")
    keys = ("oracle_hit_rate", "hit_rate", "twin_hit_rate", "share_of_oracle", "ttft_p90_s")
    print(json.dumps({k: result[k] for k in keys}))


if __name__ == "__main__":
    main()
