"""From demand to a replica count (`radixfleet.controllers.autoscale.decide` steps 4 and 5):
the tolerance, the HPA's stabilisation windows, taking back replicas not ready yet, the rate
limits, and the bounds (the spec's, the warm floor, the idle window before zero). Pure
functions, as the rest of the decision."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from datetime import datetime, timedelta

from radixfleet.controllers.autoscale.demand import EPSILON
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import (
    AutoscaleStatus,
    Observed,
    Sample,
)

SURGE = 1.5  # a recommendation this many times the count skips the scale-up window
MIN_GAPS = 5  # gaps before the break-even replaces the spec's idle window


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
    span = timedelta(seconds=smoothing_seconds(spec))
    return [
        float(math.ceil(statistics.fmean(_span(recommendations, sample.at, span)) - EPSILON))
        for sample in recommendations
        if sample.at >= now - timedelta(seconds=spec.scale_down.stabilization_seconds)
    ]


def smoothing_seconds(spec: AutoscalePolicySpec) -> int:
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
    return clamp(desired, lowest, highest)


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


def hold(observed: Observed, spec: AutoscalePolicySpec, reference: int, now: datetime) -> int:
    # Held where it is, inside the bounds the user set; a request in sight still keeps one.
    floor, ceiling = _spec_bounds(observed, spec, now)
    if observed.busy():
        floor = max(floor, 1)
    return clamp(reference, floor, ceiling)


def clamp(value: int, lowest: int, highest: int) -> int:
    return min(max(value, lowest), highest)
