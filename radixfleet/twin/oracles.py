"""Hindsight oracles: the best a policy could do on this workload, to judge policies against.

- :func:`prefix_oracle`: the prefix hit rate of one infinite cache per model that has seen
  every earlier request (no eviction, no routing mistakes).
- :func:`gpu_oracle`: the fewest GPU-seconds that meet the SLO knowing the future: per minute
  and per region, just enough warm replicas for that minute's arrivals at the largest rate one
  replica serves within the SLO (found by simulating one replica on the model's own requests),
  with no cold start and perfect balance. The replica's cache starts warm with every prefix of
  the model's earlier requests, on top of its own KV room, as perfect cache-aware routing
  would spread them over a fleet's caches. A LoRA model's requests are served as the base
  model's (no load, no slot to wait for). It is a bound, not a policy.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from radixfleet.replica import (
    EventKind,
    RejectedError,
    ReplicaModel,
    RequestSpec,
    SchedulePolicy,
)
from radixfleet.twin.region_base import cached_profile
from radixfleet.twin.scenario import Model
from radixfleet.twin.workload import Workload

WINDOW_S = 60.0
CALIBRATION_REQUESTS = 400
#: Earlier requests whose prompts are in the calibration replica's cache before it is timed.
WARMUP_REQUESTS = 2000


@dataclass(frozen=True)
class GpuOracle:
    """The hindsight GPU budget, and the per-replica capacity it was built from."""

    gpu_hours: float
    capacity_rps: dict[str, float]


def prefix_oracle(workload: Workload) -> dict[str, float]:
    """Per model, the infinite-cache prefix hit rate over the whole run."""
    return infinite_cache_hit_rate(workload)


def infinite_cache_hit_rate(workload: Workload, *, limit: int | None = None) -> dict[str, float]:
    """Per model: the share of prompt tokens a single infinite prefix cache would serve.

    The hit stops one token short of the prompt, as the replica's does (SGLang recomputes the
    last token). `limit` caps the requests looked at, from the start, for very long runs.
    """
    scenario = workload.scenario
    arrivals = workload.arrivals
    seen: list[set[Hashable]] = [set() for _ in scenario.models]
    hit = [0] * len(scenario.models)
    total = [0] * len(scenario.models)
    count = len(arrivals) if limit is None else min(limit, len(arrivals))
    models = arrivals.model.tolist()
    for index in range(count):
        m = models[index]
        spec = workload.spec(index)
        cache, block = seen[m], scenario.models[m].block_tokens
        usable = (spec.prompt_tokens - 1) // block
        depth = 0
        for key in spec.prompt_blocks[:usable]:
            if key not in cache:
                break
            depth += 1
        hit[m] += depth * block
        total[m] += spec.prompt_tokens
        cache.update(spec.prompt_blocks)
    return {
        spec.name: (hit[m] / total[m] if total[m] else 0.0)
        for m, spec in enumerate(scenario.models)
    }


def gpu_oracle(workload: Workload) -> GpuOracle:
    """The hindsight minimum GPU-hours meeting every model's SLO (see the module docstring)."""
    scenario = workload.scenario
    arrivals = workload.arrivals
    capacity = {m.name: replica_capacity(workload, i) for i, m in enumerate(scenario.models)}
    windows = max(1, math.ceil(scenario.duration_s / WINDOW_S))
    bins = np.minimum((arrivals.t // WINDOW_S).astype(np.int64), windows - 1)
    gpu_seconds = 0.0
    for m, model in enumerate(scenario.models):
        gpus = cached_profile(model.profile, scenario).gpu_count
        per_window = capacity[model.name] * WINDOW_S
        for r in range(len(scenario.regions)):
            mask = (arrivals.model == m) & (arrivals.home == r)
            counts = np.bincount(bins[mask], minlength=windows)
            gpu_seconds += float(np.ceil(counts / per_window).sum()) * WINDOW_S * gpus
    return GpuOracle(gpu_hours=gpu_seconds / 3600.0, capacity_rps=capacity)


def replica_capacity(workload: Workload, model_index: int) -> float:
    """The highest arrival rate one warm replica serves within the model's SLO target."""
    model = workload.scenario.models[model_index]
    mine = np.nonzero(workload.arrivals.model == model_index)[0]
    if len(mine) == 0:
        return 1.0
    warm_count = min(WARMUP_REQUESTS, max(0, len(mine) - CALIBRATION_REQUESTS))
    warmup = [workload.spec(i).prompt_blocks for i in mine[:warm_count].tolist()]
    indices = mine[warm_count : warm_count + CALIBRATION_REQUESTS]
    low, high = 0.05, 1.0
    while _meets(workload, model, warmup, indices, high) and high < 1e4:
        low, high = high, high * 2
    for _ in range(8):
        middle = math.sqrt(low * high)
        fast_enough = _meets(workload, model, warmup, indices, middle)
        low, high = (middle, high) if fast_enough else (low, middle)
    return low


def _warm_replica(
    workload: Workload, model: Model, warmup: Sequence[tuple[Hashable, ...]]
) -> ReplicaModel:
    """A ready replica whose cache holds `warmup`'s prompts in room added for them."""
    profile = cached_profile(model.profile, workload.scenario)
    extra = len({key for blocks in warmup for key in blocks}) * model.block_tokens
    replica = ReplicaModel(
        profile=profile.model_copy(
            update={"kv_capacity_tokens": profile.kv_capacity_tokens + extra}
        ),
        now=0.0,
        block_tokens=model.block_tokens,
        schedule_policy=SchedulePolicy(model.schedule_policy),
        warm=True,
    )
    for blocks in warmup:
        replica.cache.insert(blocks, now=0.0)
    return replica


def _meets(
    workload: Workload,
    model: Model,
    warmup: Sequence[tuple[Hashable, ...]],
    indices: np.ndarray,
    rate: float,
) -> bool:
    replica = _warm_replica(workload, model, warmup)
    ttft_limit, itl_limit = model.slo.ttft_ms / 1000.0, model.slo.itl_ms / 1000.0
    good = 0
    for k, index in enumerate(indices.tolist()):
        now = k / rate  # evenly spaced: the oracle also smooths arrivals within a window
        for event in replica.advance(now):
            good += _good(event.kind, event.request, ttft_limit, itl_limit)
        try:
            replica.submit(_as_base(workload.spec(index)), now=now)
        except RejectedError:
            continue
    while (when := replica.next_event_time()) is not None:
        for event in replica.advance(when):
            good += _good(event.kind, event.request, ttft_limit, itl_limit)
    return good >= model.slo.target * len(indices)


def _as_base(spec: RequestSpec) -> RequestSpec:
    """A LoRA request as the base model's: adapters only add work (loads, slots, mixed batches),
    so a replica serving none bounds the capacity from above, as an oracle should."""
    return spec if spec.adapter is None else replace(spec, adapter=None)


def _good(kind: EventKind, request: object, ttft_limit: float, itl_limit: float) -> int:
    if kind is not EventKind.FINISHED:
        return 0
    ttft = getattr(request, "ttft", None)
    itl = getattr(request, "mean_itl", None)
    return int(ttft is not None and ttft <= ttft_limit and (itl is None or itl <= itl_limit))
