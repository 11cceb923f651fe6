"""What SGLang HiCache's host tier buys long prompts on the local fleet, beside the twin.

The local-fleet half of issue 44's benchmark (`benchmarks/kv_tiers.py` is the twin's): one local
fleet (`radixfleet.localfleet`) with a region per arm, each the same model on `--replicas`
emulated SGLang replicas (H100 Llama-3.1-8B step times) whose GPU KV cache is cut to
`--kv-tokens` (32,768 by default: the emulator's, so what matters is its ratio to the working
set, which the JSON states), behind the real smg 1.13 `cache_aware` over gRPC (the index smg
builds from the replicas' KV events, which match host-tier blocks as GPU ones). Arms:

- `gpu_only`: SGLang's default, the GPU's prefix cache alone;
- `host`: `--enable-hierarchical-cache --hicache-ratio R` (`--host-ratio`, 4 by default: a host
  pool R times the GPU's, write-through), which holds the working set on each replica;
- `host_small`: the same with `--small-host-ratio` (1 by default: a host pool the GPU's size),
  where the GPU and the host together hold less than the working set, so what each replica
  keeps, and where smg sends a question, matter;
- the unbounded prefix oracle: one unlimited radix cache on the same token ids (16-token pages,
  as `benchmarks/routing_hit_rate.py` computes it), which no fleet can beat.

Workload (`long-doc QA`, seeded): `--documents` documents of 4k-12k tokens (whole 512-token
blocks), Zipf popularity (`--zipf`), a 32-token question of its own per request, 16-token
answers, `--requests` requests arriving as a Poisson process at `--rate`. Every arm gets the
very same requests; each repeat is a fresh fleet (cold caches).

Per arm, the median over `--repeats`: prefix hit rate (cached over prompt tokens, from the
answers' usage), the same by tier from the replicas' `sglang:cached_tokens_total{cache_source}`
over their `sglang:prompt_tokens_total`, its share of the oracle's, TTFT p50/p95; and the twin's
hit rate on the same requests and fleet shape (`fixed_fleet_hit_rates` with smg's event index,
with and without the host tier; the median of three seeds). Writes
benchmarks/results/kv_tiers_localfleet.json (workload, seed, machine) and kv_tiers_localfleet.png.

    uv run python benchmarks/kv_tiers_localfleet.py [--replicas 2] [--kv-tokens 32768]
        [--host-ratio 4] [--small-host-ratio 1] [--requests 180] [--rate 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from routing_hit_rate import oracle_hit_rate, region_of, working_set_tokens

from radixfleet.emulator.tokenizer import load_tokenizer
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.machine import describe_machine
from radixfleet.twin.replay import fixed_fleet_hit_rates
from radixfleet.workload.prompts import PromptSynth
from radixfleet.workload.records import RequestResult, WorkItem
from radixfleet.workload.replay import Replayer
from radixfleet.workload.stats import percentile, summarise
from radixfleet.workload.traces import TraceRequest

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
MODEL = "llama-3-1-8b"
BLOCK_TOKENS = 512  # Mooncake's block, so the twin reads the same block ids
QUESTION_TOKENS = 32
ANSWER_TOKENS = 16
DOC_BLOCKS = (8, 24)  # 4,096 to 12,288 tokens
TWIN_SEEDS = 3  # which idle replica takes a miss is a coin toss: the median of a few
ARMS = ("gpu_only", "host", "host_small")
COLORS = {"gpu_only": "#e45756", "host": "#4c78a8", "host_small": "#72b7b2"}


def long_doc_qa(args: argparse.Namespace) -> list[TraceRequest]:
    """Short questions about Zipf-popular documents, Poisson arrivals; each question its own."""
    rng = random.Random(args.seed)
    sizes = [rng.randint(*DOC_BLOCKS) for _ in range(args.documents)]
    weights = [(rank + 1) ** -args.zipf for rank in range(args.documents)]
    question_base = 1 << 32  # past every document block's id
    at, out = 0.0, []
    for index in range(args.requests):
        doc = rng.choices(range(args.documents), weights=weights)[0]
        blocks = tuple(doc * 64 + b for b in range(sizes[doc]))
        out.append(
            TraceRequest(
                at=at, input_tokens=len(blocks) * BLOCK_TOKENS + QUESTION_TOKENS,
                output_tokens=ANSWER_TOKENS, hash_ids=(*blocks, question_base + index),
                block_tokens=BLOCK_TOKENS,
            )
        )  # fmt: skip
        at += rng.expovariate(args.rate)
    return out


def host_ratio(arm: str, args: argparse.Namespace) -> float | None:
    """The arm's `--hicache-ratio` (host tokens over GPU tokens); None: no HiCache."""
    return {"gpu_only": None, "host": args.host_ratio, "host_small": args.small_host_ratio}[arm]


def host_tokens(arm: str, args: argparse.Namespace) -> int | None:
    """A replica's host tier in tokens, as the emulator sizes it from the ratio."""
    ratio = host_ratio(arm, args)
    return None if ratio is None else int(ratio * args.kv_tokens)


