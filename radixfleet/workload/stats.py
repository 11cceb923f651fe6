"""Summaries of a replay: latency percentiles, throughput and prefix hit rate per group.

Pure functions over `RequestResult`s. Latency percentiles count successful requests only (a
failed request has no meaningful TTFT); throughput divides by the group's own window, from its
first send to its last answer; the prefix cache hit rate is cached prompt tokens over prompt
tokens, as the replicas reported them in each answer's usage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from radixfleet.workload.records import RequestResult

PERCENTILES = (50, 95, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Quantiles:
    """p50, p95 and p99 of a latency, in seconds (None when there is no sample)."""

    p50: float | None
    p95: float | None
    p99: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Quantiles:
        if not values:
            return cls(None, None, None)
        p50, p95, p99 = (percentile(values, q) for q in PERCENTILES)
        return cls(p50, p95, p99)


@dataclass(frozen=True)
class GroupSummary:
    """The numbers of one group of requests (a region, a model, or both)."""

    requests: int
    failed: int
    ttft_s: Quantiles
    itl_s: Quantiles
    requests_per_s: float
    output_tokens_per_s: float
    prefix_cache_hit_rate: float | None
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: plain numbers, None for what has no sample."""
        out = asdict(self)
        out["throughput"] = {
            "requests_per_s": out.pop("requests_per_s"),
            "output_tokens_per_s": out.pop("output_tokens_per_s"),
        }
        return out


def summarise(results: Sequence[RequestResult]) -> GroupSummary:
    """The summary of `results` taken together."""
    ok = [r for r in results if r.ok]
    prompt = sum(r.prompt_tokens for r in ok)
    cached = sum(r.cached_tokens for r in ok)
    output = sum(r.output_tokens for r in ok)
    window = _window(results)
    return GroupSummary(
        requests=len(results),
        failed=len(results) - len(ok),
        ttft_s=Quantiles.of([t for r in ok if (t := r.ttft) is not None]),
        itl_s=Quantiles.of([gap for r in ok for gap in r.itl]),
        requests_per_s=len(ok) / window if window else 0.0,
        output_tokens_per_s=output / window if window else 0.0,
        prefix_cache_hit_rate=cached / prompt if prompt else None,
        prompt_tokens=prompt,
        cached_tokens=cached,
        output_tokens=output,
    )


def _window(results: Sequence[RequestResult]) -> float:
    if not results:
        return 0.0
    return max(r.ended for r in results) - min(r.started for r in results)


def group_by(
    results: Iterable[RequestResult], key: Callable[[RequestResult], str]
) -> dict[str, GroupSummary]:
    """One summary per value of `key`, in sorted key order."""
    groups: dict[str, list[RequestResult]] = {}
    for result in results:
        groups.setdefault(key(result), []).append(result)
    return {name: summarise(groups[name]) for name in sorted(groups)}


def breakdown(results: Sequence[RequestResult]) -> dict[str, Any]:
    """Overall, per region, per model and per region/model summaries, in their JSON form."""
    return {
        "overall": summarise(results).to_dict(),
        "per_region": _dicts(group_by(results, lambda r: r.region)),
        "per_model": _dicts(group_by(results, lambda r: r.model)),
        "per_region_model": _dicts(group_by(results, lambda r: f"{r.region}/{r.model}")),
    }


def _dicts(groups: dict[str, GroupSummary]) -> dict[str, dict[str, Any]]:
    return {name: summary.to_dict() for name, summary in groups.items()}
