"""What caching the weights on the GPU nodes buys a burst, in the fleet twin: the same bursts
scenario as `benchmarks/autoscale_twin.py` (two minutes of `--burst-rps` every fifteen over a
trickle, from one warm replica, H100s serving Llama-3.1-8B, seed 11), once with the pool
caching the weights on its nodes (KServe's local model cache: the catalog's `model_cache_gib`;
a new replica loads them from the node's disk) and once without (every new replica first
downloads its 16 GB from the model store: ~61 s at CALIBRATION.md's 260 MB/s). radixfleet's
autoscaler and Knative's KPA in both, side by side on the same arrivals.

Writes benchmarks/results/model_cache_twin.json (per pool and policy: GPU-hours, SLO
attainment, the share of requests that waited on a cold start, and the median burst's seconds
to its first new replica's first request with the attainment of the burst's requests before
and after it; ratios cached / uncached; the machine) and model_cache_twin.png.

    uv run python benchmarks/model_cache_twin.py --burst-rps 30
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from autoscale_twin import BASELINE, OURS, _short, burst_starts, bursts, scale_ups, summarize

from radixfleet.twin.run import Outcome, run_scenario
from radixfleet.twin.scenario import Scenario

POOLS = {"cached": True, "uncached": False}


def with_cache(scenario: Scenario, cached: bool) -> Scenario:
    """`scenario` with every GPU pool caching the weights on its nodes, or none."""
    data = scenario.model_dump()
    for region in data["regions"]:
        for pool in region["gpu_pools"]:
            pool["model_cache"] = cached
    data["description"] += ", weights " + ("on the nodes" if cached else "from the model store")
    return Scenario.model_validate(data)


def headline(outcome: Outcome, starts: list[float]) -> dict[str, Any]:
    summary, ups = summarize(outcome), scale_ups(outcome, starts)
    return {
        policy: {
            key: row[key] for key in ("gpu_hours", "slo_attainment", "cold_start_share")
        } | {
            key: ups[policy]["median"][key]
            for key in ("first_routable_s", "before_first", "attainment_before", "attainment_after")
        }
        for policy, row in summary["policies"].items()
    }  # fmt: skip


def plot(table: dict[str, dict[str, Any]], path: Path) -> None:
    """Per policy, attainment and the median burst's seconds to its first new replica, with
    and without the nodes' cache."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    policies = list(next(iter(table.values())))
    width = 0.35
    for n, (pool, rows) in enumerate(table.items()):
        xs = [i + (n - 0.5) * width for i in range(len(policies))]
        left.bar(xs, [100 * rows[p]["slo_attainment"] for p in policies], width, label=pool)
        right.bar(xs, [rows[p]["first_routable_s"] or 0.0 for p in policies], width, label=pool)
    for axis, label in ((left, "SLO attainment (%)"), (right, "s to the first new replica")):
        axis.set_xticks(range(len(policies)), policies)
        axis.set_ylabel(label)
        axis.legend()
    figure.suptitle("bursts from one warm replica: weights on the nodes vs from the model store")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst-minutes", type=float, default=60.0)
    parser.add_argument("--burst-rps", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    load_before, started = os.getloadavg(), time.perf_counter()
    base = bursts(minutes=args.burst_minutes, burst_rps=args.burst_rps, extra=[])
    starts = burst_starts(args.burst_minutes)
    table = {
        pool: headline(run_scenario(with_cache(base, cached)), starts)
        for pool, cached in POOLS.items()
    }
    ratios = {
        _short(policy): {
            key: table["cached"][_short(policy)][key] / table["uncached"][_short(policy)][key]
            for key in ("gpu_hours", "slo_attainment", "first_routable_s")
            if table["uncached"][_short(policy)][key]
        }
        for policy in (OURS, BASELINE)
    }
    result = {
        "benchmark": "model_cache_twin",
        "scenario": base.name,
        "seed": base.seed,
        "settings": vars(args) | {"out": str(args.out)},
        "pools": table,
        "cached_over_uncached": ratios,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "wall_s": time.perf_counter() - started,
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "model_cache_twin.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(table, args.out / "model_cache_twin.png")
    print(json.dumps({"pools": table, "cached_over_uncached": ratios}, indent=2))


if __name__ == "__main__":
    main()
