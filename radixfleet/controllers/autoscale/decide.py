"""The whole autoscaling policy, as pure functions: `decide(observed, spec, status, now)`.

No I/O, no clock: the controller, the local fleet and the twin call the same function. Steps:

1. Metrics missing, NaN, or not covering every ready replica halt: the count stays where it is
   (inside the spec's bounds), and nothing scales to zero on a gap (Flagger's rule).
2. Memory: arrival rates over the predictive lookback, requests that waited on a cold start,
   the last time the model had a request, and what one replica carries (learned).
3. Demand, in replicas, from each signal: KV usage plus the queue priced at the KV footprint of
   a running request (long-context load); running plus queued requests over the batch a
   replica should run, set or learned from saturation (compute-bound load); the inter-token
   latency (running requests over decode throughput, the median of three ticks) against the
   aim; TTFT/ITL p95 over the SLO (push up only); the arrival rate over what a replica serves
   (learned); the rate's rise one cold start ahead. The largest wins.
4. A recommendation within `tolerance` of the current count keeps it. Recommendations pass the
   HPA's stabilisation: up to the lowest of the scale-up window, down to the highest of the
   (long) scale-down window, read as minute means (the gauges are instants), and never within
   a window of the last scale-up; but replicas ordered and not ready yet are taken back once
   no recommendation of the scale-up window needs them (`take_back`: they hold nothing the
   window protects). Then rate limits: fast up, a step per period down.
5. Bounds: the spec's min/max, the InferenceService's maxReplicas, the schedule's warm floor,
   and one replica while any request is in sight or a rise is forecast, until the idle window
   has passed. The window is the break-even one learned from the model's own idle gaps once
   there are enough of them (never, when a trip to zero costs more than every gap saves),
   else `idleSeconds`; the cold-start memory instead when one more wake would overspend the
   cold-start budget.
6. Scale-down names the replicas to drain: starting ones go first anyway (nothing cached), then
   the ready ones whose cache served the fewest prompt tokens, fewest running requests first.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import (
    AutoscaleStatus,
    BreakEven,
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

# Until a replica has been seen running requests, one replica is priced at 16 queued requests:
# a guess that only matters for a model's first wake from zero.
FALLBACK_REQUESTS_PER_REPLICA = 16.0
LEARNING_RATE = 0.2  # weight of a new sample in what is learned about a replica
MIN_LEARNING_LOAD = 0.5  # replicas' worth of KV in use before a capacity sample counts
EPSILON = 1e-9
SURGE = 1.5  # a recommendation this many times the count skips the scale-up window
MIN_ITL_BATCH = 4  # running requests before a replica's inter-token latency counts
ITL_TICKS = 3  # the ITL signal reads the median of this many ticks' estimates
MIN_RATE_BATCH = 8  # running requests per ready replica before the fleet teaches a rate
MAX_GAPS = 32  # idle gaps remembered for the break-even
MIN_GAPS = 5  # gaps before the break-even replaces the spec's idle window


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
    over; the windows belong to the old revision's replicas and start again. A new status of
    a model with replicas counts it as active now, so a controller's first tick never scales it
    to zero (and one at zero stays there until a request comes).
    """
    if status is not None and status.revision == observed.revision:
        return status
    return AutoscaleStatus(
        inference_service=spec.inference_service,
        revision=observed.revision,
        desired=observed.current,
        learned=status.learned if status else Learned(),
        cold=status.cold if status else ColdStarts(),
        last_active_at=now if observed.current > 0 or observed.busy() else None,
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
    cold = _count_cold(observed, spec, status.cold, elapsed)
    gaps = _gaps(observed, spec, status, now)
    return status.model_copy(
        update={
            "rates": rates,
            "cold": cold,
            "gaps": gaps,
            "break_even": break_even(spec, gaps, cold),
            "learned": learn(observed, spec, status.learned, backlogged=status.backlogged),
            "backlogged": backlogged(observed, spec),
            "itl_estimates": _itl_estimates(status.itl_estimates, itl_estimate(observed)),
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
    return ColdStarts(
        requests=cold.requests * decay + arrived,
        waited=cold.waited * decay + waited,
        peak_rate=max(cold.peak_rate * decay, arrived / elapsed),
    )


def _gaps(
    observed: Observed, spec: AutoscalePolicySpec, status: AutoscaleStatus, now: datetime
) -> tuple[float, ...]:
    # A busy tick after at least one quiet one ends an idle gap: seconds since the last busy one.
    if not observed.busy() or status.last_active_at is None:
        return status.gaps
    gap = (now - status.last_active_at).total_seconds()
    if gap < 2 * spec.interval_seconds:
        return status.gaps
    return (*status.gaps, gap)[-MAX_GAPS:]


def break_even(spec: AutoscalePolicySpec, gaps: Sequence[float], cold: ColdStarts) -> BreakEven:
    """The idle time after which going to zero costs least, over the model's recorded gaps.

    A ski-rental threshold: staying warm through a gap of g seconds costs g replica-seconds;
    going to zero after t idle seconds costs t plus one trip to zero (the next cold start's GPU
    time and the requests that wait on it, priced at `missCostSeconds`). Each gap recorded is a
    sample of the next; the threshold among them (or never) with the least mean cost wins, ties
    to the longer one (fewer cold starts for the same cost).
    """
    start = spec.cold_start
    waiting = 1.0 + cold.peak_rate * start.seconds
    trip = start.seconds + start.miss_cost_seconds * waiting
    if not gaps:
        return BreakEven(zero_cost_seconds=trip)
    never_cost = sum(gaps) / len(gaps)
    best, best_cost = None, never_cost
    for threshold in sorted({0.0, *gaps}, reverse=True):
        cost = sum(g if g <= threshold else threshold + trip for g in gaps) / len(gaps)
        if cost < best_cost - EPSILON:
            best, best_cost = threshold, cost
    return BreakEven(zero_cost_seconds=trip, idle_seconds=best, never=best is None,
                     mean_gap_seconds=never_cost, gaps=len(gaps))  # fmt: skip


def learn(
    observed: Observed,
    spec: AutoscalePolicySpec,
    learned: Learned,
    *,
    backlogged: Sequence[str] = (),
) -> Learned:
    """Update what one replica carries: KV per running request, and its saturation batch.

    `backlogged` are the pods whose queue was past the allowance at the last tick.
    """
    running = sum(r.running or 0.0 for r in observed.replicas)
    kv = sum(r.kv_usage or 0.0 for r in observed.replicas)
    footprint = learned.footprint
    if running >= 1 and kv > 0:
        footprint = _blend(footprint, kv / running)
    # A replica whose queue stays past the allowance runs all it can: that batch is its limit.
    # One tick's queue is not enough: requests arriving during a long prefill wait for the next
    # prefill batch however small the running batch is, and are admitted a moment later.
    before = set(backlogged)
    saturated = [
        r.running or 0.0 for r in observed.replicas if r.name in before and _is_backlogged(spec, r)
    ]
    batch = learned.batch
    if saturated:
        batch = _blend(batch, sum(saturated) / len(saturated))
    itl_floor = learned.itl_floor
    itl = itl_estimate(observed)
    if itl is not None:
        itl_floor = itl if itl_floor is None else min(itl_floor, itl)
    return learned.model_copy(
        update={"footprint": footprint, "batch": batch, "itl_floor": itl_floor}
    )


def backlogged(observed: Observed, spec: AutoscalePolicySpec) -> tuple[str, ...]:
    """The replicas whose queue is past the allowance now."""
    return tuple(r.name for r in observed.replicas if _is_backlogged(spec, r))


def _is_backlogged(spec: AutoscalePolicySpec, replica: ReplicaMetrics) -> bool:
    running = replica.running or 0.0
    return running >= 1 and (replica.queued or 0.0) > _backlog(spec, running)


def _backlog(spec: AutoscalePolicySpec, running: float) -> float:
    # A queue past the allowance and a tenth of the batch is a backlog, not a routing blip.
    return max(spec.targets.queue_per_replica, 0.1 * running)


def learn_rate(observed: Observed, learned: Learned, load: float) -> Learned:
    """Update the requests/s one replica serves at the targets, from the binding signal.

    Only a fleet within its targets teaches it: an overloaded one under-reads its load (the
    latency model saturates, requests pile up in running batches), which would inflate it.
    Nor one running small batches, whose load signal is the rough ITL estimate's: a trickle of
    0.8 req/s in batches of four taught one replica per 1.0 req/s (a replica serves 15), and
    every session after that ordered a second replica.
    """
    rate = finite(observed.arrival_rate)
    if rate is None or rate <= 0 or load < MIN_LEARNING_LOAD or load > observed.ready * 1.1:
        return learned
    running = sum(r.running or 0.0 for r in observed.replicas)
    if running < MIN_RATE_BATCH * max(observed.ready, 1):
        return learned
    return learned.model_copy(update={"replica_rps": _blend(learned.replica_rps, rate / load)})


def _blend(old: float | None, sample: float) -> float:
    return sample if old is None else old + LEARNING_RATE * (sample - old)


# ---- demand --------------------------------------------------------------------------------


def demand(
    observed: Observed, spec: AutoscalePolicySpec, status: AutoscaleStatus, now: datetime
) -> Demand:
    """The replicas each signal asks for (fractions; the largest one decides)."""
    queued = _excess_queue(observed, spec)
    kv_in_use = sum(r.kv_usage or 0.0 for r in observed.replicas)
    running = sum(r.running or 0.0 for r in observed.replicas)
    footprint = kv_in_use / running if running >= 1 else status.learned.footprint or 0.0
    measured = Demand(
        kv=(kv_in_use + queued * footprint) / spec.targets.kv_usage,
        running=_running_demand(observed, spec, status.learned, running, queued),
        itl=_itl_demand(observed, spec, status.learned, itl=_itl_now(status)),
        latency=_latency_demand(observed, spec),
        rate=_rate_demand(observed, spec, status.learned),
    )
    now_demand = max(_binding(measured), measured.rate)
    predicted = _predicted_demand(spec, status, now, now_demand)
    return measured.model_copy(update={"predicted": predicted})


def _excess_queue(observed: Observed, spec: AutoscalePolicySpec) -> float:
    queued = sum(r.queued or 0.0 for r in observed.replicas)
    allowed = spec.targets.queue_per_replica * observed.ready
    return max(0.0, queued - allowed) + max(0.0, finite(observed.waiting) or 0.0)


def target_batch(spec: AutoscalePolicySpec, learned: Learned) -> float | None:
    """Running requests one replica should carry: set in the spec, or learned, or unknown."""
    if spec.targets.running_per_replica is not None:
        return spec.targets.running_per_replica
    if learned.batch is None:
        return None
    return max(1.0, learned.batch * spec.targets.batch_fraction)


def _running_demand(
    observed: Observed, spec: AutoscalePolicySpec, learned: Learned, running: float, queued: float
) -> float:
    batch = target_batch(spec, learned)
    if batch is not None:
        return (running + queued) / batch
    if queued <= 0 or learned.footprint is not None:
        return 0.0  # the KV signal prices the queue at the footprint of a running request
    # Nothing known yet: price the queue at what a replica runs now (a guess at zero). A pod
    # that reports a batch while Knative counts none ready (it just turned unready) is one.
    serving = max(observed.ready, 1)
    per_replica = running / serving if running >= 1 else FALLBACK_REQUESTS_PER_REPLICA
    return observed.ready + queued / per_replica


def itl_estimate(observed: Observed) -> float | None:
    """Seconds between tokens of a running request now: the median over replicas of running
    requests over decode tokens/s (SGLang's first throughput log after an idle spell spans the
    idle time and reads low; the median does not follow such a replica).

    Replicas running fewer than MIN_ITL_BATCH requests are left out: their reading is mostly
    step overhead, and they are nowhere near saturation. It stays rough at small batches:
    `gen_throughput` is set every forty decode steps and the running count at every admission,
    so a batch of four that one request just joined reads a quarter slower than it runs (which
    is why `learn_rate` waits for larger batches). None when no replica qualifies.
    """
    values = sorted(
        (r.running or 0.0) / (finite(r.gen_throughput) or 0.0)
        for r in observed.replicas
        if (r.running or 0.0) >= MIN_ITL_BATCH and (finite(r.gen_throughput) or 0.0) > 0
    )
    if not values:
        return None
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def _itl_estimates(before: Sequence[float], estimate: float | None) -> tuple[float, ...]:
    # A tick without an estimate (no replica runs a batch worth reading) starts them again.
    return () if estimate is None else (*before, estimate)[-ITL_TICKS:]


def _itl_now(status: AutoscaleStatus) -> float | None:
    """The ITL the signal reads: the median of the latest ticks' estimates.

    One tick's estimate jumps with the 40-step log it divides by: at a steady 45 req/s on the
    Azure trace, between 15 and 30 ms on five replicas, and one high tick in a minute held a
    fifth replica for the whole run (2.61 GPU-h against 2.35 on the median). A median of
    three drops such a tick and follows a real change a tick later. An average carries a
    burst's swamped readings on after the burst: an exponential one (weight 0.3 a tick) spent
    7.45 GPU-h on bursts of 30 req/s where the median spends 5.78, at the same attainment.
    """
    estimates = status.itl_estimates
    return statistics.median(estimates) if estimates else None


def _itl_demand(
    observed: Observed, spec: AutoscalePolicySpec, learned: Learned, *, itl: float | None
) -> float:
    """Replicas that bring the inter-token latency to the aim.

    At a steady rate, decode time grows like a queue's wait, floor / (1 - utilisation): the
    utilisation now is 1 - floor / itl, and the replicas that bring it to the aim's are in
    proportion. That model saturates at utilisation 1; past it (a burst on too few
    replicas: batches as large as the KV cache allows, and a backlog behind them) the step
    grows linearly with the batch, queued requests included, which keeps the proportion.
    """
    if itl is None or observed.ready == 0:
        return 0.0
    aim = spec.slo.itl_p95_ms / 1000.0 * spec.targets.itl_fraction
    floor = _itl_floor(spec, learned, aim)
    steady = max(0.0, 1.0 - floor / itl) / (1.0 - floor / aim)
    queued = sum(r.queued or 0.0 for r in observed.replicas)
    if queued <= spec.targets.queue_per_replica * observed.ready or _replica_rps(spec, learned):
        # No backlog, the model holds; or a backlog the rate signal prices better.
        return observed.ready * steady
    running = sum(r.running or 0.0 for r in observed.replicas)
    swamped = (itl - floor) / (aim - floor) * (running + queued) / max(running, 1.0)
    return observed.ready * max(steady, swamped)


def _itl_floor(spec: AutoscalePolicySpec, learned: Learned, aim: float) -> float:
    if spec.targets.itl_floor_ms is not None:
        return min(spec.targets.itl_floor_ms / 1000.0, 0.9 * aim)
    # Learned from the lowest estimate seen; never above a quarter of the aim, so a model
    # that has never run a small batch is not read as nearly idle.
    return min(learned.itl_floor or aim / 4.0, aim / 4.0)


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


def _rate_demand(observed: Observed, spec: AutoscalePolicySpec, learned: Learned) -> float:
    """The arrival rate, plus the backlog drained within one cold start, over what one replica
    serves at the targets: the one signal that keeps its proportion when replicas are
    overloaded (their gauges saturate) or absent (at zero)."""
    rate = finite(observed.arrival_rate)
    per_replica = _replica_rps(spec, learned)
    if rate is None or per_replica is None:
        return 0.0
    drain_s = max(spec.cold_start.seconds, float(spec.interval_seconds))
    return (max(rate, 0.0) + _excess_queue(observed, spec) / drain_s) / per_replica


def _replica_rps(spec: AutoscalePolicySpec, learned: Learned) -> float | None:
    return spec.warm_pool.predictive.replica_rps or learned.replica_rps


def _predicted_demand(
    spec: AutoscalePolicySpec, status: AutoscaleStatus, now: datetime, demand_now: float
) -> float:
    """What today's demand grows to one cold start ahead, when the arrival rate rises.

    Only a rise beyond the tolerance is a trend worth buying replicas for ahead of time (a
    steady rate is served by what the signals ask for now); it scales the demand by as much.
    """
    predictive = spec.warm_pool.predictive
    if not predictive.enabled or not status.rates:
        return 0.0
    ahead = now + timedelta(seconds=spec.cold_start.seconds)
    rate = forecast(status.rates, ahead, min_span_s=predictive.lookback_seconds / 2)
    level = _level(status.rates)
    if level <= 0 or rate <= level * (1.0 + spec.targets.tolerance):
        return 0.0
    return demand_now * rate / level * predictive.headroom


def _level(rates: Sequence[Sample]) -> float:
    recent = [s.value for s in rates[-3:]]
    return sum(recent) / len(recent)


def forecast(rates: Sequence[Sample], at: datetime, *, min_span_s: float = 0.0) -> float:
    """The arrival rate at `at`: the recent level, plus the rise of the least-squares line
    through `rates` if it rises, and rises through the newer half of them too.

    A history shorter than `min_span_s` gives the level: a trend read from a few samples (a
    start, a wake) is noise. A falling trend gives the level too (scaling down is the gauges'
    business). A step the rate took once (a burst's start, traffic moved in by a failover) has
    a rising line through it for as long as it is in the history, though the rate after it is
    flat: the newer half's line says whether it still rises, and the smaller slope is taken.
    Never above twice the highest rate seen: a steep trend must not buy a fleet.
    """
    ys = [s.value for s in rates]
    level = _level(rates)
    if len(rates) < 3 or (rates[-1].at - rates[0].at).total_seconds() < min_span_s:
        return level
    newer = rates[len(rates) // 2 :]
    slope = min(_slope(rates), _slope(newer)) if len(newer) >= 3 else _slope(rates)
    ahead = (at - rates[-1].at).total_seconds()
    return min(level + max(slope, 0.0) * ahead, 2.0 * max(ys))


def _slope(rates: Sequence[Sample]) -> float:
    """The least-squares slope of `rates` over time, per second (0 for one instant)."""
    t0 = rates[0].at
    xs = [(s.at - t0).total_seconds() for s in rates]
    ys = [s.value for s in rates]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread <= 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


# ---- from demand to a count ----------------------------------------------------------------


def recommend(load: float, reference: int, tolerance: float) -> int:
    """Replicas for `load`; within `tolerance` of `reference` the reference stands."""
    if reference > 0 and abs(load / reference - 1.0) <= tolerance:
        return reference
    return max(0, math.ceil(load - EPSILON))


def stabilize(
    reference: int,
    recommendations: Sequence[Sample],
    spec: AutoscalePolicySpec,
    now: datetime,
    *,
    raised_at: datetime | None = None,
) -> int:
    """The HPA's rule: up to the lowest recommendation of the scale-up window, down only to
    the highest of the scale-down window's, each of these read as the mean of the smoothing
    span up to it (`_smoothed`). Each window includes the current recommendation.

    A scale-down window not yet covered by recommendations (a new revision, a first tick)
    counts the reference for the rest: nothing is removed on less than a window's evidence.
    Nor within a window of the last scale-up (`raised_at`): what was added stays a window.
    """
    # The up window filters a noisy reading; a surge (half again the count, or a wake from
    # zero) is no noise, and a cold start is long enough without waiting for it.
    surge = recommendations[-1].value >= max(1.0, SURGE * reference)
    up_window = 0 if surge else spec.scale_up.stabilization_seconds
    up_to = int(min(_span(recommendations, now, timedelta(seconds=up_window))))
    if up_to > reference:
        return up_to  # the smoothing is the scale-down's: it never holds a scale-up back
    down = _smoothed(recommendations, now, spec)
    window = timedelta(seconds=spec.scale_down.stabilization_seconds)
    if not _covers(recommendations, now, spec) or (raised_at and now - raised_at < window):
        down.append(float(reference))
    return min(reference, int(max(down)))


def take_back(
    observed: Observed,
    reference: int,
    recommendations: Sequence[Sample],
    spec: AutoscalePolicySpec,
    now: datetime,
) -> int | None:
    """Replicas ordered and not ready yet are taken back once the demand that ordered them has
    gone for a scale-up window: none of its recommendations needs more than the ready ones.
    The scale-down window protects what a replica holds (its cache, its share of the load); one
    still starting holds nothing, and keeping it meant paying a window of GPU time for a burst
    already over (scale-to-zero-bursts: the second replica a burst's rise ordered came up after
    the burst ended, then stayed 300 s). A wake from zero is never taken back. Returns the count
    to keep, or None when nothing is taken back."""
    ready = observed.ready
    if ready == 0 or reference <= ready:
        return None
    window = timedelta(seconds=spec.scale_up.stabilization_seconds)
    kept = max(ready, int(max(_span(recommendations, now, window))))
    return kept if kept < reference else None


def _covers(recommendations: Sequence[Sample], now: datetime, spec: AutoscalePolicySpec) -> bool:
    window = spec.scale_down.stabilization_seconds
    start = now - timedelta(seconds=max(0, window - spec.interval_seconds))
    return window == 0 or (bool(recommendations) and recommendations[0].at <= start)


def _smoothed(
    recommendations: Sequence[Sample], now: datetime, spec: AutoscalePolicySpec
) -> list[float]:
    """The scale-down window's recommendations, each the mean of those in the smoothing span
    up to it, rounded up (a span of 0: each as it is): a reading above its neighbours holds one
    replica more, not its whole height. Rounded to the nearest count instead, a load whose peaks
    are single ticks (long-context prefill bursts) lost the replica its next peak needed: 91%
    of the SLO on two of three long-context pre-warm runs instead of 99.9%, for 10% fewer
    GPU-hours at 45 req/s. The span never reaches past the window's own length: a short window
    is asked for to act quickly."""
    span = timedelta(seconds=_smoothing_seconds(spec))
    return [
        float(math.ceil(statistics.fmean(_span(recommendations, sample.at, span)) - EPSILON))
        for sample in recommendations
        if sample.at >= now - timedelta(seconds=spec.scale_down.stabilization_seconds)
    ]


def _smoothing_seconds(spec: AutoscalePolicySpec) -> int:
    return min(spec.scale_down.smoothing_seconds, spec.scale_down.stabilization_seconds)


def _span(recommendations: Sequence[Sample], end: datetime, span: timedelta) -> list[float]:
    return [s.value for s in recommendations if end - span <= s.at <= end]


def limit_rate(
    desired: int, reference: int, spec: AutoscalePolicySpec, status: AutoscaleStatus, now: datetime
) -> int:
    """`desired` within one tick's reach of `reference`: up by the rate or the step, down by
    at most the fraction (at least one replica) and no more often than the period."""
    up, down = spec.scale_up, spec.scale_down
    highest = max(math.ceil(reference * up.max_rate), reference + up.min_step)
    last = status.last_scale_down_at
    if last is not None and now - last < timedelta(seconds=down.period_seconds):
        lowest = min(reference, status.desired)  # what is still draining counts as gone
    else:
        lowest = max(0, reference - max(1, math.floor(reference * down.max_fraction)))
    return _clamp(desired, lowest, highest)


def bounds(
    observed: Observed,
    spec: AutoscalePolicySpec,
    status: AutoscaleStatus,
    now: datetime,
    *,
    forecast: float = 0.0,
) -> tuple[int, int]:
    """The floor and the ceiling at `now`; the floor never exceeds the ceiling. `forecast` is
    the predicted demand: a rise on its way keeps a replica, whatever the window says."""
    floor, ceiling = _spec_bounds(observed, spec, now)
    # Never to zero with a request in sight or a rise forecast, nor before the idle window.
    if observed.busy() or forecast > 0 or not idle(spec, status, now):
        floor = max(floor, 1)
    return min(floor, ceiling), ceiling


def idle(spec: AutoscalePolicySpec, status: AutoscaleStatus, now: datetime) -> bool:
    """Whether the model has gone without requests long enough to scale to zero.

    The window is the break-even learned from the model's idle gaps (`break_even`) once
    `MIN_GAPS` are recorded, `idleSeconds` before; when a trip to zero has cost more than
    every recorded gap saves, the model is not idle until it has been quiet for longer than
    its longest recorded gap (then `idleSeconds` decides: a model nobody uses any more does
    not stay warm for ever). The cold-start budget may lengthen the window:
    if going to zero now and waking for a burst like the recent peak would bring the share of
    requests that waited on a cold start over the budget, the model stays warm through the
    cold-start memory. A model whose bursts come further apart than the memory still goes to
    zero.
    """
    if status.last_active_at is None:
        return True
    quiet = (now - status.last_active_at).total_seconds()
    window = float(spec.idle_seconds)
    learned = status.break_even if spec.cold_start.learn_idle_window else None
    if learned is not None and learned.gaps >= MIN_GAPS:
        if learned.never and quiet <= max(status.gaps, default=0.0):
            return False  # every gap so far was cheaper to bridge warm than a trip to zero
        if not learned.never:
            window = learned.idle_seconds or 0.0
        # Past its longest gap the model is in a gap unlike any it has had: idleSeconds.
    if status.cold.share_after_a_wake(spec.cold_start.seconds) > spec.cold_start.budget:
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
    load = max(wanted.kv, wanted.running, wanted.itl, wanted.latency, wanted.rate, wanted.predicted)
    recommendation = recommend(load, reference, spec.targets.tolerance)
    recommendations = _keep(status.recommendations, spec, now, recommendation)
    windowed = stabilize(reference, recommendations, spec, now, raised_at=status.last_scale_up_at)
    kept = take_back(observed, reference, recommendations, spec, now)
    stable = windowed if kept is None else min(windowed, kept)
    floor, ceiling = bounds(observed, spec, status, now, forecast=wanted.predicted)
    desired = _clamp(limit_rate(stable, reference, spec, status, now), floor, ceiling)
    verb = _verb(desired, reference)
    wanted = wanted.model_copy(update={"floor": floor, "ceiling": ceiling})
    status = status.model_copy(
        update={
            "recommendations": recommendations,
            "demand": wanted,
            "learned": learn_rate(
                observed, status.learned, _instant(observed, spec, status, wanted)
            ),
            "last_scale_down_at": now if verb is Verb.SCALE_DOWN else status.last_scale_down_at,
            "last_scale_up_at": now if verb is Verb.SCALE_UP else status.last_scale_up_at,
        }
    )
    reason = _explain(verb, desired, reference, wanted, load)
    if verb is Verb.SCALE_DOWN and kept is not None and kept < windowed:
        reason += (
            f"; taking back replicas not ready yet: no recommendation of the last "
            f"{spec.scale_up.stabilization_seconds} s needs them"
        )
    victims = choose_victims(observed, desired, cache_aware=spec.cache_aware_drain)
    return _record(verb, desired, reason, status, now, victims)


def _binding(wanted: Demand) -> float:
    """The demand of the measured signals (what the arrival rate is compared with)."""
    return max(wanted.kv, wanted.running, wanted.itl)


def _instant(
    observed: Observed, spec: AutoscalePolicySpec, status: AutoscaleStatus, wanted: Demand
) -> float:
    """The measured demand of this tick alone, which a replica's rate is learned from, as it
    was before the median: the median lags a change by a tick, and the rate learned beside it
    came out lower (at 45 req/s the fifth replica stayed about three minutes longer)."""
    itl = _itl_demand(observed, spec, status.learned, itl=itl_estimate(observed))
    return max(wanted.kv, wanted.running, itl)


def _keep(
    recommendations: Sequence[Sample], spec: AutoscalePolicySpec, now: datetime, new: int
) -> tuple[Sample, ...]:
    down = spec.scale_down.stabilization_seconds + _smoothing_seconds(spec)
    longest = max(spec.scale_up.stabilization_seconds, down)
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
        f"kv {wanted.kv:.2f}, running {wanted.running:.2f}, itl {wanted.itl:.2f}, "
        f"latency {wanted.latency:.2f}, rate {wanted.rate:.2f}, "
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


def drain_last(order: Sequence[str], kept: Collection[str]) -> tuple[str, ...]:
    """`order` with the pods of `kept` moved to its end, each group in its order: a canary's
    baseline (radixfleet/controllers/canary/baseline.py) is drained only after every other pod of
    the revision."""
    return (*(p for p in order if p not in kept), *(p for p in order if p in kept))


def cache_value(replica: ReplicaMetrics) -> float:
    """What a replica's prefix cache is worth: cached prompt tokens/s (or its hit rate)."""
    rate = finite(replica.cached_tokens_rate)
    if rate is not None:
        return rate
    return finite(replica.hit_rate) or 0.0


def _drain_order(replica: ReplicaMetrics, cache_aware: bool) -> tuple[float, float, str]:
    value = cache_value(replica) if cache_aware else 0.0
    return (value, finite(replica.running) or 0.0, replica.name)
