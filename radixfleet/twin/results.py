"""From what a run recorded to the numbers of results.json: per policy, ratios, oracles.

Definitions (the issue left them open; they are written into results.json too):

- a request *meets the SLO* when it succeeded, its TTFT (from the client's arrival, buffering
  included) is within `ttft_ms` and its mean inter-token latency within `itl_ms`; failed
  requests count against every attainment;
- *goodput* is requests (and output tokens) per second that met the SLO;
- *GPU-hours* count each replica from scheduling to removal, cold starts included;
- *prefix hit rate* is cached prompt tokens over prompt tokens of served requests;
- *failover recovery* is the time from an outage's start to the first sample window after
  which every window until the outage ends serves the region's clients at the SLO target;
- *canary exposure* is the requests a canary revision served; *detection* the time from its
  creation to its rollback.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from radixfleet.twin.epochs import RunRecord
from radixfleet.twin.log import Status
from radixfleet.twin.oracles import GpuOracle
from radixfleet.twin.scenario import CanaryRollout, RegionOutage, Scenario
from radixfleet.twin.workload import Workload

NEW_REPLICA_S = 60.0  # a replica's first minute of traffic (issue 17's pre-warming goal)
SETTLED_REPLICA_S = 300.0

DEFINITIONS = {
    "slo_attainment": "share of all requests that succeeded with TTFT <= slo.ttft_ms and mean "
    "ITL <= slo.itl_ms (failed requests count as misses)",
    "goodput_rps": "requests per second that met the SLO",
    "gpu_hours": "replica GPU time from scheduling to removal, cold starts included",
    "prefix_hit_rate": "cached prompt tokens / prompt tokens of served requests",
    "cold_start_waits": "requests buffered because no replica of their revision was ready",
    "new_replica_hit_rate": "prefix hit rate of the requests replicas added during the run "
    f"served in their first {NEW_REPLICA_S:.0f} s of traffic (null: no replica was added)",
    "settled_replica_hit_rate": "prefix hit rate of the requests served by replicas that had "
    f"taken traffic for {SETTLED_REPLICA_S:.0f} s or more, or ran from the start",
    "failover.recovery_s": "outage start to the first sample window after which every window "
    "until the outage ends meets the SLO target for the region's clients",
    "canary.exposure": "requests the canary revision served",
    "canary.detection_s": "canary creation to rollback (null: never rolled back)",
}
# Written only when a model has HiCache tiers (`kv_tiers`): a scenario without them keeps the
# results it had before tiers existed, byte for byte.
TIER_DEFINITIONS = {
    "prefix_hit_rate_by_tier": "of prompt tokens of served requests, the share found on the "
    "GPU (device), loaded from the host tier (host) and from the storage backend (storage)",
    "host_gib_used_peak": "GiB the host tiers held at the busiest sample (all replicas, all "
    "regions); host_gib_allocated_peak: the host pools' size at theirs",
    "storage_gib_used_peak": "GiB the storage backends held at the busiest sample",
}
GIB = 1 << 30
HEADLINE = ("goodput_rps", "slo_attainment", "gpu_hours", "prefix_hit_rate", "ttft_p95_s")


class Columns:
    """A run's request log joined with the arrivals, as numpy arrays."""

    def __init__(self, record: RunRecord, workload: Workload) -> None:
        log = record.log
        index = np.array(log.index, dtype=np.int64)
        status = np.array(log.status, dtype=np.int64)
        # Requests still running at the end are neither served nor failed: left out.
        self.unfinished = int((status == Status.UNFINISHED).sum())
        order = np.argsort(index, kind="stable")
        order = order[status[order] != Status.UNFINISHED]
        self.index = index[order]
        self.status = status[order]
        self.region = np.array(log.region, dtype=np.int64)[order]
        self.revision = np.array(log.revision, dtype=np.int64)[order]
        self.cold = np.array(log.cold, dtype=bool)[order]
        self.ttft = np.array(log.ttft, dtype=np.float64)[order]
        self.itl = np.array(log.itl, dtype=np.float64)[order]
        self.prompt = np.array(log.prompt, dtype=np.int64)[order]
        self.output = np.array(log.output, dtype=np.int64)[order]
        self.cached = np.array(log.cached, dtype=np.int64)[order]
        self.host_cached = np.array(log.host_cached, dtype=np.int64)[order]
        self.storage_cached = np.array(log.storage_cached, dtype=np.int64)[order]
        self.replica_age = np.array(log.replica_age, dtype=np.float64)[order]
        a = workload.arrivals
        self.arrival = a.t[self.index]
        self.home = a.home[self.index]
        self.model = a.model[self.index]
        self.ok = self.status == Status.OK
        self.good = self._good(workload.scenario)

    def _good(self, scenario: Scenario) -> NDArray[np.bool_]:
        ttft_limit = np.array([m.slo.ttft_ms / 1000.0 for m in scenario.models])[self.model]
        itl_limit = np.array([m.slo.itl_ms / 1000.0 for m in scenario.models])[self.model]
        itl_ok = np.isnan(self.itl) | (self.itl <= itl_limit)
        with np.errstate(invalid="ignore"):
            good: NDArray[np.bool_] = self.ok & (self.ttft <= ttft_limit) & itl_ok
        return good


