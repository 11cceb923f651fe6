"""The whole autoscaling policy, as pure functions: `decide(observed, spec, status, now)`.

No I/O, no clock: the controller, the local fleet and the twin call the same function. Steps:

1. Metrics missing, NaN, or not covering every ready replica halt: the count stays where it is
   (inside the spec's bounds), and nothing scales to zero on a gap (Flagger's rule).
2. Memory: arrival rates over the predictive lookback, requests that waited on a cold start,
   the last time the model had a request, and what one replica carries (learned).
3. Demand, in replicas, from each signal: KV usage plus the queue priced at the KV footprint of
   a running request; optionally running requests; TTFT/ITL p95 over the SLO (push up only);
   the arrival rate forecast one cold start ahead. The largest wins.
4. A recommendation within `tolerance` of the current count keeps it. Recommendations pass the
   HPA's stabilisation: up to the lowest of the scale-up window, down to the highest of the
   (long) scale-down window; then rate limits per tick.
5. Bounds: the spec's min/max, the InferenceService's maxReplicas, the schedule's warm floor,
   and one replica while any request is in sight, until the idle window has passed (the
   cold-start memory instead, while the cold-start budget is spent).
6. Scale-down names the replicas to drain: starting ones go first anyway (nothing cached), then
   the ready ones whose cache served the fewest prompt tokens, fewest running requests first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from policies.autoscale.spec import AutoscalePolicySpec
from policies.autoscale.state import (
    AutoscaleStatus,
    ColdStarts,
    Demand,
    LastDecision,
    Learned,
    Observed,
    ReplicaMetrics,
    Sample,
    Verb,
    finite,
)

# Until a running request has been seen, a queued request is priced at 1/16 of a replica's KV
# target: a guess that only matters for the first scale-up of a model's life.
FALLBACK_REQUESTS_PER_REPLICA = 16.0
LEARNING_RATE = 0.2  # weight of a new sample in what is learned about a replica
MIN_LEARNING_LOAD = 0.5  # replicas' worth of KV in use before a capacity sample counts
EPSILON = 1e-9


@dataclass(frozen=True)
class Decision:
    """What to do now, why, and the status to record. `victims` are pods to drain first."""

    verb: Verb
    desired: int
    reason: str
    status: AutoscaleStatus
    victims: tuple[str, ...] = ()

    @property
    def warning(self) -> bool:
        return self.verb is Verb.HALT


def decide(
    observed: Observed, spec: AutoscalePolicySpec, status: AutoscaleStatus | None, now: datetime
) -> Decision:
    """The desired replica count of one InferenceService's serving revision under `spec`."""
    status = resume(observed, spec, status, now)
    reference = max(status.desired, observed.current)
    if spec.paused:
        held = _hold(observed, spec, reference, now)
        return _record(Verb.HOLD, held, f"paused at {held}", status, now)
    halt = halt_reason(observed)
    if halt is not None:
        held = _hold(observed, spec, reference, now)
        return _record(Verb.HALT, held, f"halted at {held}: {halt}", status, now)
    return _scale(observed, spec, remember(observed, spec, status, now), reference, now)


def due(spec: AutoscalePolicySpec, status: AutoscaleStatus | None, now: datetime) -> bool:
    """Whether a decision is due; the controller's timer ticks faster than any interval."""
    if status is None or status.last_tick_at is None:
        return True
    return now - status.last_tick_at >= timedelta(seconds=spec.interval_seconds * 0.9)


def resume(
    observed: Observed, spec: AutoscalePolicySpec, status: AutoscaleStatus | None, now: datetime
) -> AutoscaleStatus:
    """The status to carry on from: a fresh one for a new serving revision.

    What was learned about a replica and the cold-start counts belong to the model and carry
    over; the windows belong to the old revision's replicas and start again. A new status
    counts the model as active now, so a controller's first tick never scales to zero.
    """
    if status is not None and status.revision == observed.revision:
        return status
    return AutoscaleStatus(
        inference_service=spec.inference_service,
        revision=observed.revision,
        desired=observed.current,
        learned=status.learned if status else Learned(),
        cold=status.cold if status else ColdStarts(),
        last_active_at=now,
    )


def halt_reason(observed: Observed) -> str | None:
    """Why `observed` cannot be scaled on, or None when it can."""
    if observed.metrics_error is not None:
        return observed.metrics_error
    incomplete = [r.name for r in observed.replicas if not r.complete]
    if incomplete:
        return f"missing or NaN SGLang gauges for {', '.join(sorted(incomplete)[:5])}"
    if len(observed.replicas) < observed.ready:
        return f"metrics for {len(observed.replicas)} of {observed.ready} ready replicas"
    return None


