"""`twin run` end to end: build the workload once, run every policy set, score, write.

Every policy set replays the same arrivals (same scenario, same seed), one after another, each
on `workers` processes; the oracles are computed once. The output is deterministic: the same
scenario and seed give the same results.json (wall-clock times live in `timing.json`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from radixfleet.twin.epochs import RunRecord, run_policy
from radixfleet.twin.oracles import GpuOracle, gpu_oracle, prefix_oracle
from radixfleet.twin.results import definitions, policy_metrics, ratios
from radixfleet.twin.scenario import Scenario
from radixfleet.twin.workload import Workload


@dataclass
class Outcome:
    """A finished run: the results document, the raw records, and how long it took."""

    results: dict[str, Any]
    records: dict[str, RunRecord]
    workload: Workload
    timing: dict[str, float]


def run_scenario(
    scenario: Scenario,
    *,
    trace: Path | None = None,
    workers: int = 1,
    oracles: bool = True,
    console: Console | None = None,
) -> Outcome:
    """Run every policy set of `scenario` and score it."""
    started = time.perf_counter()
    workload = Workload(scenario, trace_override=trace)
    timing = {"workload_s": time.perf_counter() - started}
    records: dict[str, RunRecord] = {}
    with _progress(console) as progress:
        for policies in scenario.policies:
            task = progress.add_task(policies.name, total=scenario.duration_s, requests=0)

            def advance(done: float, requests: int, task: TaskID = task) -> None:
                progress.update(task, completed=done, requests=requests)

            began = time.perf_counter()
            records[policies.name] = run_policy(
                scenario, policies, workload, workers=workers, progress=advance
            )
            records[policies.name].wall_s = time.perf_counter() - began
            timing[f"policy:{policies.name}_s"] = records[policies.name].wall_s
    began = time.perf_counter()
    hit, gpu = (prefix_oracle(workload), gpu_oracle(workload)) if oracles else ({}, None)
    timing["oracles_s"] = time.perf_counter() - began
    results = build_results(scenario, workload, records, hit=hit, gpu=gpu)
    timing["total_s"] = time.perf_counter() - started
    return Outcome(results=results, records=records, workload=workload, timing=timing)


def build_results(
    scenario: Scenario,
    workload: Workload,
    records: dict[str, RunRecord],
    *,
    hit: dict[str, float],
    gpu: GpuOracle | None,
) -> dict[str, Any]:
    """The results document: scenario, workload, per-policy metrics, ratios and oracles."""
    metrics = {name: policy_metrics(record, workload) for name, record in records.items()}
    for values in metrics.values():
        values.pop("wall_s", None)  # wall time is not deterministic: it goes to timing.json
    baselines = [p.name for p in scenario.policies if p.baseline]
    overall_hit = _weighted_hit(workload, hit)
    return {
        "scenario": scenario.name,
        "description": scenario.description,
        "seed": scenario.seed,
        "duration_s": scenario.duration_s,
        "workload": _workload_summary(workload),
        "policies": {p.name: p.model_dump() for p in scenario.policies},
        "baselines": baselines,
        "metrics": metrics,
        "oracles": {
            "prefix_hit_rate": hit,
            "prefix_hit_rate_overall": overall_hit,
            "gpu_hours": None if gpu is None else gpu.gpu_hours,
            "replica_capacity_rps": None if gpu is None else gpu.capacity_rps,
        },
        "ratios": ratios(metrics, baselines, oracle_hit=overall_hit, oracle_gpu=gpu),
        "definitions": definitions(scenario),
    }


def _weighted_hit(workload: Workload, hit: dict[str, float]) -> float | None:
    if not hit:
        return None
    a = workload.arrivals
    weights = [float((a.model == m).sum()) for m in range(len(workload.scenario.models))]
    total = sum(weights)
    values = [hit[m.name] for m in workload.scenario.models]
    return sum(v * w for v, w in zip(values, weights, strict=True)) / total if total else 0.0


def _workload_summary(workload: Workload) -> dict[str, Any]:
    a = workload.arrivals
    duration = workload.scenario.duration_s
    return {
        "requests": len(a),
        "mean_rate_rps": len(a) / duration,
        "note": "traces are replayed at the sources' rate_rps by merging time-shifted copies "
        "with disjoint block keys (see radixfleet.twin.workload)",
    }


def write_outcome(outcome: Outcome, out: Path) -> Path:
    """Write results.json and timing.json into `out`; return the results path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    path.write_text(json.dumps(outcome.results, indent=2, sort_keys=True) + "\n")
    (out / "timing.json").write_text(json.dumps(outcome.timing, indent=2, sort_keys=True) + "\n")
    return path


@contextmanager
def _progress(console: Console | None) -> Iterator[Progress]:
    progress = Progress(
        TextColumn("[bold]{task.description}[/bold]"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} virtual s"),
        TextColumn("{task.fields[requests]} requests"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=console is None,
    )
    with progress:
        yield progress
