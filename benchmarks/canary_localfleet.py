"""Canary judgement on the local fleet: false rollbacks of good canaries on a busy machine, and
how fast bad ones are caught, judged against the stable revision and against a baseline, by
significance tests and by the p95s alone (issue 18).

The real controller rolls out new revisions of one emulated model (its own replica beside the
stable one's, both on this machine's cores) under
`radixfleet.controllers.canary.localfleet.NoisyTraffic`, judged from a real Prometheus scraping
them, with the CanaryPolicy's default checks (TTFT and ITL p95 within
1.25x of stable, errors within 1 point) on 4 s windows:

- `good` canaries (identical to stable), half of the seeds with a CPU hog beside the fleet (one
  busy-looping process per core), so that one replica's latencies jitter more than the other's;
- `slow` (every step twice as long) and `errors` (5% of answers are 500s).

Two judges side by side, each seed rolled out once under each, alternating: against the stable
revision (`stable`), and against a baseline (`baseline`: the policy's `baseline: true`, the
stable model on fresh replicas of its own sent the canary's share, `LocalFleet.set_baseline`).

Side by side on the same windows: the controller decides with significance tests (Mann-Whitney U
on the latency histograms, Fisher's exact test on errors); for the p95-only judge, every window
the controller analysed is judged again without its histograms, and a rollout counts as one it
would have rolled back when `threshold` of its windows fail. (Replayed, not lived: the p95-only
judge would have stopped at its rollback, so it never sees windows after it.)

Writes benchmarks/results/canary_localfleet.json.

    uv run python benchmarks/canary_localfleet.py              # 100 good, 10 slow, 10 errors
    uv run python benchmarks/canary_localfleet.py --good 10 --bad 2 --judges baseline
    uv run python benchmarks/canary_localfleet.py --interval 10 --good 20   # the CRD's floor

A window other than 4 s writes canary_localfleet-<N>s.json instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.progress import Progress

from radixfleet.controllers.canary.decide import Decision, evaluate
from radixfleet.controllers.canary.localfleet import RolloutRun, roll_out
from radixfleet.controllers.canary.spec import CanaryPolicySpec
from radixfleet.controllers.canary.state import Measured, Phase
from radixfleet.localfleet import LocalFleet, LocalFleetSpec, ModelSpec, RegionSpec
from radixfleet.machine import describe_machine

REGION, MODEL, NS = "local", "llama", "team-a"
# The local fleet's scrape is every second: 4 s windows, a few dozen canary requests each.
POLICY: dict[str, Any] = {"steps": [20, 35, 50], "intervalSeconds": 4, "minRequests": 10}
JUDGES = ("stable", "baseline")
# A rollout not final after this many windows is cut off (90 s at 4 s windows).
MAX_WINDOWS = 22.5
KINDS: dict[str, dict[str, float]] = {
    "good": {},
    "slow": {"slowdown": 2.0},
    "errors": {"errors": 0.05},
}


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def cpu_hog(enabled: bool) -> Iterator[None]:
    """One busy-looping process per core while the block runs (nothing when not enabled)."""
    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(2 if enabled else 0)]
    for hog in hogs:
        hog.start()
    try:
        yield
    finally:
        for hog in hogs:
            hog.terminate()
            hog.join()


def analysed_windows(run: RolloutRun) -> list[tuple[Decision, Measured]]:
    """The windows the controller judged, once each: the decisions taken at an analysis."""
    windows: dict[Any, tuple[Decision, Measured]] = {}
    for _, decision in run.rollouts.decisions:
        status = decision.status
        if status is None or status.measured is None or status.last_decision is None:
            continue
        at = status.last_analysis_at
        if at is not None and at == status.last_decision.at and at not in windows:
            windows[at] = (decision, status.measured)
    return list(windows.values())


def p95_only_fails(measured: Measured, spec: CanaryPolicySpec) -> bool:
    """Whether the judge without significance tests fails this window."""
    hidden = {"ttft_buckets": None, "itl_buckets": None}
    baseline = measured.baseline
    bare = Measured(
        canary=measured.canary.model_copy(update=hidden),
        stable=measured.stable.model_copy(update=hidden),
        baseline=None if baseline is None else baseline.model_copy(update=hidden),
    )
    return any(not evaluate(c, bare, spec.significance).passed for c in spec.checks)


def one(
    fleet: LocalFleet,
    prometheus: str,
    *,
    kind: str,
    seed: int,
    hog: bool,
    judge: str,
    interval_s: int,
) -> dict[str, Any]:
    policy = {**POLICY, "intervalSeconds": interval_s, "baseline": judge == "baseline"}
    spec = CanaryPolicySpec.parse(policy, min_interval_seconds=1)
    started = time.monotonic()
    with cpu_hog(hog):
        run = roll_out(
            fleet, prometheus, region=REGION, model=MODEL, namespace=NS, spec=policy, seed=seed,
            max_s=MAX_WINDOWS * interval_s, **KINDS[kind],
        )  # fmt: skip
    windows = analysed_windows(run)
    old_failures = sum(p95_only_fails(measured, spec) for _, measured in windows)
    return {
        "judge": judge,
        "kind": kind,
        "seed": seed,
        "cpu_hog": hog,
        "outcome": run.status.phase.value,
        "rolled_back": run.status.phase is Phase.ROLLED_BACK,
        "windows": len(windows),
        "inconclusive_windows": sum("inconclusive" in d.reason for d, _ in windows),
        "p95_only_failed_windows": old_failures,
        "p95_only_would_roll_back": old_failures >= spec.threshold,
        "lost_requests": len(run.lost),
        "wall_s": round(time.monotonic() - started, 1),
        "history": run.history()[-600:],
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per judge, per kind of canary."""
    return {
        judge: _by_kind([r for r in rows if r["judge"] == judge])
        for judge in JUDGES
        if any(r["judge"] == judge for r in rows)
    }


