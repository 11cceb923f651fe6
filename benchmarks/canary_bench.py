"""Canary benchmark in the fleet twin: radixfleet's canary controller against Flagger's defaults
and a rollout with no analysis, side by side on the same arrivals (issue 7).

One region of H100s serves Llama-3.1-8B (CALIBRATION.md) from the Azure LLM 2023 conversation
trace replayed at `--rate` requests/s (time-shifted copies merged, see radixfleet.twin.workload),
behind smg's cache-aware routing (its tree, as over HTTP) and Knative's autoscaler. At 30 s a
new revision is created and rolled out; three kinds of canary:

- `slow`: every step of the canary's replicas takes twice as long;
- `errors`: the canary's replicas answer 5% of requests with a 500 (passed on to the client,
  as smg 1.13 does; sglang-router 0.3.2 retried them on another pick);
- `good`: the canary is the stable revision again; only the traffic's noise differs;
- `near`: the canary's steps take 10% longer, inside the checks' 1.25x minimum effect: a model
  that should be promoted, where a p95 on a few dozen requests crosses the bound by chance.

Policies, each on the same seeded arrivals in one twin run:

- `radixfleet`: the canary controller's own `decide` with the CanaryPolicy's defaults (steps
  5/20/50%, 60 s interval, threshold 2, TTFT and ITL p95 within 1.25x of stable, errors within
  1 point, at least 50 requests per revision per window, else halt), a check beyond its bound
  failing only when significant (Mann-Whitney U on the latency histograms, Fisher's exact test
  on errors, one-sided p < 0.05), else halting for more data;
- `radixfleet-baseline`: the same controller judging the canary against a baseline (the stable
  model on replicas of its own, sent as much traffic as the canary: Kayenta's), which the twin
  runs beside the canary from its creation to the end of the rollout;
- `radixfleet-p95`: the same controller judging the p95s alone (before significance tests);
- `flagger`: Flagger's defaults (benchmarks/canary_flagger.py): 60 s, threshold 1, 10% steps to
  50%, success rate >= 99% and request duration p99 <= 500 ms; `flagger-ttft`: the same with the
  500 ms read on TTFT, the obvious LLM adaptation;
- `no-analysis`: canaryTrafficPercent stepped on radixfleet's schedule and never judged.

Per bad canary: time to detect (from the canary's creation, and from its first traffic, to its
rollback) and exposure (requests the canary served, and their share of the model's requests from
the creation to the end of the run). Per good and near canary: the false-rollback rate over
`--seeds` seeds, and the time to promote. Per arm, the run's GPU-hours (a baseline's replicas
included). Medians are over seeds.

Writes benchmarks/results/canary_bench.json and canary_bench.png.

    uv run python benchmarks/canary_bench.py            # 100 good and near seeds, 10 per bad
    uv run python benchmarks/canary_bench.py --quick    # 6 and 2: a look in a few minutes
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# canary_flagger lives beside this file; the twin imports policies by `module:attribute`.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from radixfleet.machine import describe_machine
from radixfleet.twin.epochs import RunRecord
from radixfleet.twin.run import run_scenario
from radixfleet.twin.scenario import Scenario

POLICIES = {
    "radixfleet": "radixfleet",
    "radixfleet-baseline": "radixfleet_baseline",
    "radixfleet-p95": "radixfleet.controllers.canary.twin:radixfleet_p95_only",
    "flagger": "canary_flagger:flagger_defaults",
    "flagger-ttft": "canary_flagger:flagger_ttft",
    "no-analysis": "no_analysis",
}
CANARIES: dict[str, dict[str, float]] = {
    "slow": {"slowdown": 2.0},
    "errors": {"error_rate": 0.05},
    "good": {},
    "near": {"slowdown": 1.1},
}
GOOD_KINDS = ("good", "near")
CANARY_AT_S = 30.0
TRACE = "Azure LLM 2023 conversation trace (../shared/traces/azure-llm-2023-conversation.csv)"


def scenario(kind: str, *, seed: int, rate: float, duration_s: float) -> Scenario:
    """One canary of `kind` under every policy, on the trace at `rate` requests/s."""
    return Scenario.model_validate(
        {
            "name": f"canary-{kind}",
            "description": f"{kind} canary at {CANARY_AT_S:g} s, Azure trace at {rate:g} req/s",
            "seed": seed,
            "duration_s": duration_s,
            "regions": [{"name": "us-east-1", "gpu_pools": [{"name": "h100", "gpus": 32}]}],
            "models": [
                {"name": "llama-8b", "pool": "h100", "min_replicas": 2, "max_replicas": 16,
                 "initial_replicas": max(2, round(rate / 8))}
            ],
            "tenants": [{"name": "chat", "model": "llama-8b"}],
            "workload": {
                "sources": [
                    {"kind": "azure", "tenant": "chat", "rate_rps": rate,
                     "system_prompt_tokens": 512}
                ]
            },
            "faults": [
                {"kind": "canary", "at_s": CANARY_AT_S, "model": "llama-8b",
                 "regression": CANARIES[kind]}
            ],
            "policies": [
                {"name": name, "routing": "smg_cache_aware_http", "autoscale": "kpa",
                 "traffic": "static", "canary": policy, "baseline": name != "radixfleet"}
                for name, policy in POLICIES.items()
            ],
        }
    )  # fmt: skip


def run_one(kind: str, *, seed: int, rate: float, duration_s: float) -> dict[str, Any]:
    """Every policy's rollout of one canary on one seed's arrivals."""
    built = scenario(kind, seed=seed, rate=rate, duration_s=duration_s)
    outcome = run_scenario(built, oracles=False)
    rows = {}
    for name in POLICIES:
        metrics = outcome.results["metrics"][name]
        rows[name] = _row(metrics["canary"][0], outcome.records[name])
        rows[name]["gpu_hours"] = metrics["gpu_hours"]
    return {"seed": seed, "policies": rows, "wall_s": outcome.timing["total_s"]}


def _row(canary: dict[str, Any], record: RunRecord) -> dict[str, Any]:
    decisions = [d for d in record.decisions if d.kind == "canary"]
    first = next((d.at for d in decisions if d.detail.startswith("weight")), None)
    end = next((d for d in decisions if d.detail.startswith(("rollback", "promote"))), None)
    detected = canary["detection_s"]
    return {
        "outcome": canary["outcome"],
        "detection_s": detected,
        "detection_after_traffic_s": (
            None if detected is None or first is None else CANARY_AT_S + detected - first
        ),
        "promoted_s": canary["promoted_s"],
        "exposure": canary["exposure"],
        "exposure_share": canary["exposure_share"],
        "exposure_failed": canary["exposure_failed"],
        "final_decision": None if end is None else end.detail[:300],
    }


def summarize(runs: list[dict[str, Any]], *, bad: bool) -> dict[str, Any]:
    """Per policy: how often it rolled back, and medians over seeds."""
    out = {}
    for name in POLICIES:
        rows = [run["policies"][name] for run in runs]
        rolled = sum(row["outcome"] == "rolled_back" for row in rows)
        entry = {
            "runs": len(rows),
            "rolled_back": rolled,
            "promoted": sum(row["outcome"] == "promoted" for row in rows),
            "median_exposure": _median([row["exposure"] for row in rows]),
            "median_exposure_share": _median([row["exposure_share"] for row in rows]),
            # The whole run's, baseline replicas included: what judging against one costs.
            "median_gpu_hours": _median([row["gpu_hours"] for row in rows]),
        }
        if bad:
            entry |= {
                "detection_rate": rolled / len(rows),
                "median_detection_s": _median([row["detection_s"] for row in rows]),
                "median_detection_after_traffic_s": _median(
                    [row["detection_after_traffic_s"] for row in rows]
                ),
            }
        else:
            entry |= {
                "false_rollback_rate": rolled / len(rows),
                "median_promoted_s": _median([row["promoted_s"] for row in rows]),
            }
        out[name] = entry
    return out


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def plot(summaries: dict[str, dict[str, Any]], path: Path) -> None:
    """Detection time and exposure for the bad canaries, false rollbacks for the good one."""
    names = list(POLICIES)
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for offset, kind in enumerate(("slow", "errors")):
        x = [i + 0.4 * offset for i in range(len(names))]
        exposure = [100 * (summaries[kind][n]["median_exposure_share"] or 0) for n in names]
        detect = [summaries[kind][n]["median_detection_s"] for n in names]
        axes[0].bar(x, [d if d is not None else 0 for d in detect], width=0.4, label=kind)
        axes[1].bar(x, exposure, width=0.4, label=kind)
        for xi, d, name in zip(x, detect, names, strict=True):
            row = summaries[kind][name]  # how many seeds the median is over
            axes[0].annotate(f"{row['rolled_back']}/{row['runs']}", (xi, d or 0), ha="center",
                             xytext=(0, 3), textcoords="offset points", fontsize=8)  # fmt: skip
    for offset, kind in enumerate(GOOD_KINDS):
        x = [i + 0.4 * offset for i in range(len(names))]
        false = [100 * summaries[kind][n]["false_rollback_rate"] for n in names]
        axes[2].bar(
            x, false, width=0.4, label=f"{kind} ({summaries[kind][names[0]]['runs']} seeds)"
        )
    titles = (
        "bad canary: median time to rollback (s; rolled back/seeds)",
        "bad canary: median share of traffic on it (%)",
        "good canaries: false rollbacks (% of seeds)",
    )
    for axis, title in zip(axes, titles, strict=True):
        axis.set_title(title, fontsize=10)
        axis.set_xticks([i + 0.2 for i in range(len(names))], names, fontsize=8)
    for axis in axes:
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=30.0, help="requests/s of the trace")
    parser.add_argument("--seeds", type=int, default=100, help="seeds per good canary")
    parser.add_argument("--bad-seeds", type=int, default=10, help="seeds per bad canary")
    parser.add_argument("--duration", type=float, default=600.0, help="virtual seconds per run")
    parser.add_argument("--quick", action="store_true", help="6 good seeds, 2 per bad canary")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.bad_seeds = 6, 2
    load_before = describe_machine()["load_average_1m"]
    started = time.perf_counter()
    seeds = {"slow": args.bad_seeds, "errors": args.bad_seeds, "good": args.seeds,
             "near": args.seeds}  # fmt: skip
    runs = {
        kind: [
            run_one(kind, seed=seed, rate=args.rate, duration_s=args.duration)
            for seed in range(count)
        ]
        for kind, count in seeds.items()
    }
    summaries = {kind: summarize(rows, bad=kind not in GOOD_KINDS) for kind, rows in runs.items()}
    result = {
        "benchmark": "canary_bench",
        "trace": TRACE,
        "settings": {
            "rate_rps": args.rate,
            "duration_s": args.duration,
            "canary_at_s": CANARY_AT_S,
            "seeds": seeds,
            "canaries": CANARIES,
            "policies": POLICIES,
            "model": "llama-8b on h100-llama-3.1-8b replicas, KPA autoscaling, cache_aware",
        },
        "summary": summaries,
        "runs": runs,
        "machine": describe_machine() | {"load_average_1m_before": load_before},
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "canary_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(summaries, args.out / "canary_bench.png")
    print(json.dumps(summaries, indent=2))


if __name__ == "__main__":
    main()
