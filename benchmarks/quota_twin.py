"""Tenant quotas in the fleet twin: well-behaved tenants' SLO during a noisy-tenant burst,
with and without token budgets, side by side on the same arrivals (issue 8).

The scenario (benchmarks/scenarios/tenant-burst-quota.yaml): tenants `search` and `chat`
(3 req/s each) and `batch` (1.5 req/s) share Llama-3.1-8B replicas, each replaying its own
copy of the Azure LLM 2023 conversation trace; `batch` multiplies its arrival rate by 10 for
three minutes. Compared:

- `unenforced` (baseline): every request is admitted;
- `enforced`: `radixfleet.controllers.quota.twin:token_budgets`, the quota's own `TokenLedger`
charging each
  tenant's prompt on admission and its completion at the end; past the budget a request gets
  429 and is counted as throttled (refused by policy), not as a failure of the fleet.

Per policy and tenant: TTFT, ITL and SLO attainment (throttled requests count as misses for
the tenant they belong to), failed requests (not OK and not throttled), throttled share; for
the well-behaved tenants also during the burst alone. `--replicas` sets the fixed fleet size.

Writes benchmarks/results/quota_twin.json and quota_twin.png.

    uv run python benchmarks/quota_twin.py [--replicas 1] [--quick]
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
import numpy as np
from numpy.typing import NDArray

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from radixfleet.twin.load import load_scenario
from radixfleet.twin.log import Status
from radixfleet.twin.results import Columns
from radixfleet.twin.run import Outcome, run_scenario
from radixfleet.twin.scenario import Scenario, TenantBurst, TraceSource
from radixfleet.twin.workload import DEFAULT_TRACES

SCENARIO = Path(__file__).parent / "scenarios" / "tenant-burst-quota.yaml"
OUT = Path(__file__).parent / "results"
POLICIES = ("unenforced", "enforced")


def scenario(*, replicas: int, quick: bool) -> Scenario:
    """The scenario file with a fixed fleet of `replicas`; `quick` shortens it to 100 s with
    the burst from 20 s to 80 s (for tests)."""
    base = load_scenario(SCENARIO)
    model = base.models[0].model_copy(
        update={"min_replicas": replicas, "initial_replicas": replicas, "max_replicas": replicas}
    )
    update: dict[str, Any] = {"models": [model]}
    if quick:
        burst = next(f for f in base.faults if isinstance(f, TenantBurst))
        update["duration_s"] = 100.0
        update["faults"] = [burst.model_copy(update={"at_s": 20.0, "duration_s": 60.0})]
    return base.model_copy(update=update)


def noisy_tenant(s: Scenario) -> str:
    """The tenant whose burst the scenario injects."""
    return next(f.tenant for f in s.faults if isinstance(f, TenantBurst))


def measure(outcome: Outcome, policy: str) -> dict[str, Any]:
    """Per tenant numbers of one policy's run."""
    s = outcome.workload.scenario
    c = Columns(outcome.records[policy], outcome.workload)
    tenant = outcome.workload.arrivals.tenant[c.index]
    burst = next(f for f in s.faults if isinstance(f, TenantBurst))
    during = (c.arrival >= burst.at_s) & (c.arrival < burst.at_s + burst.duration_s)
    out: dict[str, Any] = {}
    for i, t in enumerate(s.tenants):
        mine = tenant == i
        out[t.name] = _tenant(c, mine, s) | {"during_burst": _tenant(c, mine & during, s)}
    return out


def _tenant(c: Columns, mine: NDArray[np.bool_], s: Scenario) -> dict[str, Any]:
    model = s.models[0]  # one model in this scenario
    throttled = mine & (c.status == Status.THROTTLED)
    with np.errstate(invalid="ignore"):
        ttft_ok = c.ok & (c.ttft <= model.slo.ttft_ms / 1000.0)
        itl_ok = c.ok & (np.isnan(c.itl) | (c.itl <= model.slo.itl_ms / 1000.0))
    n = int(mine.sum())
    return {
        "requests": n,
        "throttled": int(throttled.sum()),
        "throttled_share": _share(throttled, n),
        "failed": int((mine & ~c.ok & ~throttled).sum()),
        "ttft_attainment": _share(mine & ttft_ok, n),
        "itl_attainment": _share(mine & itl_ok, n),
        "slo_attainment": _share(mine & c.good, n),
        "slo_attainment_of_admitted": _share(mine & c.good, n - int(throttled.sum())),
        "ttft_p95_s": _p95(c.ttft[mine & c.ok]),
    }


