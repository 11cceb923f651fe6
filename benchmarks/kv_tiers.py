"""What SGLang HiCache's tiers buy long prompts, in the fleet twin, at equal GPUs.

Four fixed replicas of `h100-llama-3.1-8b` (420k tokens of GPU KV each) behind one gateway,
on two workloads, each arm on the same arrivals:

- `gpu_only`: the GPU's prefix cache alone, smg's `cache_aware` on the replicas' KV events
  (`smg_cache_aware`);
- `host_smg`: a host tier per replica (`--host-gib`, 200 GiB by default: a p5.48xlarge has
  2 TiB for its 8 GPUs, 256 GiB a GPU, less the pod's own memory), under smg 1.13's own
  `cache_aware`, whose event index matches the host tier's blocks as it matches the GPU's: by
  depth alone, whatever the tier (tests/test_emulator_hicache_router.py);
- `host`: the same host tier, routed by the prefill time each worker's prefix saves on the GPU
  and the host (`smg_cache_aware_tiered`: the rule a tier-aware gateway would follow; smg
  1.13 does not);
- `host_storage`: that plus a storage backend shared by the four replicas (`--storage-gib`,
  2 TiB by default, like Mooncake's store), tier-aware routing;
- the unbounded prefix oracle (`radixfleet.twin.oracles.prefix_oracle`: one infinite cache).

Workloads: `mooncake`, Mooncake's public conversation trace (15k-token prompts on average,
most continuing an earlier turn) at its own rate (3.4 req/s), its first `--minutes` (58: the
whole trace, once); `long_doc_qa`,
short questions about `--documents` documents of 20k-60k tokens, Zipf popularity
(`--zipf`), Poisson arrivals at `--doc-rps`. The SLO is TTFT 2 s (a 15k-token prompt takes
0.6 s to prefill alone) and ITL 50 ms.

Per arm, the median over `--seeds` (the seed moves the long-document workload and every arm's
routing draws; the Mooncake trace is the same requests each time): prefix hit rate and its
share of the oracle's, hit rate by tier, TTFT p50/p95, goodput within the SLO, the host
memory in use at its peak (GiB, all replicas), and ratios over `gpu_only`. Writes
benchmarks/results/kv_tiers.json (with the trace, seeds and machine) and kv_tiers.png.

    uv run python benchmarks/kv_tiers.py [--minutes 58] [--seeds 1 2 3] [--host-gib 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from radixfleet.machine import describe_machine
from radixfleet.twin.oracles import prefix_oracle
from radixfleet.twin.run import run_scenario
from radixfleet.twin.scenario import Scenario
from radixfleet.twin.workload import DEFAULT_TRACES, Workload

REPLICAS = 4
ARMS = ("gpu_only", "host_smg", "host", "host_storage")
ROUTING = {
    "gpu_only": "smg_cache_aware",
    "host_smg": "smg_cache_aware",
    "host": "smg_cache_aware_tiered",
    "host_storage": "smg_cache_aware_tiered",
}
KEYS = ("prefix_hit_rate", "ttft_p50_s", "ttft_p95_s", "goodput_rps", "slo_attainment")


def scenario(workload: str, arm: str, seed: int, args: argparse.Namespace) -> Scenario:
    """One arm on one workload: four fixed replicas, one region, one policy set."""
    model: dict[str, Any] = {
        "name": "llama-8b", "pool": "h100", "min_replicas": REPLICAS,
        "initial_replicas": REPLICAS, "max_replicas": REPLICAS,
        "slo": {"ttft_ms": 2000, "itl_ms": 50},
    }  # fmt: skip
    if arm != "gpu_only":
        storage = args.storage_gib if arm == "host_storage" else None
        model["kv_tiers"] = {"host_gib": args.host_gib, "storage_gib": storage}
    return Scenario.model_validate(
        {
            "name": _dns(f"kv-tiers-{workload}-{arm}"), "seed": seed,
            "duration_s": args.minutes * 60,
            "regions": [{"name": "r1", "gpu_pools": [{"name": "h100", "gpus": REPLICAS}]}],
            "models": [model],
            "tenants": [{"name": "t", "model": "llama-8b"}],
            "workload": {"sources": [source(workload, args)]},
            "policies": [{"name": _dns(arm), "routing": ROUTING[arm], "autoscale": "fixed",
                          "traffic": "static"}],
        }
    )  # fmt: skip


def _dns(name: str) -> str:
    return name.replace("_", "-")


def source(workload: str, args: argparse.Namespace) -> dict[str, Any]:
    """The workload's source entry."""
    if workload == "mooncake":
        return {"kind": "mooncake", "tenant": "t", "path": str(args.trace)}
    return {
        "kind": "long_doc_qa", "tenant": "t", "rate_rps": args.doc_rps,
        "documents": args.documents, "zipf_s": args.zipf,
    }  # fmt: skip


