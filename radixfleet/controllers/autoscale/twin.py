"""The autoscaler in the fleet twin: the same `decide()` behind the twin's ScalingPolicy.

The twin hands each revision's scaler a `ServiceObservation` with every replica's
`ReplicaStats` (the numbers behind `sglang:*`); this adapter turns it into an `Observed`, keeps
the `AutoscaleStatus` between ticks as the CR's status would keep it, and answers the twin's
victim question with the cache-aware choice. Virtual seconds become datetimes from a fixed epoch.

Scenarios name a factory below as their autoscale policy, e.g.
`autoscale: radixfleet.controllers.autoscale.twin:radixfleet`; the twin imports it by name (no
registration).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from radixfleet.controllers.autoscale.decide import decide
from radixfleet.controllers.autoscale.pairs import pair_counts
from radixfleet.controllers.autoscale.prewarm import Prewarming
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import AutoscaleStatus, Observed, ReplicaMetrics
from radixfleet.controllers.autoscale.victims import choose_victims
from radixfleet.twin.autoscale import Kpa
from radixfleet.twin.interfaces import (
    ReplicaView,
    ScalingPolicy,
    ServiceObservation,
    Waiting,
    WarmUp,
)
from radixfleet.twin.region_base import cached_profile
from radixfleet.twin.registry import PolicyContext

EPOCH = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)  # a Monday: virtual second 0
STARTING_STATES = ("provisioning", "starting")


class TwinAutoscaler:
    """A ScalingPolicy (and DrainChooser) running `radixfleet.controllers.autoscale.decide`."""

    needs_replica_stats = True

    def __init__(self, spec: AutoscalePolicySpec) -> None:
        self.spec = spec
        self.tick_s = float(spec.interval_seconds)
        self.status: AutoscaleStatus | None = None
        self.decisions = 0
        self._cached: dict[int, int] = {}  # replica id -> cached_tokens_total at the last tick
        self._last_at: float | None = None
        self._last: Observed | None = None
        self.prewarming = Prewarming(spec.prewarm, queue_allowance=spec.targets.queue_per_replica)

    def record(self, blocks: Sequence[Hashable], now: float) -> None:
        """The gateway routed a prompt: count its prefixes for pre-warming."""
        self.prewarming.record(blocks, now)

    def warmup(
        self, *, kv_blocks: int, serving: int, waiting: Waiting, now: float
    ) -> WarmUp | None:
        """The hottest prefixes for a new replica, when it may be held back for them."""
        return self.prewarming.warmup(kv_blocks=kv_blocks, serving=serving, waiting=waiting,
                                      now=now)  # fmt: skip

    def holds_back(self, *, serving: int, waiting: Waiting) -> bool:
        """Whether a warming replica may stay out of traffic now."""
        return self.prewarming.holds_back(serving=serving, waiting=waiting)

    def desired_replicas(self, observed: ServiceObservation, now: float) -> int:
        """Observe, decide, keep the status; the twin clamps the answer to the model's bounds."""
        seen = self.observe(observed, now)
        decision = decide(seen, self.spec, self.status, EPOCH + timedelta(seconds=now))
        self.status, self._last = decision.status, seen
        self.decisions += 1
        return decision.desired

    def choose_victims(self, observed: ServiceObservation, count: int) -> list[int]:
        """Starting replicas first (youngest first), then the least valuable caches."""
        starting = sorted(
            (r for r in observed.replicas if r.state in STARTING_STATES),
            key=lambda r: (-r.created_at, -r.id),
        )
        chosen = [r.id for r in starting[:count]]
        if len(chosen) < count and self._last is not None:
            ready_only = Observed(ready=self._last.ready, replicas=self._last.replicas)
            keep = ready_only.current - (count - len(chosen))
            named = choose_victims(ready_only, keep, cache_aware=self.spec.cache_aware_drain)
            chosen += [int(name) for name in named]
        return chosen

    def observe(self, observed: ServiceObservation, now: float) -> Observed:
        """The twin's snapshot as the controller's observation of a revision."""
        last, self._last_at = self._last_at, now
        elapsed = self.tick_s if last is None else max(now - last, 1e-3)
        ready = [r for r in observed.replicas if r.state == "ready" and r.stats is not None]
        metrics = tuple(self._metrics(r, elapsed, seen=r.id in self._cached) for r in ready)
        self._cached = {r.id: _cached_total(r) for r in ready}
        return Observed(
            ready=len(ready),
            replicas=metrics,
            starting=sum(1 for r in observed.replicas if r.state in STARTING_STATES),
            # A first look has no interval behind it: its rate is unknown, as Prometheus's
            # rate() of a series with one sample is, not zero (a zero there read as a rise).
            arrival_rate=None if last is None else observed.arrivals / elapsed,
            waiting=float(observed.buffered),
            revision=f"{observed.region}/{observed.model}",
            ceiling=observed.max_replicas,
        )

    def _metrics(self, replica: ReplicaView, elapsed: float, *, seen: bool) -> ReplicaMetrics:
        stats = replica.stats
        assert stats is not None
        total = _cached_total(replica)
        before = self._cached.get(replica.id, total)
        return ReplicaMetrics(
            name=str(replica.id),
            running=float(stats.num_running_reqs),
            queued=float(stats.num_queue_reqs),
            kv_usage=stats.token_usage,
            cached_tokens_rate=max(0, total - before) / elapsed,
            hit_rate=stats.cache_hit_rate,
            # The model's throughput is a 5 s window: on a replica's first ready tick it counts
            # time the replica was not serving (SGLang's own gauge averages decode steps only).
            gen_throughput=stats.gen_throughput if seen else None,
        )