def _share(mask: NDArray[np.bool_], n: int) -> float | None:
    return float(mask.sum()) / n if n else None


def _p95(values: NDArray[np.float64]) -> float | None:
    return float(np.percentile(values, 95)) if len(values) else None


def well_behaved_attainment(per_tenant: dict[str, Any], noisy: str, key: str) -> float:
    """The well-behaved tenants' attainment (`key`), their requests pooled."""
    others = [v for name, v in per_tenant.items() if name != noisy]
    total = sum(v["requests"] for v in others)
    met = sum((v[key] or 0.0) * v["requests"] for v in others)
    return met / total if total else 0.0


def run(*, replicas: int, quick: bool) -> dict[str, Any]:
    """Both policies on the same arrivals; the results document."""
    s = scenario(replicas=replicas, quick=quick)
    started = time.perf_counter()
    outcome = run_scenario(s, oracles=False)
    noisy = noisy_tenant(s)
    per_policy = {p: measure(outcome, p) for p in POLICIES}
    headline = {
        p: {
            "well_behaved_slo_attainment": well_behaved_attainment(v, noisy, "slo_attainment"),
            "well_behaved_ttft_attainment": well_behaved_attainment(v, noisy, "ttft_attainment"),
            "well_behaved_itl_attainment": well_behaved_attainment(v, noisy, "itl_attainment"),
            "well_behaved_failed": sum(t["failed"] for n, t in v.items() if n != noisy),
            "well_behaved_throttled": sum(t["throttled"] for n, t in v.items() if n != noisy),
            "noisy_throttled_share": v[noisy]["throttled_share"],
        }
        for p, v in per_policy.items()
    }
    traces = sorted({_trace_name(src) for src in _traces(s)})
    return {
        "scenario": s.name,
        "description": s.description,
        "trace": traces or "synthetic",
        "seed": s.seed,
        "duration_s": s.duration_s,
        "replicas": replicas,
        "noisy_tenant": noisy,
        "budgets_tokens_per_minute": {
            t.name: t.token_budget.tokens_per_minute if t.token_budget else None for t in s.tenants
        },
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "headline": headline,
        "per_tenant": per_policy,
        "wall_s": time.perf_counter() - started,
    }


def _traces(s: Scenario) -> list[TraceSource]:
    return [src for src in s.workload.sources if isinstance(src, TraceSource)]


def _trace_name(source: TraceSource) -> str:
    return Path(source.path).name if source.path else DEFAULT_TRACES[source.kind].name


def plot(result: dict[str, Any], path: Path) -> None:
    """Well-behaved tenants' attainment (overall and during the burst) and noisy throttling."""
    fig, ax = plt.subplots(figsize=(7, 4))
    noisy = result["noisy_tenant"]
    tenants = [t for t in result["per_tenant"]["unenforced"] if t != noisy]
    labels = [f"{t}\nall" for t in tenants] + [f"{t}\nburst" for t in tenants]
    x = np.arange(len(labels))
    for offset, policy in ((-0.2, "unenforced"), (0.2, "enforced")):
        v = result["per_tenant"][policy]
        values = [v[t]["slo_attainment"] or 0.0 for t in tenants]
        values += [v[t]["during_burst"]["slo_attainment"] or 0.0 for t in tenants]
        share = result["headline"][policy]["noisy_throttled_share"] or 0.0
        ax.bar(x + offset, values, 0.4, label=f"{policy} ({noisy} throttled {share:.0%})")
    ax.set_xticks(x, labels)
    ax.set_ylabel("SLO attainment")
    ax.set_ylim(0, 1.05)
    ax.set_title(
        f"Well-behaved tenants during a 10x {noisy} burst, {result['replicas']} replica(s)"
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="100 s instead of 600 s")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    result = run(replicas=args.replicas, quick=args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quota_twin.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out / "quota_twin.png")
    print(json.dumps(result["headline"], indent=2))


if __name__ == "__main__":
    main()
