"""The autoscaler's demand, in replicas, from each signal (`radixfleet.controllers.autoscale.decide`
step 3): KV usage plus the queue priced at a running request's footprint; running plus queued
requests over the batch a replica should run; the inter-token latency against its aim; TTFT/ITL
p95 over the SLO; the arrival rate over what a replica serves; the rate's rise one cold start
ahead (`forecast`). Pure functions, as the rest of the decision."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from datetime import datetime, timedelta

from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import (
    AutoscaleStatus,
    Demand,
    Learned,
    Observed,
    Sample,
    finite,
)

# Until a replica has been seen running requests, one replica is priced at 16 queued requests:
# a guess that only matters for a model's first wake from zero.
FALLBACK_REQUESTS_PER_REPLICA = 16.0
EPSILON = 1e-9
MIN_ITL_BATCH = 4  # running requests before a replica's inter-token latency counts
ITL_TICKS = 3  # the ITL signal reads the median of this many ticks' estimates


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
        itl=itl_demand(observed, spec, status.learned, itl=_itl_now(status)),
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


def kept_itl_estimates(before: Sequence[float], estimate: float | None) -> tuple[float, ...]:
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


def itl_demand(
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


def _binding(wanted: Demand) -> float:
    """The demand of the measured signals (what the arrival rate is compared with)."""
    return max(wanted.kv, wanted.running, wanted.itl)
