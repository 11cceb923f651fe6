"""Autoscaling benchmark in the fleet twin: radixfleet's autoscaler against Knative's KPA default
and the hindsight GPU oracle, side by side on the same arrivals (issue 10).

Two scenarios, one region of H100s serving Llama-3.1-8B (CALIBRATION.md) behind cache-aware
routing:

- `steady`: the Azure LLM 2023 conversation trace replayed at `--rate` requests/s (time-shifted
  copies merged, see radixfleet.twin.workload) for `--minutes`: a load of tens of replicas.
  Goal: the same or better SLO attainment than the KPA for at least 25% fewer GPU-hours, and
  within 20% of the oracle's GPU-hours.
- `bursts`: a scale-to-zero model with a trickle of requests and bursts of `--burst-rps` for two
  minutes every fifteen (longer gaps than the idle window). The model starts as Knative starts a
  revision, with one replica. Goal: at most 1% of requests wait on a cold start. Per policy,
  where each burst's seconds go (radixfleet/twin/scaleup.py): to the first replica scheduled
  for it, to a node, the cold start, the warm-up, and the attainment of the burst's requests
  before its first new replica took traffic and after; medians over the bursts.

Writes benchmarks/results/autoscale_twin.json (numbers, ratios, goals, settings, the
machine's load) and autoscale_twin.png (replicas over time).

    uv run python benchmarks/autoscale_twin.py                  # the full trace at 300 req/s
    uv run python benchmarks/autoscale_twin.py --minutes 10     # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from radixfleet.twin.epochs import RunRecord
from radixfleet.twin.run import Outcome, run_scenario
from radixfleet.twin.scaleup import ScaleUp, scale_up
from radixfleet.twin.scenario import Scenario

OURS = "radixfleet.controllers.autoscale.twin:radixfleet"
BASELINE = "kpa"
GOALS = {"gpu_saving_vs_kpa": 0.25, "gpu_over_oracle": 0.20, "cold_start_share": 0.01}
KEYS = (
    "requests",
    "slo_attainment",
    "ttft_attainment",
    "itl_attainment",
    "gpu_hours",
    "cold_start_waits",
    "ttft_p95_s",
    "itl_p95_s",
    "prefix_hit_rate",
    "failed",
)


def _region(gpus: int) -> dict[str, Any]:
    return {"name": "us-east-1", "gpu_pools": [{"name": "h100", "gpus": gpus, "warm_gpus": gpus}]}


def _policies(extra: list[str]) -> list[dict[str, Any]]:
    names = [BASELINE, OURS, *extra]
    return [
        {"name": _short(n), "autoscale": n, "traffic": "static", "baseline": n == BASELINE}
        for n in names
    ]


def _short(name: str) -> str:
    return name.rsplit(":", 1)[-1].replace("_", "-")


def steady(*, minutes: float, rate: float, extra: list[str]) -> Scenario:
    """The Azure conversation trace at `rate` requests/s on one region."""
    return Scenario.model_validate(
        {
            "name": "autoscale-steady",
            "description": f"Azure conversation trace at {rate:g} req/s, one region of H100s",
            "seed": 7,
            "duration_s": minutes * 60.0,
            "regions": [_region(96)],
            "models": [
                {"name": "llama-8b", "pool": "h100", "min_replicas": 0, "max_replicas": 64,
                 "initial_replicas": max(1, round(rate / 15))}
            ],
            "tenants": [{"name": "chat", "model": "llama-8b"}],
            "workload": {
                "sources": [
                    {"kind": "azure", "tenant": "chat", "rate_rps": rate,
                     "system_prompt_tokens": 256}
                ]
            },
            "policies": _policies(extra),
        }
    )  # fmt: skip


BURST_S = 120.0


def burst_starts(minutes: float) -> list[float]:
    """When the bursts begin: five minutes in, then every fifteen."""
    return [
        at
        for at in (300.0 + 900.0 * k for k in range(int(minutes * 60 // 900) + 1))
        if at < minutes * 60
    ]


def bursts(*, minutes: float, burst_rps: float, extra: list[str]) -> Scenario:
    """A trickle with two-minute bursts every fifteen minutes, from one warm replica."""
    trickle = 0.005
    return Scenario.model_validate(
        {
            "name": "autoscale-bursts",
            "description": f"bursts of {burst_rps:g} req/s for 120 s every 900 s over a trickle",
            "seed": 11,
            "duration_s": minutes * 60.0,
            "regions": [_region(32)],
            "models": [
                {"name": "llama-8b", "pool": "h100", "min_replicas": 0, "max_replicas": 16,
                 "initial_replicas": 1}
            ],
            "tenants": [{"name": "batch", "model": "llama-8b"}],
            "workload": {
                "sources": [{"kind": "poisson", "tenant": "batch", "rate_rps": trickle}]
            },
            "faults": [
                {"kind": "tenant_burst", "tenant": "batch", "at_s": at, "duration_s": BURST_S,
                 "factor": burst_rps / trickle}
                for at in burst_starts(minutes)
            ],
            "policies": _policies(extra),
        }
    )  # fmt: skip


def summarize(outcome: Outcome) -> dict[str, Any]:
    """Per policy the headline numbers, and ours against the KPA and the oracle."""
    metrics = outcome.results["metrics"]
    table = {name: {k: values.get(k) for k in KEYS} for name, values in metrics.items()}
    for row in table.values():
        row["cold_start_share"] = (
            row["cold_start_waits"] / row["requests"] if row["requests"] else 0
        )
    ours, kpa = table[_short(OURS)], table[_short(BASELINE)]
    oracle = outcome.results["oracles"]["gpu_hours"]
    return {
        "scenario": outcome.results["scenario"],
        "description": outcome.results["description"],
        "workload": outcome.results["workload"],
        "policies": table,
        "oracle_gpu_hours": oracle,
        "oracle_replica_capacity_rps": outcome.results["oracles"]["replica_capacity_rps"],
        "ours_vs_kpa": {
            "gpu_saving": 1.0 - ours["gpu_hours"] / kpa["gpu_hours"],
            "slo_attainment_delta": ours["slo_attainment"] - kpa["slo_attainment"],
        },
        "ours_over_oracle": ours["gpu_hours"] / oracle - 1.0 if oracle else None,
        "timing": outcome.timing,
    }


PHASES = ("decided_s", "node_s", "cold_start_s", "warm_up_s")
SCALE_UP_KEYS = (
    *PHASES, "first_routable_s", "last_routable_s", "replicas", "before_first",
    "attainment_before", "attainment_after",
)  # fmt: skip


def scale_ups(outcome: Outcome, starts: list[float]) -> dict[str, Any]:
    """Per policy, where each burst's seconds went, and the medians over the bursts."""
    summary: dict[str, Any] = {}
    for policy, record in outcome.records.items():
        found = [scale_up(record, outcome.workload, start_s=at, length_s=BURST_S) for at in starts]
        ups = [s for s in found if s is not None]
        summary[policy] = {
            "bursts": [_finite(vars(s)) for s in ups],
            "bursts_without_a_scale_up": len(found) - len(ups),
            "median": _finite({k: _median_of(ups, k) for k in SCALE_UP_KEYS}),
        }
    return summary