# ---- memory --------------------------------------------------------------------------------


def remember(
    observed: Observed, spec: AutoscalePolicySpec, status: AutoscaleStatus, now: datetime
) -> AutoscaleStatus:
    """`status` with this observation added to what the decision remembers."""
    elapsed = _elapsed(spec, status, now)
    rate = finite(observed.arrival_rate)
    rates = status.rates
    if rate is not None:
        horizon = now - timedelta(seconds=spec.warm_pool.predictive.lookback_seconds)
        rates = (*(s for s in rates if s.at > horizon), Sample(at=now, value=max(rate, 0.0)))
    return status.model_copy(
        update={
            "rates": rates,
            "cold": _count_cold(observed, spec, status.cold, elapsed),
            "learned": learn(observed, spec, status.learned),
            "last_active_at": now if observed.busy() else status.last_active_at,
            "last_tick_at": now,
        }
    )


def _elapsed(spec: AutoscalePolicySpec, status: AutoscaleStatus, now: datetime) -> float:
    # Capped, so a long halt or a controller restart does not count one rate for an hour.
    if status.last_tick_at is None:
        return float(spec.interval_seconds)
    seconds = (now - status.last_tick_at).total_seconds()
    return min(max(seconds, 0.0), 2.0 * spec.interval_seconds)


def _count_cold(
    observed: Observed, spec: AutoscalePolicySpec, cold: ColdStarts, elapsed: float
) -> ColdStarts:
    # Requests arriving while no replica is ready wait on a cold start. Without a rate (no
    # replica reports one at zero), the requests held upstream are what is known to have come.
    rate = finite(observed.arrival_rate)
    arrived = rate * elapsed if rate is not None else finite(observed.waiting) or 0.0
    decay = math.exp(-elapsed / spec.cold_start.memory_seconds)
    waited = arrived if observed.ready == 0 else 0.0
    return ColdStarts(requests=cold.requests * decay + arrived, waited=cold.waited * decay + waited)


def learn(observed: Observed, spec: AutoscalePolicySpec, learned: Learned) -> Learned:
    """Update what one replica carries: KV per running request, requests/s at the target."""
    running = sum(r.running or 0.0 for r in observed.replicas)
    kv = sum(r.kv_usage or 0.0 for r in observed.replicas)
    footprint = learned.footprint
    if running >= 1 and kv > 0:
        footprint = _blend(footprint, kv / running)
    replica_rps = learned.replica_rps
    load = kv / spec.targets.kv_usage
    rate = finite(observed.arrival_rate)
    if rate is not None and rate > 0 and load >= MIN_LEARNING_LOAD:
        replica_rps = _blend(replica_rps, rate / load)
    return Learned(replica_rps=replica_rps, footprint=footprint)


def _blend(old: float | None, sample: float) -> float:
    return sample if old is None else old + LEARNING_RATE * (sample - old)


# ---- demand --------------------------------------------------------------------------------


def demand(
    observed: Observed, spec: AutoscalePolicySpec, status: AutoscaleStatus, now: datetime
) -> Demand:
    """The replicas each signal asks for (fractions; the largest one decides)."""
    targets = spec.targets
    queued = _excess_queue(observed, spec)
    kv_in_use = sum(r.kv_usage or 0.0 for r in observed.replicas)
    running = sum(r.running or 0.0 for r in observed.replicas)
    footprint = kv_in_use / running if running >= 1 else _learned_footprint(spec, status)
    return Demand(
        kv=(kv_in_use + queued * footprint) / targets.kv_usage,
        running=(running + queued) / targets.running_per_replica
        if targets.running_per_replica
        else 0.0,
        latency=_latency_demand(observed, spec),
        predicted=_predicted_demand(spec, status, now),
    )


def _excess_queue(observed: Observed, spec: AutoscalePolicySpec) -> float:
    queued = sum(r.queued or 0.0 for r in observed.replicas)
    allowed = spec.targets.queue_per_replica * observed.ready
    return max(0.0, queued - allowed) + max(0.0, finite(observed.waiting) or 0.0)


def _learned_footprint(spec: AutoscalePolicySpec, status: AutoscaleStatus) -> float:
    if status.learned.footprint is not None:
        return status.learned.footprint
    return spec.targets.kv_usage / FALLBACK_REQUESTS_PER_REPLICA


def _latency_demand(observed: Observed, spec: AutoscalePolicySpec) -> float:
    # A latency over its SLO says "more", never how many fewer: it only pushes up, in
    # proportion to the overshoot and never faster than a scale-up tick allows.
    ratios = [
        value / (slo_ms / 1000.0)
        for value, slo_ms in (
            (finite(observed.ttft_p95), spec.slo.ttft_p95_ms),
            (finite(observed.itl_p95), spec.slo.itl_p95_ms),
        )
        if value is not None
    ]
    worst = max(ratios, default=0.0)
    if observed.ready == 0 or worst <= 1.0 + spec.targets.tolerance:
        return 0.0
    return observed.ready * min(worst, spec.scale_up.max_rate)


