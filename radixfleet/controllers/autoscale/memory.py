"""What the autoscaler remembers and learns between ticks (`radixfleet.controllers.autoscale.decide`
step 2): arrival rates, requests that waited on a cold start, the model's idle gaps and the
break-even they teach, and what one replica carries. Pure functions, as the rest of the
decision."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from radixfleet.controllers.autoscale.demand import EPSILON, itl_estimate, kept_itl_estimates
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import (
    AutoscaleStatus,
    BreakEven,
    ColdStarts,
    Learned,
    Observed,
    ReplicaMetrics,
    Sample,
    finite,
)

LEARNING_RATE = 0.2  # weight of a new sample in what is learned about a replica
MIN_LEARNING_LOAD = 0.5  # replicas' worth of KV in use before a capacity sample counts
MIN_RATE_BATCH = 8  # running requests per ready replica before the fleet teaches a rate
MAX_GAPS = 32  # idle gaps remembered for the break-even


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
            "itl_estimates": kept_itl_estimates(status.itl_estimates, itl_estimate(observed)),
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
