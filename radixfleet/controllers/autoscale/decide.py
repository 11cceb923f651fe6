"""The whole autoscaling policy, as pure functions: `decide(observed, spec, status, now)`.

No I/O, no clock: the controller, the local fleet and the twin call the same function. Steps
(2 in `memory.py`, 3 in `demand.py`, 4 and 5 in `sizing.py`, 6 in `victims.py`; this module
holds 1 and puts them together):

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

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from radixfleet.controllers.autoscale.demand import demand, itl_demand, itl_estimate
from radixfleet.controllers.autoscale.memory import learn_rate, remember
from radixfleet.controllers.autoscale.sizing import (
    bounds,
    clamp,
    hold,
    limit_rate,
    recommend,
    smoothing_seconds,
    stabilize,
    take_back,
)
from radixfleet.controllers.autoscale.spec import AutoscalePolicySpec
from radixfleet.controllers.autoscale.state import (
    AutoscaleStatus,
    ColdStarts,
    Demand,
    LastDecision,
    Learned,
    Observed,
    Sample,
    Verb,
)
from radixfleet.controllers.autoscale.victims import choose_victims


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
        held = hold(observed, spec, reference, now)
        return _record(Verb.HOLD, held, f"paused at {held}", status, now)
    halt = halt_reason(observed)
    if halt is not None:
        held = hold(observed, spec, reference, now)
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
    desired = clamp(limit_rate(stable, reference, spec, status, now), floor, ceiling)
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


def _instant(
    observed: Observed, spec: AutoscalePolicySpec, status: AutoscaleStatus, wanted: Demand
) -> float:
    """The measured demand of this tick alone, which a replica's rate is learned from, as it
    was before the median: the median lags a change by a tick, and the rate learned beside it
    came out lower (at 45 req/s the fifth replica stayed about three minutes longer)."""
    itl = itl_demand(observed, spec, status.learned, itl=itl_estimate(observed))
    return max(wanted.kv, wanted.running, itl)


def _keep(
    recommendations: Sequence[Sample], spec: AutoscalePolicySpec, now: datetime, new: int
) -> tuple[Sample, ...]:
    down = spec.scale_down.stabilization_seconds + smoothing_seconds(spec)
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