def _predicted_demand(spec: AutoscalePolicySpec, status: AutoscaleStatus, now: datetime) -> float:
    predictive = spec.warm_pool.predictive
    per_replica = predictive.replica_rps or status.learned.replica_rps
    if not predictive.enabled or per_replica is None or not status.rates:
        return 0.0
    rate = forecast(status.rates, now + timedelta(seconds=spec.cold_start.seconds))
    return rate * predictive.headroom / per_replica


def forecast(rates: Sequence[Sample], at: datetime) -> float:
    """The arrival rate at `at` on the least-squares line through `rates`.

    Never below zero, nor above twice the highest rate seen: a short steep trend must not
    buy a fleet.
    """
    if len(rates) < 3:
        return rates[-1].value
    t0 = rates[0].at
    xs = [(s.at - t0).total_seconds() for s in rates]
    ys = [s.value for s in rates]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    value = mean_y + slope * ((at - t0).total_seconds() - mean_x)
    return min(max(value, 0.0), 2.0 * max(ys))


# ---- from demand to a count ----------------------------------------------------------------


def recommend(load: float, reference: int, tolerance: float) -> int:
    """Replicas for `load`; within `tolerance` of `reference` the reference stands."""
    if reference > 0 and abs(load / reference - 1.0) <= tolerance:
        return reference
    return max(0, math.ceil(load - EPSILON))


def stabilize(
    reference: int, recommendations: Sequence[Sample], spec: AutoscalePolicySpec, now: datetime
) -> int:
    """The HPA's rule: up to the lowest recommendation of the scale-up window, down only to
    the highest of the scale-down window. Each window includes the current recommendation.

    A scale-down window not yet covered by recommendations (a new revision, a first tick)
    counts the reference for the rest: nothing is removed on less than a window's evidence.
    """
    up = _window(recommendations, now, spec.scale_up.stabilization_seconds)
    down = _window(recommendations, now, spec.scale_down.stabilization_seconds)
    if not _covers(recommendations, now, spec):
        down.append(float(reference))
    desired = reference
    desired = max(desired, int(min(up)))
    return min(desired, int(max(down)))


def _covers(recommendations: Sequence[Sample], now: datetime, spec: AutoscalePolicySpec) -> bool:
    window = spec.scale_down.stabilization_seconds
    start = now - timedelta(seconds=max(0, window - spec.interval_seconds))
    return window == 0 or (bool(recommendations) and recommendations[0].at <= start)


def _window(recommendations: Sequence[Sample], now: datetime, seconds: int) -> list[float]:
    since = now - timedelta(seconds=seconds)
    return [s.value for s in recommendations if s.at >= since]


def limit_rate(desired: int, reference: int, spec: AutoscalePolicySpec) -> int:
    """`desired` within one tick's reach of `reference`."""
    up = spec.scale_up
    highest = max(math.ceil(reference * up.max_rate), reference + up.min_step)
    lowest = max(0, min(reference - 1, math.floor(reference / spec.scale_down.max_rate)))
    return _clamp(desired, lowest, highest)


def bounds(
    observed: Observed, spec: AutoscalePolicySpec, status: AutoscaleStatus, now: datetime
) -> tuple[int, int]:
    """The floor and the ceiling at `now`; the floor never exceeds the ceiling."""
    floor, ceiling = _spec_bounds(observed, spec, now)
    if observed.busy() or not idle(spec, status, now):
        floor = max(floor, 1)  # never to zero with a request in sight, nor before the window
    return min(floor, ceiling), ceiling


def idle(spec: AutoscalePolicySpec, status: AutoscaleStatus, now: datetime) -> bool:
    """Whether the model has gone without requests long enough to scale to zero.

    While more requests than the cold-start budget allows have waited on a cold start, the
    window is the cold-start memory instead: the model stays warm rather than make the next
    burst wait again.
    """
    if status.last_active_at is None:
        return True
    window = spec.idle_seconds
    if status.cold.share > spec.cold_start.budget:
        window = max(window, spec.cold_start.memory_seconds)
    return now - status.last_active_at >= timedelta(seconds=window)


def _spec_bounds(observed: Observed, spec: AutoscalePolicySpec, now: datetime) -> tuple[int, int]:
    ceiling = spec.max_replicas
    if observed.ceiling is not None and observed.ceiling > 0:  # 0: KServe's "no limit"
        ceiling = min(ceiling, observed.ceiling)
    floor = max(spec.min_replicas, spec.warm_pool.floor(now))
    return min(floor, ceiling), ceiling