def _median_of(ups: list[ScaleUp], key: str) -> float | None:
    values = [v for v in (getattr(s, key) for s in ups) if v is not None]
    return statistics.median(values) if values else None


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """JSON has no infinity: a phase never reached is null."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def goals(steady_summary: dict[str, Any], burst_summary: dict[str, Any]) -> dict[str, bool]:
    """The issue's goals, each judged on its scenario."""
    vs = steady_summary["ours_vs_kpa"]
    over = steady_summary["ours_over_oracle"]
    share = burst_summary["policies"][_short(OURS)]["cold_start_share"]
    return {
        "slo_at_least_kpa": vs["slo_attainment_delta"] >= 0,
        "gpu_hours_25pct_below_kpa": vs["gpu_saving"] >= GOALS["gpu_saving_vs_kpa"],
        "gpu_hours_within_20pct_of_oracle": over is not None and over <= GOALS["gpu_over_oracle"],
        "bursts_cold_start_share_at_most_1pct": share <= GOALS["cold_start_share"],
    }


def plot(outcomes: dict[str, Outcome], path: Path) -> None:
    """Ready replicas over time per policy, one panel per scenario."""
    figure, _ = plt.subplots(len(outcomes), 1, figsize=(10, 4 * len(outcomes)))
    for axis, (name, outcome) in zip(list(figure.axes), outcomes.items(), strict=True):
        for policy, record in outcome.records.items():
            times, counts = _series(record)
            axis.step(times, counts, where="post", label=policy)
        mean = outcome.results["oracles"]["gpu_hours"] * 3600.0 / outcome.results["duration_s"]
        axis.axhline(mean, linestyle=":", color="grey", label="oracle (mean GPUs)")
        axis.set_title(f"{name}: {outcome.results['description']}")
        axis.set_xlabel("minutes")
        axis.set_ylabel("replicas (active)")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_scale_ups(summary: dict[str, Any], path: Path) -> None:
    """Per policy, the median burst's seconds to its first new replica's first request, phase
    by phase, beside the burst's length."""
    figure, axis = plt.subplots(figsize=(10, 1.2 + 0.8 * len(summary)))
    for row, found in enumerate(summary.values()):
        left = 0.0
        for n, phase in enumerate(PHASES):
            width = found["median"][phase] or 0.0
            label = phase.removesuffix("_s").replace("_", " ") if row == 0 else None
            axis.barh(row, width, left=left, color=f"C{n}", label=label)
            left += width
    axis.axvline(BURST_S, linestyle=":", color="grey", label="the burst ends")
    axis.set_yticks(range(len(summary)), list(summary))
    axis.set_xlabel("seconds from the burst's start to its first new replica's first request")
    axis.set_title("where a burst's seconds go (medians over the bursts)")
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _series(record: RunRecord) -> tuple[list[float], list[int]]:
    samples = sorted(record.samples, key=lambda s: s.at)
    return [s.at / 60.0 for s in samples], [s.active for s in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=58.0)
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--burst-minutes", type=float, default=60.0)
    parser.add_argument("--burst-rps", type=float, default=8.0)
    parser.add_argument("--extra", action="append", default=[], help="more autoscale policies")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    load_before = os.getloadavg()
    started = time.perf_counter()
    outcomes = {
        "steady": run_scenario(steady(minutes=args.minutes, rate=args.rate, extra=args.extra)),
        "bursts": run_scenario(
            bursts(minutes=args.burst_minutes, burst_rps=args.burst_rps, extra=args.extra)
        ),
    }
    summaries = {name: summarize(outcome) for name, outcome in outcomes.items()}
    summaries["bursts"]["scale_ups"] = scale_ups(
        outcomes["bursts"], burst_starts(args.burst_minutes)
    )
    result = {
        "benchmark": "autoscale_twin",
        "settings": vars(args) | {"out": str(args.out)},
        "scenarios": summaries,
        "goals": goals(summaries["steady"], summaries["bursts"]),
        "definitions": outcomes["steady"].results["definitions"],
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "wall_s": time.perf_counter() - started,
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "autoscale_twin.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    plot(outcomes, args.out / "autoscale_twin.png")
    plot_scale_ups(summaries["bursts"]["scale_ups"], args.out / "autoscale_twin_bursts.png")
    print(json.dumps({"goals": result["goals"]} | _headline(summaries), indent=2))


def _headline(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        name: {
            policy: {k: row[k] for k in ("gpu_hours", "slo_attainment", "cold_start_share")}
            for policy, row in summary["policies"].items()
        }
        | {"oracle_gpu_hours": summary["oracle_gpu_hours"]}
        for name, summary in summaries.items()
    }


if __name__ == "__main__":
    main()
