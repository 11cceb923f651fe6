"""Pre-warming benchmark in the fleet twin: new replicas sent the model's hottest prefixes before
they take traffic, against new replicas that start cold, side by side on the same arrivals
(issue 17).

One region of H100s serves Llama-3.1-8B (CALIBRATION.md) behind smg's event-driven cache-aware
routing, scaled by radixfleet's autoscaler; the load triples for a while, so the autoscaler
adds replicas. Two shapes of prompt, each over `--seeds` seeds:

- `system-prompts`: 64 system prompts of 4,096 tokens, each with short questions;
- `long-contexts`: 150 tenants' 6,144-token contexts (llm-d's multi-tenant shape, issue 19).

Per arm: the prefix hit rate of the requests new replicas served in their first minute of
traffic, against that of replicas serving for five minutes or more (the goal: within 10%),
plus GPU-hours, TTFT p95 and SLO attainment. Medians over the seeds.

Writes benchmarks/results/prewarm_twin.json and prewarm_twin.png.

    uv run python benchmarks/prewarm_twin.py
    uv run python benchmarks/prewarm_twin.py --factor 5   # writes prewarm_twin-x5.json

A rise other than threefold writes prewarm_twin-x<factor>.json (and .png) instead.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from radixfleet.twin.run import run_scenario
from radixfleet.twin.scenario import Scenario

ARMS = {
    "prewarm": "radixfleet.controllers.autoscale.twin:radixfleet",
    "cold": "radixfleet.controllers.autoscale.twin:no_prewarm",
}
# Rates before the rise, chosen so that the tripled load stays within the pool's 16 GPUs.
SHAPES = {
    "system-prompts": {"rate_rps": 8.0, "groups": 64, "system_prompt_tokens": 4096,
                       "question_tokens": 128},
    "long-contexts": {"rate_rps": 2.0, "groups": 150, "system_prompt_tokens": 6144,
                      "question_tokens": 256},
}  # fmt: skip
KEYS = (
    "new_replica_hit_rate",
    "settled_replica_hit_rate",
    "prefix_hit_rate",
    "gpu_hours",
    "ttft_p95_s",
    "slo_attainment",
    "failed",
)
GOAL = 0.9  # a new replica's first-minute hit rate over a settled replica's


def scenario(shape: str, *, seed: int, minutes: float, factor: float = 3.0) -> Scenario:
    """One region, one model, the load times `factor` from a fifth to four fifths of the run."""
    duration = minutes * 60.0
    source = {"kind": "shared_prefix", "tenant": "chat", "output_tokens": 64}
    return Scenario.model_validate(
        {
            "name": f"prewarm-{shape}",
            "description": f"{shape}: a shared-prefix model scaling up, new replicas warm or cold",
            "seed": seed,
            "duration_s": duration,
            "regions": [{"name": "us-east-1",
                         "gpu_pools": [{"name": "h100", "gpus": 16, "warm_gpus": 16}]}],
            "models": [{"name": "llama-8b", "pool": "h100", "min_replicas": 1,
                        "initial_replicas": 2, "max_replicas": 16,
                        "slo": {"ttft_ms": 1000, "itl_ms": 50}}],
            "tenants": [{"name": "chat", "model": "llama-8b"}],
            "workload": {"sources": [source | SHAPES[shape]]},
            "faults": [{"kind": "tenant_burst", "at_s": duration / 5, "tenant": "chat",
                        "duration_s": duration * 3 / 5, "factor": factor}],
            "policies": [
                {"name": arm, "routing": "smg_cache_aware", "autoscale": factory,
                 "traffic": "static", "baseline": arm == "cold"}
                for arm, factory in ARMS.items()
            ],
        }
    )  # fmt: skip


def run_shape(shape: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every seed of one shape: per arm the runs' numbers and their medians."""
    runs = []
    for seed in range(args.seeds):
        chosen = scenario(shape, seed=100 + seed, minutes=args.minutes, factor=args.factor)
        metrics = run_scenario(chosen, oracles=False).results["metrics"]
        runs.append({arm: {k: metrics[arm][k] for k in KEYS} for arm in ARMS})
    medians = {arm: {k: _median([r[arm][k] for r in runs]) for k in KEYS} for arm in ARMS}
    for row in medians.values():
        new, settled = row["new_replica_hit_rate"], row["settled_replica_hit_rate"]
        row["new_over_settled"] = new / settled if new is not None and settled else None
    return {"runs": runs, "median": medians}


def _median(values: list[Any]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def plot(shapes: dict[str, dict[str, Any]], path: Path) -> None:
    """Per shape, the first-minute and settled hit rates of each arm."""
    figure, axes = plt.subplots(1, len(shapes), figsize=(5 * len(shapes), 3.6), squeeze=False)
    for ax, (shape, result) in zip(axes[0], shapes.items(), strict=True):
        labels, values = [], []
        for arm in ARMS:
            row = result["median"][arm]
            labels += [f"{arm}\nfirst minute", f"{arm}\nsettled"]
            values += [row["new_replica_hit_rate"] or 0.0, row["settled_replica_hit_rate"] or 0.0]
        ax.bar(labels, values, color=["tab:orange", "tab:blue", "tab:gray", "tab:blue"])
        ax.set_title(shape)
        ax.set_ylim(0, 1)
        ax.set_ylabel("prefix hit rate (median)")
        ax.tick_params(axis="x", labelsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--factor", type=int, default=3, help="the rise of the load (>= 2)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    if args.factor < 2:
        parser.error(f"--factor: at least 2, got {args.factor}")
    load_before = os.getloadavg()
    started = time.perf_counter()
    shapes = {shape: run_shape(shape, args) for shape in SHAPES}
    result = {
        "benchmark": "prewarm_twin",
        "settings": vars(args) | {"out": str(args.out), "shapes": SHAPES},
        "shapes": shapes,
        "goals": {
            shape: {
                "first_minute_within_10pct_of_settled": (
                    r["median"]["prewarm"]["new_over_settled"] or 0.0
                )
                >= GOAL
            }
            for shape, r in shapes.items()
        },
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "wall_s": round(time.perf_counter() - started, 1),
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "prewarm_twin" + ("" if args.factor == 3 else f"-x{args.factor}")
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(shapes, args.out / f"{name}.png")
    print(json.dumps({s: r["median"] for s, r in shapes.items()} | {"goals": result["goals"]},
                     indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