def _hold(observed: Observed, spec: AutoscalePolicySpec, reference: int, now: datetime) -> int:
    # Held where it is, inside the bounds the user set; a request in sight still keeps one.
    floor, ceiling = _spec_bounds(observed, spec, now)
    if observed.busy():
        floor = max(floor, 1)
    return _clamp(reference, floor, ceiling)


def _clamp(value: int, lowest: int, highest: int) -> int:
    return min(max(value, lowest), highest)


# ---- the decision --------------------------------------------------------------------------


def _scale(
    observed: Observed,
    spec: AutoscalePolicySpec,
    status: AutoscaleStatus,
    reference: int,
    now: datetime,
) -> Decision:
    wanted = demand(observed, spec, status, now)
    load = max(wanted.kv, wanted.running, wanted.latency, wanted.predicted)
    recommendation = recommend(load, reference, spec.targets.tolerance)
    recommendations = _keep(status.recommendations, spec, now, recommendation)
    stable = stabilize(reference, recommendations, spec, now)
    floor, ceiling = bounds(observed, spec, status, now)
    desired = _clamp(limit_rate(stable, reference, spec), floor, ceiling)
    wanted = wanted.model_copy(update={"floor": floor, "ceiling": ceiling})
    status = status.model_copy(update={"recommendations": recommendations, "demand": wanted})
    verb = _verb(desired, reference)
    reason = _explain(verb, desired, reference, wanted, load)
    victims = choose_victims(observed, desired, cache_aware=spec.cache_aware_drain)
    return _record(verb, desired, reason, status, now, victims)


def _keep(
    recommendations: Sequence[Sample], spec: AutoscalePolicySpec, now: datetime, new: int
) -> tuple[Sample, ...]:
    longest = max(spec.scale_up.stabilization_seconds, spec.scale_down.stabilization_seconds)
    since = now - timedelta(seconds=longest)
    kept = [s for s in recommendations if since <= s.at < now]
    return (*kept, Sample(at=now, value=float(new)))


def _verb(desired: int, reference: int) -> Verb:
    if desired > reference:
        return Verb.SCALE_UP
    if desired < reference:
        return Verb.SCALE_DOWN
    return Verb.HOLD


def _explain(verb: Verb, desired: int, reference: int, wanted: Demand, load: float) -> str:
    signals = (
        f"kv {wanted.kv:.2f}, running {wanted.running:.2f}, latency {wanted.latency:.2f}, "
        f"predicted {wanted.predicted:.2f} replicas; bounds {wanted.floor}..{wanted.ceiling}"
    )
    if verb is Verb.HOLD:
        return f"holding {desired} (demand {load:.2f}: {signals})"
    return f"{reference} -> {desired} (demand {load:.2f}: {signals})"


def _record(
    verb: Verb,
    desired: int,
    reason: str,
    status: AutoscaleStatus,
    now: datetime,
    victims: tuple[str, ...] = (),
) -> Decision:
    recorded = status.model_copy(
        update={
            "desired": desired,
            "last_tick_at": now,
            "last_decision": LastDecision(action=verb, reason=reason, at=now),
        }
    )
    return Decision(verb, desired, reason, recorded, victims)


# ---- which replicas go ---------------------------------------------------------------------


def choose_victims(observed: Observed, desired: int, *, cache_aware: bool) -> tuple[str, ...]:
    """The ready replicas to drain first when `desired` is below the current count.

    Starting replicas are removed before any ready one (they hold no cache, and Kubernetes'
    ReplicaSet deletes not-ready pods first), so only the rest are named. Cache-aware, the
    ready replicas whose prefix cache served the fewest prompt tokens per second go first
    (their hit rate when the token rate is unknown); ties, and cache-blind choices, go to the
    replica with the fewest running requests: it drains soonest.
    """
    count = observed.current - desired - observed.starting
    if count <= 0:
        return ()
    ranked = sorted(observed.replicas, key=lambda r: _drain_order(r, cache_aware))
    return tuple(r.name for r in ranked[:count])


def cache_value(replica: ReplicaMetrics) -> float:
    """What a replica's prefix cache is worth: cached prompt tokens/s (or its hit rate)."""
    rate = finite(replica.cached_tokens_rate)
    if rate is not None:
        return rate
    return finite(replica.hit_rate) or 0.0


def _drain_order(replica: ReplicaMetrics, cache_aware: bool) -> tuple[float, float, str]:
    value = cache_value(replica) if cache_aware else 0.0
    return (value, finite(replica.running) or 0.0, replica.name)