def _cached_total(replica: ReplicaView) -> int:
    return 0 if replica.stats is None else replica.stats.counters.cached_tokens_total


def spec_for(ctx: PolicyContext, **overrides: Any) -> AutoscalePolicySpec:
    """An AutoscalePolicy for the context's model: its bounds, SLO and cold start."""
    model = ctx.model
    assert model is not None, "the autoscaler is a per-model policy"
    profile = cached_profile(model.profile, ctx.scenario)
    fields: dict[str, Any] = {
        "inferenceService": model.name,
        "minReplicas": model.min_replicas,
        "maxReplicas": model.max_replicas,
        "slo": {"ttftP95Ms": model.slo.ttft_ms, "itlP95Ms": model.slo.itl_ms},
        "coldStart": {"seconds": profile.cold_start_seconds},
        "targets": {"itlFloorMs": profile.decode_overhead_s * 1000.0},
    }
    return AutoscalePolicySpec.model_validate(_merge(fields, overrides))


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def radixfleet(ctx: PolicyContext) -> TwinAutoscaler:
    """The default AutoscalePolicy for the model."""
    return TwinAutoscaler(spec_for(ctx))


def no_predictive(ctx: PolicyContext) -> TwinAutoscaler:
    """Ablation: no forecast of arrivals (signals only)."""
    return TwinAutoscaler(spec_for(ctx, warmPool={"predictive": {"enabled": False}}))


def no_prewarm(ctx: PolicyContext) -> TwinAutoscaler:
    """Ablation: new replicas take traffic as soon as they are ready, with empty caches."""
    return TwinAutoscaler(spec_for(ctx, prewarm={"enabled": False}))


def idle_window(ctx: PolicyContext) -> TwinAutoscaler:
    """Ablation: zero after the fixed idle window, whatever the model's idle gaps say."""
    return TwinAutoscaler(spec_for(ctx, coldStart={"learnIdleWindow": False}))


def cold_tolerant(ctx: PolicyContext) -> TwinAutoscaler:
    """A model whose team accepts that a fifth of its requests wait on a cold start."""
    return TwinAutoscaler(spec_for(ctx, coldStart={"budget": 0.2}))


def cold_tolerant_idle_window(ctx: PolicyContext) -> TwinAutoscaler:
    """The same, going to zero after the fixed idle window (the break-even's ablation)."""
    return TwinAutoscaler(spec_for(ctx, coldStart={"budget": 0.2, "learnIdleWindow": False}))


def cache_blind(ctx: PolicyContext) -> TwinAutoscaler:
    """Ablation: scale-down drains the replica with the fewest running requests."""
    return TwinAutoscaler(spec_for(ctx, cacheAwareDrain=False))


class TwinPairScaler:
    """A prefill/decode pair's scaler (the twin's PairScaler): `decide()` once per role, on
    that role's replicas and signals, put together by the pair rule (`pairs.pair_counts`: both
    roles at zero together, a waiting request wakes both)."""

    def __init__(self, prefill: ScalingPolicy, decode: ScalingPolicy) -> None:
        self.prefill, self.decode = prefill, decode
        self.tick_s = prefill.tick_s
        self.needs_replica_stats = prefill.needs_replica_stats or decode.needs_replica_stats

    def desired_replicas(self, observed: ServiceObservation, now: float) -> int:
        """Unused for a pair (the twin asks `desired_pair`); the pair's replicas as they are."""
        return observed.active

    def desired_pair(
        self, prefill: ServiceObservation, decode: ServiceObservation, now: float
    ) -> tuple[int, int]:
        """Each role's recommendation, then the pair rule."""
        counts = pair_counts(
            prefill=self.prefill.desired_replicas(prefill, now),
            decode=self.decode.desired_replicas(decode, now),
            waiting=prefill.buffered > 0,
        )
        return counts.prefill, counts.decode


def pd_pairs(ctx: PolicyContext) -> TwinPairScaler:
    """radixfleet's autoscaler for a P/D pair: one `decide()` per role, scaled as one."""
    return TwinPairScaler(TwinAutoscaler(spec_for(ctx)), TwinAutoscaler(spec_for(ctx)))


def kpa_pairs(ctx: PolicyContext) -> TwinPairScaler:
    """The baseline for a P/D pair: Knative's KPA per role (each at zero after its grace),
    scaled as one by the same pair rule."""
    return TwinPairScaler(Kpa(), Kpa())