def run_arm(workload: str, arm: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One arm's numbers on one seed."""
    outcome = run_scenario(scenario(workload, arm, seed, args), oracles=False)
    metrics = outcome.results["metrics"][_dns(arm)]
    row = {key: metrics[key] for key in KEYS}
    row["host_gib_used_peak"] = metrics.get("host_gib_used_peak", 0.0)
    row["storage_gib_used_peak"] = metrics.get("storage_gib_used_peak", 0.0)
    row["hit_rate_by_tier"] = metrics.get(
        "prefix_hit_rate_by_tier", {"device": metrics["prefix_hit_rate"]}
    )
    row["requests"] = metrics["requests"]
    return row


def oracle(workload: str, seed: int, args: argparse.Namespace) -> float:
    """The unbounded cache's hit rate on the same arrivals (the arms share them)."""
    return prefix_oracle(Workload(scenario(workload, "gpu_only", seed, args)))["llama-8b"]


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number's median over the seeds (each key on its own)."""
    out: dict[str, Any] = {}
    for key, value in rows[0].items():
        if isinstance(value, dict):
            out[key] = {k: statistics.median(r[key].get(k, 0.0) for r in rows) for k in value}
        elif value is not None:
            out[key] = statistics.median(r[key] for r in rows if r[key] is not None)
    return out


def summarize(runs: dict[str, list[dict[str, Any]]], oracles: list[float]) -> dict[str, Any]:
    """Per arm: the medians, the share of the oracle's hit rate, the ratios over gpu_only."""
    table = {arm: median_row(rows) for arm, rows in runs.items()}
    best = statistics.median(oracles)
    base = table["gpu_only"]
    for row in table.values():
        row["hit_rate_vs_oracle"] = row["prefix_hit_rate"] / best if best else None
        row["vs_gpu_only"] = {
            key: row[key] / base[key] if base.get(key) else None
            for key in ("prefix_hit_rate", "ttft_p50_s", "ttft_p95_s", "goodput_rps")
        }
    return {"oracle_hit_rate": best, "oracle_by_seed": oracles, "arms": table, "seeds": runs}


def run_workload(workload: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every arm on every seed of one workload."""
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    oracles = []
    for seed in args.seeds:
        oracles.append(oracle(workload, seed, args))
        for arm in ARMS:
            runs[arm].append(run_arm(workload, arm, seed, args))
            print(workload, seed, arm, json.dumps(runs[arm][-1]), flush=True)
    return summarize(runs, oracles)


def plot(results: dict[str, Any], path: Path) -> None:
    """Per workload: hit rate against the oracle, and TTFT p95, by arm."""
    figure, axes = plt.subplots(2, 2, figsize=(11, 7))
    for column, (workload, summary) in enumerate(results.items()):
        arms = summary["arms"]
        hit, ttft = axes[0][column], axes[1][column]
        names = [*arms, "oracle"]
        rates = [100 * arms[a]["prefix_hit_rate"] for a in arms]
        hit.bar(
            names, [*rates, 100 * summary["oracle_hit_rate"]], color=["C0"] * len(arms) + ["C7"]
        )
        hit.set_ylabel("prefix hit rate (%)")
        hit.set_title(workload)
        ttft.bar(list(arms), [arms[a]["ttft_p95_s"] for a in arms], color="C1")
        ttft.set_ylabel("TTFT p95 (s)")
        for axis in (hit, ttft):
            axis.tick_params(axis="x", labelrotation=20)
    figure.suptitle(f"HiCache tiers in the twin: {REPLICAS} x H100 Llama-3.1-8B, median of seeds")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=58.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--host-gib", type=float, default=200.0)
    parser.add_argument("--storage-gib", type=float, default=2048.0)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACES["mooncake"])
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--zipf", type=float, default=0.8)
    parser.add_argument("--doc-rps", type=float, default=1.5)
    parser.add_argument("--workloads", nargs="+", default=["mooncake", "long_doc_qa"])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    started = time.perf_counter()
    results = {workload: run_workload(workload, args) for workload in args.workloads}
    document = {
        "benchmark": "kv_tiers",
        "trace": str(args.trace.name),
        "seeds": args.seeds,
        "settings": vars(args) | {"out": str(args.out), "trace": str(args.trace.name)},
        "replicas": REPLICAS,
        "profile": "h100-llama-3.1-8b",
        "slo": {"ttft_ms": 2000, "itl_ms": 50},
        "routing": ROUTING,
        "workloads": results,
        "machine": describe_machine() | {"wall_s": time.perf_counter() - started},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kv_tiers.json").write_text(json.dumps(document, indent=2) + "\n")
    plot(results, args.out / "kv_tiers.png")
    print(json.dumps({w: r["arms"] for w, r in results.items()}, indent=2))


if __name__ == "__main__":
    main()