def policy_metrics(record: RunRecord, workload: Workload) -> dict[str, Any]:
    """Every number of one policy's run."""
    scenario = workload.scenario
    c = Columns(record, workload)
    n = len(c.index)
    duration = scenario.duration_s
    ttft_limit = np.array([m.slo.ttft_ms / 1000.0 for m in scenario.models])[c.model]
    itl_limit = np.array([m.slo.itl_ms / 1000.0 for m in scenario.models])[c.model]
    with np.errstate(invalid="ignore"):
        ttft_ok = c.ok & (c.ttft <= ttft_limit)
        itl_ok = c.ok & (np.isnan(c.itl) | (c.itl <= itl_limit))
    served_prompt = int(c.prompt[c.ok].sum())
    tiers = _kv_tiers(record, c, served_prompt) if _has_tiers(scenario) else {}
    return tiers | {
        "requests": n,
        "unfinished_at_end": c.unfinished,
        "failed": int((~c.ok).sum()),
        "failed_by_reason": _reasons(c.status),
        "ttft_attainment": _share(ttft_ok, n),
        "itl_attainment": _share(itl_ok, n),
        "slo_attainment": _share(c.good, n),
        "goodput_rps": float(c.good.sum()) / duration,
        "goodput_tokens_per_s": float(c.output[c.good].sum()) / duration,
        "gpu_hours": sum(span.gpu_seconds for span in record.spans) / 3600.0,
        "prefix_hit_rate": float(c.cached[c.ok].sum()) / served_prompt if served_prompt else 0.0,
        "cold_start_waits": int(c.cold.sum()),
        "new_replica_hit_rate": _hit_rate(c, c.replica_age < NEW_REPLICA_S),
        "settled_replica_hit_rate": _hit_rate(c, c.replica_age >= SETTLED_REPLICA_S),
        "ttft_p50_s": _pct(c.ttft[c.ok], 50),
        "ttft_p95_s": _pct(c.ttft[c.ok], 95),
        "ttft_p99_s": _pct(c.ttft[c.ok], 99),
        "itl_p50_s": _pct(c.itl[c.ok], 50),
        "itl_p95_s": _pct(c.itl[c.ok], 95),
        "failover": _failover(record, c, scenario),
        "canary": _canary(record, c, scenario),
        "wall_s": record.wall_s,
    }


def definitions(scenario: Scenario) -> dict[str, str]:
    """The definitions results.json carries for `scenario`."""
    return DEFINITIONS | TIER_DEFINITIONS if _has_tiers(scenario) else DEFINITIONS


def _has_tiers(scenario: Scenario) -> bool:
    return any(m.kv_tiers is not None for m in scenario.models)


def _kv_tiers(record: RunRecord, c: Columns, served_prompt: int) -> dict[str, Any]:
    """The hit rate by the tier that held each cached token, and the tiers' memory in use at
    its peak (summed over regions and models at each sample)."""
    device = c.cached - c.host_cached - c.storage_cached
    by_tier = {
        name: float(tokens[c.ok].sum()) / served_prompt if served_prompt else 0.0
        for name, tokens in (("device", device), ("host", c.host_cached),
                             ("storage", c.storage_cached))
    }  # fmt: skip
    peaks = {"host_used_bytes": 0, "host_total_bytes": 0, "storage_used_bytes": 0}
    for key in peaks:
        per_time: dict[float, int] = {}
        for sample in record.samples:
            per_time[sample.at] = per_time.get(sample.at, 0) + getattr(sample, key)
        peaks[key] = max(per_time.values(), default=0)
    return {
        "prefix_hit_rate_by_tier": by_tier,
        "host_gib_used_peak": peaks["host_used_bytes"] / GIB,
        "host_gib_allocated_peak": peaks["host_total_bytes"] / GIB,
        "storage_gib_used_peak": peaks["storage_used_bytes"] / GIB,
    }


def _hit_rate(c: Columns, mask: NDArray[np.bool_]) -> float | None:
    chosen = c.ok & mask  # NaN ages (failed requests) compare False either way
    prompt = int(c.prompt[chosen].sum())
    return float(c.cached[chosen].sum()) / prompt if prompt else None