def sglang_args(arm: str, args: argparse.Namespace) -> list[str]:
    """The arm's SGLang flags, as its replicas start with them."""
    ratio = host_ratio(arm, args)
    if ratio is None:
        return []
    return ["--enable-hierarchical-cache", "--hicache-ratio", f"{ratio:g}"]


def fleet_spec(args: argparse.Namespace) -> LocalFleetSpec:
    """A region per arm: the same model and replicas, only the HiCache flags differ."""
    regions = [
        RegionSpec(
            name=region_of(arm), router_policy="cache_aware", router_workers="grpc",
            models=[ModelSpec(name=MODEL, replicas=args.replicas, max_replicas=args.replicas,
                              profile_overrides={"kv_capacity_tokens": float(args.kv_tokens)},
                              sglang_args=sglang_args(arm, args))],
        )
        for arm in ARMS
    ]  # fmt: skip
    return LocalFleetSpec(regions=regions)


def run_repeat(
    args: argparse.Namespace, requests: list[TraceRequest], prompts: list[str]
) -> dict[str, dict[str, Any]]:
    """A fresh fleet; the requests through every arm in turn; each arm's numbers."""
    out: dict[str, dict[str, Any]] = {}
    with LocalFleet(fleet_spec(args)) as fleet:
        for arm in ARMS:
            items = [
                WorkItem(r.at, region_of(arm), MODEL, prompt, r.output_tokens)
                for r, prompt in zip(requests, prompts, strict=True)
            ]
            outcome = asyncio.run(Replayer(entries=fleet.entry_urls(), timeout_s=600).run(items))
            out[arm] = answers(outcome)
            print(arm, json.dumps(out[arm]), flush=True)
        sources = fleet.cache_sources()
    for arm in ARMS:
        out[arm]["hit_rate_by_tier"] = by_tier(sources[f"{region_of(arm)}/{MODEL}"])
    return out


def answers(outcome: list[RequestResult]) -> dict[str, Any]:
    """Hit rate from the answers' usage, TTFT p50/p95, failures."""
    summary = summarise(outcome)
    ttfts = [t for r in outcome if r.ok and (t := r.ttft) is not None]
    return {
        "prefix_hit_rate": summary.prefix_cache_hit_rate,
        "ttft_p50_s": percentile(ttfts, 50) if ttfts else None,
        "ttft_p95_s": percentile(ttfts, 95) if ttfts else None,
        "requests": summary.requests,
        "failed": summary.failed,
    }


def by_tier(sources: dict[str, float]) -> dict[str, float]:
    """Cached tokens by `cache_source` over the replicas' prompt tokens."""
    prompt = sources.get("prompt_tokens", 0.0)
    return {
        tier: round(tokens / prompt, 4) if prompt else 0.0
        for tier, tokens in sources.items()
        if tier != "prompt_tokens"
    }


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number's median over the repeats (each key on its own), every hit rate beside."""
    out: dict[str, Any] = {}
    for key, value in rows[0].items():
        if isinstance(value, dict):
            tiers = sorted({tier for row in rows for tier in row[key]})
            out[key] = {t: statistics.median(row[key].get(t, 0.0) for row in rows) for t in tiers}
        else:
            values = [row[key] for row in rows if row[key] is not None]
            out[key] = statistics.median(values) if values else None
    out["repeats_hit_rate"] = [row["prefix_hit_rate"] for row in rows]
    return out


def twin_hit_rates(args: argparse.Namespace, requests: list[TraceRequest]) -> dict[str, float]:
    """The twin's hit rate per arm on the same requests and fleet shape (median of seeds)."""
    out = {}
    for arm in ARMS:
        runs = []
        for seed in range(TWIN_SEEDS):
            with tempfile.TemporaryDirectory() as work:
                rates = fixed_fleet_hit_rates(
                    requests, routing={arm: "smg_cache_aware"}, replicas=args.replicas,
                    kv_tokens=args.kv_tokens, workdir=Path(work), seed=seed,
                    host_tokens=host_tokens(arm, args),
                )  # fmt: skip
            runs.append(rates[arm])
        out[arm] = round(statistics.median(runs), 4)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    requests = long_doc_qa(args)
    tokenizer = load_tokenizer()
    synth = PromptSynth(tokenizer)
    prompts = [synth.prompt(r, index=i) for i, r in enumerate(requests)]
    oracle = oracle_hit_rate(prompts, tokenizer)
    repeats = [run_repeat(args, requests, prompts) for _ in range(args.repeats)]
    arms = {arm: median_row([r[arm] for r in repeats]) for arm in ARMS}
    twin = twin_hit_rates(args, requests)
    for arm, row in arms.items():
        row["share_of_oracle"] = _share(row["prefix_hit_rate"], oracle)
        row["twin_hit_rate"] = twin[arm]
        row["twin_share_of_oracle"] = _share(twin[arm], oracle)
    return {
        "benchmark": "kv_tiers_localfleet",
        "oracle_hit_rate": round(oracle, 4),
        "arms": arms,
        "repeats": repeats,
        "settings": settings(args, requests),
        "machine": describe_machine(),
    }


