"""Plots of a run (matplotlib, PNG): replicas and p95 TTFT over time, headline bars."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and in CI

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from radixfleet.twin.results import Columns
from radixfleet.twin.run import Outcome

BARS = (
    ("goodput_rps", "goodput (req/s in SLO)"),
    ("slo_attainment", "SLO attainment"),
    ("gpu_hours", "GPU-hours"),
    ("prefix_hit_rate", "prefix hit rate"),
)


def write_plots(outcome: Outcome, out: Path) -> list[Path]:
    """Every plot of `outcome` into `out`; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    return [
        _replicas(outcome, out / "replicas.png"),
        _ttft(outcome, out / "ttft_p95.png"),
        _headline(outcome, out / "headline.png"),
    ]


def _replicas(outcome: Outcome, path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(8, 3.5))
    for name, record in outcome.records.items():
        totals: dict[float, int] = {}
        for sample in record.samples:
            totals[sample.at] = totals.get(sample.at, 0) + sample.ready
        times = sorted(totals)
        axes.step(times, [totals[t] for t in times], where="post", label=name)
    axes.set_xlabel("virtual time (s)")
    axes.set_ylabel("ready replicas (fleet)")
    axes.legend(fontsize="small")
    return _save(figure, path)


def _ttft(outcome: Outcome, path: Path) -> Path:
    scenario = outcome.workload.scenario
    step = max(scenario.sample_interval_s, scenario.duration_s / 120)
    edges = np.arange(0.0, scenario.duration_s + step, step)
    figure, axes = plt.subplots(figsize=(8, 3.5))
    for name, record in outcome.records.items():
        columns = Columns(record, outcome.workload)
        bins = np.digitize(columns.arrival, edges) - 1
        values = [
            float(np.nanpercentile(columns.ttft[(bins == k) & columns.ok], 95))
            if ((bins == k) & columns.ok).any()
            else np.nan
            for k in range(len(edges) - 1)
        ]
        axes.plot(edges[:-1], values, label=name)
    axes.set_yscale("log")
    axes.set_xlabel("virtual time (s)")
    axes.set_ylabel("p95 TTFT (s)")
    axes.legend(fontsize="small")
    return _save(figure, path)


def _headline(outcome: Outcome, path: Path) -> Path:
    metrics = outcome.results["metrics"]
    names = list(metrics)
    figure, axes = plt.subplots(1, len(BARS), figsize=(3 * len(BARS), 3))
    for axis, (key, title) in zip(axes, BARS, strict=True):
        axis.bar(names, [metrics[n][key] or 0.0 for n in names], color="tab:blue")
        axis.set_title(title, fontsize="small")
        axis.tick_params(axis="x", labelrotation=30, labelsize="x-small")
    return _save(figure, path)


def _save(figure: Figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
