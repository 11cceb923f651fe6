"""Prefill/decode disaggregation against colocated serving at equal GPUs, in the fleet twin.

One model (`h100-llama-3.1-8b`, one GPU a replica) on `--gpus` GPUs of each trace, served
either colocated (every replica prefills and decodes, SGLang's chunked prefill at 8192) or as a
P/D pair of every split `p` prefill : `G - p` decode replicas (DistServe searches the split;
so does this), on the same arrivals, side by side:

- `mooncake`: Mooncake's conversation trace (long prompts, 15k tokens on average, most
  continuing an earlier turn), 8 GPUs;
- `azure`: the Azure LLM 2023 conversation trace (chat: about 1k-token prompts, 200-token
  answers), 4 GPUs.

Each trace is replayed at several request rates (the twin time-shifts and thins the trace to
the rate). Goodput is DistServe's: requests per second that meet BOTH the TTFT SLO and the
mean-ITL (TPOT) SLO; a failed request meets neither. Two SLOs per trace, scored on the same
runs: a tight ITL (where disaggregation should win: a decode step of this profile is 6.5 ms
plus the context it reads, and every prefill pass beside it stalls it) and a loose one (where
colocation's extra prefill capacity should win). Per trace, rate and SLO: colocated goodput,
the best split's, the ratio, and the best split, all medians over `--seeds` (the seed moves
the replay's shift and thinning and the routers' draws).

Writes benchmarks/results/pd_disaggregation.json (the traces, seeds, machine, SLOs and every
point) and pd_disaggregation.png.

    uv run python benchmarks/pd_disaggregation.py [--seeds 1 2 3] [--traces mooncake azure]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from radixfleet.machine import describe_machine
from radixfleet.twin.results import Columns
from radixfleet.twin.run import run_scenario
from radixfleet.twin.scenario import Scenario
from radixfleet.twin.workload import DEFAULT_TRACES

PROFILE = "h100-llama-3.1-8b"
COLOCATED = "colocated"


@dataclass(frozen=True)
class Slo:
    """One SLO pair a run is scored against."""

    name: str
    ttft_s: float
    itl_s: float


@dataclass(frozen=True)
class TraceSetup:
    """How one trace is run: its GPUs, minutes, rates and SLOs."""

    gpus: int
    minutes: float
    rates: tuple[float, ...]
    slos: tuple[Slo, ...]


SETUPS = {
    # Long prompts: a 15k-token prompt takes ~0.5 s to prefill alone; TTFT 5 s as DistServe
    # gives its summarisation task a loose TTFT; ITL 12 ms is 1.6x the unloaded step at 15k.
    "mooncake": TraceSetup(
        gpus=8,
        minutes=10.0,
        rates=(2.0, 3.0, 4.0, 5.0, 6.0),
        slos=(Slo("tight_itl", 5.0, 0.012), Slo("loose_itl", 5.0, 0.030)),
    ),
    # Chat: TTFT 1 s; ITL 9 ms is 1.3x the unloaded step (6.9 ms at these contexts).
    "azure": TraceSetup(
        gpus=4,
        minutes=5.0,
        rates=(5.0, 10.0, 20.0, 30.0),
        slos=(Slo("tight_itl", 1.0, 0.009), Slo("loose_itl", 1.0, 0.030)),
    ),
}


def arms(gpus: int) -> list[str]:
    """Colocated, then every P/D split of `gpus` as `p:d`."""
    return [COLOCATED, *(f"{p}:{gpus - p}" for p in range(1, gpus))]


def scenario(trace: str, arm: str, rate: float, seed: int, setup: TraceSetup) -> Scenario:
    """One arm at one rate: `setup.gpus` one-GPU replicas, fixed, one region."""
    gpus = setup.gpus
    model: dict[str, Any] = {"name": "m", "pool": "h100", "profile": PROFILE, "max_replicas": gpus}
    if arm == COLOCATED:
        model |= {"min_replicas": gpus, "initial_replicas": gpus}
    else:
        prefill, decode = (int(n) for n in arm.split(":"))
        model["disaggregation"] = {"prefill_replicas": prefill, "decode_replicas": decode}
    return Scenario.model_validate(
        {
            "name": f"pd-{trace}", "seed": seed, "duration_s": setup.minutes * 60,
            "regions": [{"name": "r1", "gpu_pools": [{"name": "h100", "gpus": gpus}]}],
            "models": [model],
            "tenants": [{"name": "t", "model": "m"}],
            "workload": {"sources": [{"kind": trace, "tenant": "t",
                                      "path": str(DEFAULT_TRACES[trace]), "rate_rps": rate}]},
            "policies": [{"name": "p", "routing": "smg_cache_aware_http", "autoscale": "fixed",
                          "traffic": "static"}],
        }
    )  # fmt: skip


def run_point(trace: str, arm: str, rate: float, seed: int, setup: TraceSetup) -> dict[str, Any]:
    """One run, scored against each SLO of its trace."""
    outcome = run_scenario(scenario(trace, arm, rate, seed, setup), oracles=False)
    columns = Columns(outcome.records["p"], outcome.workload)
    duration = setup.minutes * 60
    metrics = outcome.results["metrics"]["p"]
    point: dict[str, Any] = {"trace": trace, "arm": arm, "rate_rps": rate, "seed": seed}
    for slo in setup.slos:
        point[f"goodput_rps_{slo.name}"] = goodput(columns, slo) / duration
    for key in ("requests", "failed", "ttft_p50_s", "ttft_p95_s", "itl_p50_s", "itl_p95_s"):
        point[key] = metrics[key]
    return point


def goodput(c: Columns, slo: Slo) -> int:
    """Requests that succeeded within both the TTFT and the mean-ITL SLO (DistServe's)."""
    with np.errstate(invalid="ignore"):
        itl_ok = np.isnan(c.itl) | (c.itl <= slo.itl_s)
        return int((c.ok & (c.ttft <= slo.ttft_s) & itl_ok).sum())


def summarize(points: list[dict[str, Any]], trace: str, setup: TraceSetup) -> list[dict[str, Any]]:
    """Per rate and SLO: each arm's median, the best and worst splits, and the one split
    best over all rates together (a pair sized once, as a deployment would be)."""
    rows = []
    for slo in setup.slos:
        medians = {
            rate: arm_medians(points, rate, f"goodput_rps_{slo.name}") for rate in setup.rates
        }
        splits = arms(setup.gpus)[1:]
        fixed = max(splits, key=lambda arm: sum(m[arm] for m in medians.values()))
        for rate, median in medians.items():
            best = max(splits, key=lambda arm: median[arm])
            worst = min(splits, key=lambda arm: median[arm])
            colocated = median[COLOCATED]
            rows.append(
                {
                    "trace": trace, "rate_rps": rate, "slo": slo.name,
                    "ttft_slo_s": slo.ttft_s, "itl_slo_s": slo.itl_s,
                    "colocated_goodput_rps": colocated,
                    "best_split": best, "pd_goodput_rps": median[best],
                    "ratio": ratio(median[best], colocated),
                    "worst_split": worst, "worst_ratio": ratio(median[worst], colocated),
                    "fixed_split": fixed, "fixed_ratio": ratio(median[fixed], colocated),
                    "goodput_by_arm": median,
                }
            )  # fmt: skip
    return sorted(rows, key=lambda row: (row["rate_rps"], row["slo"] != "tight_itl"))


def arm_medians(points: list[dict[str, Any]], rate: float, key: str) -> dict[str, float]:
    """Each arm's median of `key` over the seeds at `rate`."""
    by_arm: dict[str, list[float]] = {}
    for point in points:
        if point["rate_rps"] == rate:
            by_arm.setdefault(point["arm"], []).append(point[key])
    return {arm: statistics.median(values) for arm, values in by_arm.items()}


def ratio(value: float, base: float) -> float | None:
    """`value / base`, or None over nothing."""
    return value / base if base else None


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    """Per trace: goodput against rate, colocated and the best split, under each SLO."""
    traces = list(dict.fromkeys(row["trace"] for row in summary))
    figure, axes = plt.subplots(1, len(traces), figsize=(6 * len(traces), 4.5), squeeze=False)
    for axis, trace in zip(axes[0], traces, strict=True):
        for n, slo in enumerate(dict.fromkeys(r["slo"] for r in summary if r["trace"] == trace)):
            rows = [r for r in summary if r["trace"] == trace and r["slo"] == slo]
            rates = [r["rate_rps"] for r in rows]
            style = "-" if n == 0 else "--"
            axis.plot(rates, [r["colocated_goodput_rps"] for r in rows], f"o{style}", color="C0",
                      label=f"colocated, {slo}")  # fmt: skip
            axis.plot(rates, [r["pd_goodput_rps"] for r in rows], f"s{style}", color="C3",
                      label=f"P/D best split, {slo}")  # fmt: skip
            for r in rows:
                axis.annotate(r["best_split"], (r["rate_rps"], r["pd_goodput_rps"]), fontsize=7)
        axis.set_title(f"{trace}")
        axis.set_xlabel("request rate (req/s)")
        axis.set_ylabel("goodput within TTFT and ITL SLOs (req/s)")
        axis.legend(fontsize=7)
    figure.suptitle(f"P/D vs colocated at equal GPUs, {PROFILE}, median of seeds")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def describe(setup: TraceSetup) -> dict[str, Any]:
    """A trace's setup as JSON."""
    return {
        "gpus": setup.gpus,
        "minutes": setup.minutes,
        "rates_rps": list(setup.rates),
        "slos": [vars(slo) for slo in setup.slos],
        "arms": arms(setup.gpus),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--traces", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    started = time.perf_counter()
    points, summary = [], []
    for trace in args.traces:
        setup = SETUPS[trace]
        mine = [
            run_point(trace, arm, rate, seed, setup)
            for rate in setup.rates
            for seed in args.seeds
            for arm in arms(setup.gpus)
        ]
        points += mine
        summary += summarize(mine, trace, setup)
        for row in summary[-len(setup.rates) * len(setup.slos) :]:
            print(json.dumps({k: v for k, v in row.items() if k != "goodput_by_arm"}), flush=True)
    document = {
        "benchmark": "pd_disaggregation",
        "traces": {trace: DEFAULT_TRACES[trace].name for trace in args.traces},
        "seeds": args.seeds,
        "profile": PROFILE,
        "setups": {trace: describe(SETUPS[trace]) for trace in args.traces},
        "goodput": "requests/s that succeeded within both the TTFT and the mean-ITL SLO",
        "summary": summary,
        "points": points,
        "machine": describe_machine() | {"wall_s": time.perf_counter() - started},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pd_disaggregation.json").write_text(json.dumps(document, indent=2) + "\n")
    plot(summary, args.out / "pd_disaggregation.png")


if __name__ == "__main__":
    main()