def _by_kind(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        out[kind] = {
            "runs": len(mine),
            "with_cpu_hog": sum(r["cpu_hog"] for r in mine),
            "rolled_back_significance": sum(r["rolled_back"] for r in mine),
            "rolled_back_p95_only_replayed": sum(r["p95_only_would_roll_back"] for r in mine),
            "median_windows": statistics.median(r["windows"] for r in mine),
            "inconclusive_windows": sum(r["inconclusive_windows"] for r in mine),
            "lost_requests": sum(r["lost_requests"] for r in mine),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--good", type=int, default=100, help="good canaries (half with a hog)")
    parser.add_argument("--bad", type=int, default=10, help="slow and erroring canaries, each")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument(
        "--judges", default=",".join(JUDGES), help="comma-separated, of: " + ", ".join(JUDGES)
    )
    parser.add_argument(
        "--interval", type=int, default=POLICY["intervalSeconds"], help="window, seconds (>= 1)"
    )
    args = parser.parse_args()
    judges = [j for j in args.judges.split(",") if j]
    if not judges or set(judges) - set(JUDGES):
        parser.error(f"--judges: each of {', '.join(JUDGES)}, got {args.judges!r}")
    if args.interval < 1:
        parser.error(f"--interval: at least 1 s, got {args.interval}")
    seeds = [("good", s, s % 2 == 1) for s in range(args.good)]
    seeds += [(kind, 1000 + s, False) for kind in ("slow", "errors") for s in range(args.bad)]
    plan = [(kind, seed, hog, judge) for kind, seed, hog in seeds for judge in judges]
    spec = LocalFleetSpec(
        # HTTP workers: the canary counts the replicas' HTTP responses (see the local-fleet test)
        regions=[
            RegionSpec(
                name=REGION, models=[ModelSpec(name=MODEL, namespace=NS)], router_workers="http"
            )
        ],
        cold_start_s=0.5,
    )
    load_before = describe_machine()["load_average_1m"]
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as cache, LocalFleet(spec, cache_dir=Path(cache)) as fleet:
        prometheus = fleet.start_prometheus()
        if prometheus is None:
            raise SystemExit("canary_localfleet: Prometheus is not installed")
        with Progress() as progress:
            task = progress.add_task("rollouts", total=len(plan))
            for kind, seed, hog, judge in plan:
                row = one(fleet, prometheus, kind=kind, seed=seed, hog=hog, judge=judge,
                          interval_s=args.interval)  # fmt: skip
                rows.append(row)
                progress.advance(task)
    result = {
        "benchmark": "canary_localfleet",
        "settings": {
            "policy": {**POLICY, "intervalSeconds": args.interval},
            "judges": judges,
            "kinds": KINDS,
            "traffic": "NoisyTraffic, 40 req/s",
        },
        "summary": summarize(rows),
        "runs": rows,
        "machine": describe_machine() | {"load_average_1m_before": load_before},
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    default = args.interval == POLICY["intervalSeconds"]
    name = "canary_localfleet" + ("" if default else f"-{args.interval}s")
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