def settings(args: argparse.Namespace, requests: list[TraceRequest]) -> dict[str, Any]:
    """The workload, the fleet's shape and the seed, as the JSON states them."""
    return {
        "workload": {
            "shape": "long-doc QA", "documents": args.documents, "zipf_s": args.zipf,
            "document_tokens": [DOC_BLOCKS[0] * BLOCK_TOKENS, DOC_BLOCKS[1] * BLOCK_TOKENS],
            "question_tokens": QUESTION_TOKENS, "answer_tokens": ANSWER_TOKENS,
            "requests": len(requests), "rate_rps": args.rate, "arrivals": "Poisson",
            "prompt_tokens": sum(r.input_tokens for r in requests),
            "working_set_tokens": working_set_tokens(requests),
        },
        "replicas_per_arm": args.replicas,
        "profile": "h100-llama-3.1-8b (step times); GPU KV cut to kv_tokens",
        "kv_tokens_per_replica": args.kv_tokens,
        "fleet_gpu_kv_tokens": args.replicas * args.kv_tokens,
        "host_ratio": {arm: host_ratio(arm, args) for arm in ARMS},
        "host_tokens_per_replica": {arm: host_tokens(arm, args) for arm in ARMS},
        "sglang_args": {arm: sglang_args(arm, args) for arm in ARMS},
        "router": "smg 1.13.0, cache_aware over gRPC (event index), defaults otherwise",
        "twin": f"fixed_fleet_hit_rates, smg_cache_aware, median of {TWIN_SEEDS} seeds",
        "repeats": args.repeats,
        "seed": args.seed,
    }  # fmt: skip


def _share(value: float | None, oracle: float) -> float | None:
    return None if value is None or not oracle else round(value / oracle, 3)


def plot(result: dict[str, Any], path: Path) -> None:
    """Hit rate by tier against the twin and the oracle; TTFT p50 and p95, by arm."""
    arms = result["arms"]
    fig = Figure(figsize=(10, 3.8), dpi=100)
    hits, ttft = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for x, (arm, row) in enumerate(arms.items()):
        tiers = row["hit_rate_by_tier"]
        device, host = 100 * tiers.get("device", 0.0), 100 * tiers.get("host", 0.0)
        hits.bar(x, device, 0.6, color=COLORS[arm], label=f"{arm}: GPU")
        if host:
            hits.bar(x, host, 0.6, bottom=device, color=COLORS[arm], alpha=0.45,
                     label=f"{arm}: host")  # fmt: skip
        hits.scatter([x], [100 * (row["prefix_hit_rate"] or 0)], marker="o", color="#222",
                     zorder=3, label="answers' usage" if x == 0 else None)  # fmt: skip
        hits.scatter([x], [100 * row["twin_hit_rate"]], marker="x", s=60, color="#222",
                     zorder=3, label="twin" if x == 0 else None)  # fmt: skip
        for offset, key in ((-0.2, "ttft_p50_s"), (0.2, "ttft_p95_s")):
            ttft.bar(x + offset, 1000 * (row[key] or 0), 0.38, color=COLORS[arm],
                     alpha=1.0 if key == "ttft_p50_s" else 0.5)  # fmt: skip
    hits.axhline(100 * result["oracle_hit_rate"], color="#222", ls="--", label="oracle")
    hits.set_xticks(range(len(arms)), list(arms))
    hits.set_ylabel("prefix hit rate (%)")
    hits.set_ylim(0, 100)
    hits.legend(fontsize=6, loc="upper left")
    ttft.set_xticks(range(len(arms)), [f"{a}\n(p50 | p95)" for a in arms])
    ttft.set_ylabel("TTFT (ms)")
    s = result["settings"]
    fig.suptitle(
        f"local fleet, long-doc QA: {s['replicas_per_arm']} replicas x "
        f"{s['kv_tokens_per_replica']:,} GPU KV tokens (host x{args_ratios(s)}); working set "
        f"{s['workload']['working_set_tokens']:,} tokens; median of {s['repeats']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)


def args_ratios(settings: dict[str, Any]) -> str:
    """The arms' host ratios for the title: "4 or x1"."""
    return " or x".join(f"{r:g}" for r in settings["host_ratio"].values() if r is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--kv-tokens", type=int, default=32_768, help="GPU KV a replica")
    parser.add_argument("--host-ratio", type=float, default=4.0, help="host's --hicache-ratio")
    parser.add_argument("--small-host-ratio", type=float, default=1.0, help="host_small's")
    parser.add_argument("--documents", type=int, default=16)
    parser.add_argument("--zipf", type=float, default=0.8)
    parser.add_argument("--requests", type=int, default=180)
    parser.add_argument("--rate", type=float, default=4.0, help="requests per second")
    parser.add_argument("--repeats", type=int, default=3, help="fresh fleets; medians")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    started = time.monotonic()
    result = run(args)
    result["seconds"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kv_tiers_localfleet.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out / "kv_tiers_localfleet.png")
    print(json.dumps({"oracle_hit_rate": result["oracle_hit_rate"], "arms": result["arms"]}))


if __name__ == "__main__":
    main()