def _share(mask: NDArray[np.bool_], n: int) -> float:
    return float(mask.sum()) / n if n else 0.0


def _pct(values: NDArray[np.float64], q: float) -> float | None:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, q)) if len(values) else None


def _reasons(status: NDArray[np.int64]) -> dict[str, int]:
    counts = np.bincount(status, minlength=len(Status))
    skip = (Status.OK, Status.UNFINISHED)
    return {s.name.lower(): int(counts[s]) for s in Status if s not in skip and counts[s]}


def _failover(record: RunRecord, c: Columns, scenario: Scenario) -> list[dict[str, Any]]:
    names = [r.name for r in scenario.regions]
    out = []
    for fault in scenario.faults:
        if not isinstance(fault, RegionOutage):
            continue
        r = names.index(fault.region)
        end = min(fault.at_s + fault.duration_s, scenario.duration_s)
        during = (c.home == r) & (c.arrival >= fault.at_s) & (c.arrival < end)
        out.append(
            {
                "region": fault.region,
                "at_s": fault.at_s,
                "shifted_s": _first_shift(record, fault.region, fault.at_s),
                "recovery_s": _recovery(c, during, fault.at_s, end, scenario),
                "clients_requests": int(during.sum()),
                "clients_failed": int((during & ~c.ok).sum()),
                "clients_slo_attainment": _share(c.good & during, int(during.sum())),
            }
        )
    return out


def _first_shift(record: RunRecord, region: str, since: float) -> float | None:
    for at, weights in record.traffic:
        row = weights.get(region, {})
        if at >= since and row.get(region, 0.0) < sum(row.values()):
            return at - since
    return None


def _recovery(
    c: Columns, during: NDArray[np.bool_], start: float, end: float, scenario: Scenario
) -> float | None:
    step = scenario.sample_interval_s
    edges = np.arange(start, end + step, step)
    target = min(m.slo.target for m in scenario.models)
    bins = np.digitize(c.arrival[during], edges) - 1
    total = np.bincount(bins, minlength=len(edges))[: len(edges) - 1]
    good = np.bincount(bins, weights=c.good[during], minlength=len(edges))[: len(edges) - 1]
    meets = (total == 0) | (good >= target * total)
    for k in range(len(meets)):
        if meets[k:].all():
            return float(edges[k] - start)
    return None


def _canary(record: RunRecord, c: Columns, scenario: Scenario) -> list[dict[str, Any]]:
    out = []
    for fault in scenario.faults:
        if not isinstance(fault, CanaryRollout):
            continue
        m = next(i for i, model in enumerate(scenario.models) if model.name == fault.model)
        mine = (c.model == m) & (c.arrival >= fault.at_s)
        canary = mine & (c.revision == 1)
        decisions = [d for d in record.decisions if d.kind == "canary" and d.model == fault.model]
        rollbacks = [d.at for d in decisions if d.detail.startswith("rollback")]
        promotions = [d.at for d in decisions if d.detail.startswith("promote")]
        bad = fault.regression.slowdown > 1.0 or fault.regression.error_rate > 0.0
        out.append(
            {
                "model": fault.model,
                "at_s": fault.at_s,
                "bad": bad,
                "exposure": int(canary.sum()),
                "exposure_share": _share(canary, int(mine.sum())),
                "exposure_failed": int((canary & ~c.ok).sum()),
                "detection_s": (max(rollbacks) - fault.at_s) if rollbacks else None,
                "promoted_s": (max(promotions) - fault.at_s) if promotions else None,
                "outcome": "rolled_back" if rollbacks else "promoted" if promotions else "open",
            }
        )
    return out


def ratios(
    metrics: dict[str, dict[str, Any]],
    baselines: Sequence[str],
    *,
    oracle_hit: float | None,
    oracle_gpu: GpuOracle | None,
) -> dict[str, Any]:
    """Each policy's headline numbers over each baseline's, and over the oracles."""
    out: dict[str, Any] = {}
    for name, values in metrics.items():
        entry: dict[str, Any] = {}
        for base in baselines:
            if base != name:
                entry[f"vs_{base}"] = {
                    key: _ratio(values.get(key), metrics[base].get(key)) for key in HEADLINE
                }
        if oracle_hit is not None:
            entry["prefix_hit_rate_vs_oracle"] = _ratio(values["prefix_hit_rate"], oracle_hit)
        if oracle_gpu is not None:
            entry["gpu_hours_vs_oracle"] = _ratio(values["gpu_hours"], oracle_gpu.gpu_hours)
        out[name] = entry
    return out


def _ratio(value: Any, base: Any) -> float | None:
    if value is None or base is None or not isinstance(value, int | float):
        return None
    if base == 0 or math.isnan(float(base)):
        return None
    return float(value) / float(base)
