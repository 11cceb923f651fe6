"""The whole failover policy, as pure functions: `decide(observed, spec, status, now)`.

No I/O, no clock: the controller, the local fleet and the twin call the same function, once
per interval. Rules, in the order they apply:

1. Each region's interval is judged good, bad or unknown (`judge`): bad when its serving
   signals break a threshold, its Route 53 health check fails, or most other regions' probes
   cannot reach it. A region whose Prometheus does not answer is judged by the health check and
   the peers alone: bad when either says it is down, unknown otherwise. Unknown intervals
   neither count nor reset.
2. Hysteresis: `unhealthyAfter` bad intervals in a row take a Healthy region out, or only
   `unreachableAfter` when the region cannot be reached from outside (its Prometheus silent and
   most peers or its health check seeing it down: a fact, where rates are noisy);
   `healthyAfter` good ones, and at least `minHoldSeconds` out, start its failback.
3. A region that fails requests loses its traffic at once. One that is only slow (TTFT burn)
   is Evacuating: it keeps its traffic until the survivors' raised floors are ready, or for
   `prescale.maxWaitSeconds`.
4. Pre-scaling: every region whose share of traffic is about to grow gets the floors of the
   policy's models raised to its new share of the fleet's steady-state replicas (times the
   headroom). Floor changes come before the weight change in the action list; floors are
   released once every region is healthy again.
5. Failback: a Recovering region gets `failback.stepPercent` of its weight back every
   `failback.stepSeconds`, each step only on a good interval and with warm replicas for it.
   It starts from the share of its weight it carries, never below: a region the guard kept
   serving (rule 6) does not lose that traffic when its failback starts.
6. Weights never go all to zero. When every weighted region is out, healthy standby regions
   (weight 0) take over, else recovering ones at full weight; with none of those, the weights
   in place stay: the last region standing is never taken out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from radixfleet.controllers.failover.spec import FailoverPolicySpec
from radixfleet.controllers.failover.state import (
    FailoverStatus,
    HealthCheck,
    LastDecision,
    Observed,
    Phase,
    RegionSignals,
    RegionStatus,
    Verdict,
    finite,
)

FULL = 100
SERVING = (Phase.HEALTHY, Phase.EVACUATING, Phase.RECOVERING)


# ---- what decide returns ---------------------------------------------------------------------


@dataclass(frozen=True)
class RaiseFloor:
    """Keep at least `replicas` of `model` in `region` (never lowers a floor)."""

    region: str
    model: str
    replicas: int


@dataclass(frozen=True)
class ReleaseFloor:
    """Give the floor of `model` in `region` back to what it was before it was raised."""

    region: str
    model: str


@dataclass(frozen=True)
class SetWeights:
    """The weighted records' weights, by region name (every region of the policy)."""

    weights: Mapping[str, int]


Action = RaiseFloor | SetWeights | ReleaseFloor


@dataclass(frozen=True)
class Note:
    """Something worth an Event: a region changing phase, a shift, floors raised."""

    reason: str
    message: str
    region: str | None = None
    warning: bool = False


@dataclass(frozen=True)
class Decision:
    """The status to record, the actions in the order to carry them out, and why."""

    status: FailoverStatus
    actions: tuple[Action, ...]
    reason: str
    notes: tuple[Note, ...] = ()

    @property
    def weights(self) -> Mapping[str, int] | None:
        """The weights this decision sets, if it sets any."""
        return next((a.weights for a in self.actions if isinstance(a, SetWeights)), None)


@dataclass(frozen=True)
class Judgement:
    """One interval of one region: the verdict, why, and whether it cannot wait."""

    verdict: Verdict
    reasons: tuple[str, ...] = ()
    urgent: bool = False
    unreachable: bool = False  # no one outside reaches it: needs no streak of noise-proofing

    @property
    def text(self) -> str:
        return "; ".join(self.reasons) or self.verdict.value


# ---- 1. judging an interval ------------------------------------------------------------------


def judge(signals: RegionSignals, spec: FailoverPolicySpec) -> Judgement:
    """The verdict on one region's interval under `spec`."""
    if not signals.reachable:
        return _judge_blind(signals)
    slow = _ttft_burn(signals, spec)
    failing = _failing(signals, spec)
    if failing or slow:
        reasons = (*failing, *([slow] if slow else []))
        return Judgement(Verdict.BAD, reasons, urgent=bool(failing))
    if finite(signals.availability) is None and signals.health_check is not HealthCheck.HEALTHY:
        return Judgement(Verdict.UNKNOWN, ("no serving signal and no healthy health check",))
    return Judgement(Verdict.GOOD, ("within thresholds",))


def _judge_blind(signals: RegionSignals) -> Judgement:
    # The region's own metrics are missing: a signal, not a verdict. Only an outside view that
    # says "down" makes the interval bad; anything else leaves the streaks where they are.
    if signals.health_check is HealthCheck.UNHEALTHY:
        reason = "Prometheus unreachable; health check unhealthy"
        return Judgement(Verdict.BAD, (reason,), urgent=True, unreachable=True)
    if signals.peers_down > signals.peers_up:
        seen = f"{signals.peers_down} of {signals.peers_down + signals.peers_up} peers"
        reason = f"Prometheus unreachable; {seen} see it down"
        return Judgement(Verdict.BAD, (reason,), urgent=True, unreachable=True)
    return Judgement(Verdict.UNKNOWN, ("Prometheus unreachable; no outside view says down",))


def _failing(signals: RegionSignals, spec: FailoverPolicySpec) -> list[str]:
    """The signals that say the region fails requests (or does not answer)."""
    limits, found = spec.signals, []
    availability = finite(signals.availability)
    if availability is not None and availability < limits.min_availability:
        found.append(f"availability {availability:.2f} < {limits.min_availability:.2f}")
    errors = finite(signals.error_rate)
    if _enough_requests(signals, spec) and errors is not None and errors > limits.max_error_rate:
        found.append(f"error rate {errors:.3f} > {limits.max_error_rate:.3f}")
    if limits.use_health_checks and signals.health_check is HealthCheck.UNHEALTHY:
        found.append("Route 53 health check unhealthy")
    # Metrics from inside a region miss a broken way in (ingress, load balancer, network):
    # when most other regions cannot reach its endpoint, neither can its clients.
    if signals.peers_down > signals.peers_up:
        found.append(f"{signals.peers_down} of {signals.peers_down + signals.peers_up} peers "
                     "cannot reach its endpoint")  # fmt: skip
    return found


def _ttft_burn(signals: RegionSignals, spec: FailoverPolicySpec) -> str | None:
    """Why the region is too slow (TTFT SLO burning too fast), or None."""
    bad = finite(signals.ttft_bad_ratio)
    if bad is None or not _enough_requests(signals, spec):
        return None
    burn = bad / (1.0 - spec.signals.ttft_objective)
    if burn <= spec.signals.max_ttft_burn_rate:
        return None
    return f"TTFT SLO burn rate {burn:.1f} > {spec.signals.max_ttft_burn_rate:.1f}"


def _enough_requests(signals: RegionSignals, spec: FailoverPolicySpec) -> bool:
    requests = finite(signals.requests)
    return requests is not None and requests >= spec.signals.min_requests


# ---- 2. one region's phase -------------------------------------------------------------------


def counted(region: RegionStatus, judgement: Judgement, reason: str) -> RegionStatus:
    """The region's streaks after one more interval; unknown intervals change nothing."""
    update: dict[str, object] = {"verdict": judgement.verdict, "reason": reason}
    if judgement.verdict is Verdict.GOOD:
        update |= {"good_intervals": region.good_intervals + 1, "bad_intervals": 0}
    elif judgement.verdict is Verdict.BAD:
        update |= {"bad_intervals": region.bad_intervals + 1, "good_intervals": 0}
    return region.model_copy(update=update)


def transition(
    region: RegionStatus, judgement: Judgement, spec: FailoverPolicySpec, now: datetime
) -> tuple[RegionStatus, Note | None]:
    """The region's phase after its streaks were counted (failback steps come later)."""
    out = region.bad_intervals >= (
        spec.unreachable_after if judgement.unreachable else spec.unhealthy_after
    )
    back = region.good_intervals >= spec.healthy_after
    if region.phase is Phase.HEALTHY and out:
        evacuate = spec.prescale.enabled and not judgement.urgent
        return _take_out(region, now, evacuate=evacuate)
    if region.phase is Phase.EVACUATING and judgement.urgent and out:
        return _take_out(region, now, evacuate=False)
    if region.phase is Phase.EVACUATING and back:
        note = Note("RegionHealthy", f"{region.name} is healthy again before its traffic moved")
        return _enter(region, Phase.HEALTHY, now, FULL), replace(note, region=region.name)
    if region.phase is Phase.UNHEALTHY and back and _held(region, spec, now):
        note = Note("FailbackStarted", f"{region.name}: {region.good_intervals} good intervals")
        return _enter(region, Phase.RECOVERING, now, 0), replace(note, region=region.name)
    if region.phase is Phase.RECOVERING and out:
        return _take_out(region, now, evacuate=False)
    return region, None


def _take_out(region: RegionStatus, now: datetime, *, evacuate: bool) -> tuple[RegionStatus, Note]:
    if evacuate:
        moved = _enter(region, Phase.EVACUATING, now, region.failback_percent)
        message = f"{region.name} is slow ({region.reason}): pre-scaling before moving traffic"
        return moved, Note("RegionEvacuating", message, region.name, warning=True)
    moved = _enter(region, Phase.UNHEALTHY, now, 0)
    message = f"{region.name} is unhealthy ({region.reason}): moving its traffic out"
    return moved, Note("RegionUnhealthy", message, region.name, warning=True)


def _enter(region: RegionStatus, phase: Phase, now: datetime, percent: int) -> RegionStatus:
    return region.model_copy(
        update={"phase": phase, "since": now, "failback_percent": percent, "last_step_at": None}
    )


def _held(region: RegionStatus, spec: FailoverPolicySpec, now: datetime) -> bool:
    """Whether the region has been out for the hold time (no flapping faster than that)."""
    return region.since is None or now - region.since >= timedelta(seconds=spec.min_hold_seconds)


# ---- 3-5. the fleet: pre-scaling, evacuation, failback ---------------------------------------


def fleet_total(regions: Sequence[RegionStatus], model: str) -> int:
    """The fleet's steady-state ready replicas of `model`, summed over regions."""
    return sum(r.steady_replicas.get(model, 0) for r in regions)


def planned_weights(spec: FailoverPolicySpec, regions: Sequence[RegionStatus]) -> dict[str, int]:
    """Where traffic is headed: full weight for healthy and recovering regions, 0 elsewhere."""
    return {
        r.name: spec.region(r.name).weight if r.phase in (Phase.HEALTHY, Phase.RECOVERING) else 0
        for r in regions
    }


def floor_targets(
    spec: FailoverPolicySpec, regions: Sequence[RegionStatus]
) -> dict[tuple[str, str], int]:
    """Floors wanted where traffic grows: new share x steady fleet replicas x headroom."""
    planned = planned_weights(spec, regions)
    normal = {r.name: r.weight for r in spec.regions}
    total, normal_total = sum(planned.values()), sum(normal.values())
    if not spec.prescale.enabled or total == 0:
        return {}
    targets = {}
    for region in regions:
        share = planned[region.name] / total
        grows = share > normal[region.name] / normal_total + 1e-9
        if share == 0 or not (grows or region.phase is Phase.RECOVERING):
            continue
        for model in spec.models:
            want = math.ceil(fleet_total(regions, model) * share * spec.prescale.headroom - 1e-9)
            if want > 0:
                targets[(region.name, model)] = want
    return targets


def warm(signals: RegionSignals, floors: Mapping[str, int], percent: int) -> bool:
    """Whether the region has the ready replicas for `percent` of the floors it was given."""
    ready = signals.ready_replicas
    if not signals.reachable or ready is None:
        return False
    return all(
        ready.get(model, 0) >= max(1, math.ceil(floor * percent / FULL))
        for model, floor in floors.items()
        if floor > 0
    )


def _evacuated(
    region: RegionStatus,
    spec: FailoverPolicySpec,
    regions: Sequence[RegionStatus],
    observed: Observed,
    now: datetime,
) -> tuple[RegionStatus, Note | None]:
    """An Evacuating region loses its traffic once the survivors are warm, or after the wait."""
    survivors = [r for r in regions if r.phase is Phase.HEALTHY]
    ready = all(warm(observed.of(r.name), r.raised_floors, FULL) for r in survivors)
    waited = region.since is not None and now - region.since >= timedelta(
        seconds=spec.prescale.max_wait_seconds
    )
    if not (ready or waited) or not survivors:
        return region, None
    why = "survivors are warm" if ready else f"waited {spec.prescale.max_wait_seconds} s"
    moved = _enter(region, Phase.UNHEALTHY, now, 0)
    note = Note("RegionUnhealthy", f"{region.name}: moving its traffic out ({why})", region.name)
    return moved, replace(note, warning=True)


def carried(region: RegionStatus, spec: FailoverPolicySpec, weight: int) -> RegionStatus:
    """A Recovering region's progress, raised to the `weight` it carries: failback never lowers it.

    The guard leaves traffic on regions that are out when every region is out, and gives it to
    recovering ones at full weight. Counting such a region's failback from 0% would take that
    traffic away, to give it back a step later: sooner than the hold time, and a flap.
    """
    if region.phase is not Phase.RECOVERING:
        return region
    configured = spec.region(region.name).weight
    least = next((p for p in range(FULL + 1) if _scaled(configured, p) >= weight), FULL)
    if least <= region.failback_percent:
        return region
    return region.model_copy(update={"failback_percent": least})


def _failback_step(
    region: RegionStatus,
    floors: Mapping[str, int],
    spec: FailoverPolicySpec,
    observed: Observed,
    now: datetime,
) -> tuple[RegionStatus, Note | None]:
    """One more step of weight for a Recovering region, when it is good, due and warm."""
    due = region.last_step_at is None or now - region.last_step_at >= timedelta(
        seconds=spec.failback.step_seconds
    )
    target = min(FULL, region.failback_percent + spec.failback.step_percent)
    if region.verdict is not Verdict.GOOD or not due:
        return region, None
    if not warm(observed.of(region.name), floors, target):
        return region.model_copy(update={"reason": "failback waits for warm replicas"}), None
    if target >= FULL:
        back = _enter(region, Phase.HEALTHY, now, FULL)
        return back, Note("FailbackComplete", f"{region.name} is back at full weight", region.name)
    stepped = region.model_copy(update={"failback_percent": target, "last_step_at": now})
    message = f"{region.name} back to {target}% of its weight"
    return stepped, Note("FailbackStep", message, region.name)


# ---- 6. weights ------------------------------------------------------------------------------


def region_weight(spec: FailoverPolicySpec, region: RegionStatus) -> int:
    """A region's weight from its phase and failback progress (at least 1 while it has any)."""
    if region.phase is Phase.UNHEALTHY:
        return 0
    return _scaled(spec.region(region.name).weight, region.failback_percent)


def _scaled(configured: int, percent: int) -> int:
    """`percent` of a configured weight, at least 1 unless either is 0."""
    if configured == 0 or percent == 0:
        return 0
    return max(1, round(configured * percent / FULL))


def weights(
    spec: FailoverPolicySpec, regions: Sequence[RegionStatus], current: Mapping[str, int] | None
) -> tuple[dict[str, int], str | None]:
    """The weights to set, and why they are not the plain ones when the guard stepped in."""
    plain = {r.name: region_weight(spec, r) for r in regions}
    if sum(plain.values()) > 0:
        return plain, None
    healthy = {r.name for r in regions if r.phase is Phase.HEALTHY}
    if healthy:
        return {n: int(n in healthy) for n in plain}, "only standby regions are healthy"
    # Recovering regions are judged healthy and only warming up: better than dead ones.
    recovering = {r.name for r in regions if r.phase is Phase.RECOVERING}
    if recovering:
        configured = {n: max(1, spec.region(n).weight) * (n in recovering) for n in plain}
        return configured, "no region is healthy: recovering regions take the traffic"
    kept = {n: (current or {}).get(n, 0) for n in plain}
    if sum(kept.values()) > 0:
        return kept, "no region is healthy: keeping the weights in place"
    configured = {r.name: r.weight for r in spec.regions}
    return configured, "no region is healthy and no weight is set: every region as configured"


# ---- decide ----------------------------------------------------------------------------------


def initial_status(spec: FailoverPolicySpec, now: datetime) -> FailoverStatus:
    """Every region healthy at full weight, as `infra/` creates the records."""
    regions = tuple(RegionStatus(name=n, since=now) for n in spec.region_names)
    return FailoverStatus(regions=regions)


def interval_due(spec: FailoverPolicySpec, status: FailoverStatus | None, now: datetime) -> bool:
    """Whether a new interval has begun; timers drift, so 90% of the interval counts."""
    if status is None or status.observed_at is None:
        return True
    return now - status.observed_at >= timedelta(seconds=spec.interval_seconds * 0.9)


def decide(
    observed: Observed, spec: FailoverPolicySpec, status: FailoverStatus | None, now: datetime
) -> Decision:
    """One interval of the policy: judge, move phases, pre-scale, and set weights."""
    status = _aligned(spec, status or initial_status(spec, now))
    judged = {r.name: judge(observed.of(r.name), spec) for r in status.regions}
    if spec.paused:
        return _paused(status, judged, now)
    return _Interval(observed, spec, now).run(status, judged)


def _aligned(spec: FailoverPolicySpec, status: FailoverStatus) -> FailoverStatus:
    # Regions added to or removed from the spec since the status was written.
    return status.model_copy(update={"regions": tuple(status.region(n) for n in spec.region_names)})


def _paused(status: FailoverStatus, judged: Mapping[str, Judgement], now: datetime) -> Decision:
    regions = tuple(
        r.model_copy(update={"verdict": judged[r.name].verdict, "reason": judged[r.name].text})
        for r in status.regions
    )
    reason = "paused: judging only, no weight or floor changes"
    recorded = status.model_copy(
        update={"regions": regions, "observed_at": now,
                "last_decision": LastDecision(reason=reason, at=now)}
    )  # fmt: skip
    return Decision(recorded, (), reason)


@dataclass
class _Interval:
    """The steps of one decision; a class only to keep the arguments in one place."""

    observed: Observed
    spec: FailoverPolicySpec
    now: datetime
    notes: list[Note] = field(default_factory=list)

    def run(self, status: FailoverStatus, judged: Mapping[str, Judgement]) -> Decision:
        regions = [self._phase(r, judged[r.name], status.weights) for r in status.regions]
        regions = self._steady(regions)
        raises, regions = self._prescale(regions)
        regions = [self._progress(r, regions) for r in regions]
        return self._finish(status, regions, raises)

    def _phase(
        self, region: RegionStatus, judgement: Judgement, before: Mapping[str, int]
    ) -> RegionStatus:
        region = counted(region, judgement, judgement.text)
        region, note = transition(region, judgement, self.spec, self.now)
        self._note(note)
        # The weights this policy set last: records moved by hand do not speed a failback up.
        return carried(region, self.spec, before.get(region.name, 0))

    def _steady(self, regions: list[RegionStatus]) -> list[RegionStatus]:
        # The fleet's normal size is learnt only while every region is healthy (or on first
        # sight): during a failover the survivors grow and the failed region shrinks, and
        # neither is the load the fleet was sized for.
        # After a failback the survivors keep their extra replicas until the autoscaler
        # scales them down, so learning waits for a hold time of everyone healthy.
        hold = timedelta(seconds=self.spec.min_hold_seconds)
        settled = all(
            r.phase is Phase.HEALTHY and (r.since is None or self.now - r.since >= hold)
            for r in regions
        )
        return [self._learn(r, learn=settled or not r.steady_replicas) for r in regions]

    def _learn(self, region: RegionStatus, *, learn: bool) -> RegionStatus:
        ready = self.observed.of(region.name).ready_replicas
        if not learn or ready is None or not self.observed.of(region.name).reachable:
            return region
        steady = {m: int(ready.get(m, 0)) for m in self.spec.models}
        return region.model_copy(update={"steady_replicas": steady})

    def _prescale(self, regions: list[RegionStatus]) -> tuple[list[RaiseFloor], list[RegionStatus]]:
        raises = []
        targets = floor_targets(self.spec, regions)
        updated = []
        for region in regions:
            floors = dict(region.raised_floors)
            for model in self.spec.models:
                want = targets.get((region.name, model), 0)
                if want > floors.get(model, 0):
                    raises.append(RaiseFloor(region.name, model, want))
                    floors[model] = want
            updated.append(region.model_copy(update={"raised_floors": floors}))
        if raises:
            what = ", ".join(f"{a.model}>={a.replicas} in {a.region}" for a in raises)
            self._note(Note("PreScaled", f"raising floors before traffic moves: {what}"))
        return raises, updated

    def _progress(self, region: RegionStatus, regions: list[RegionStatus]) -> RegionStatus:
        note = None
        if region.phase is Phase.EVACUATING:
            region, note = _evacuated(region, self.spec, regions, self.observed, self.now)
        elif region.phase is Phase.RECOVERING:
            floors = region.raised_floors or self._one_each(regions)
            region, note = _failback_step(region, floors, self.spec, self.observed, self.now)
        self._note(note)
        return region

    def _one_each(self, regions: list[RegionStatus]) -> dict[str, int]:
        # Without pre-scaling, a failback step still needs one ready replica of every model
        # the fleet runs at all (a model scaled to zero everywhere needs none).
        return {m: 1 for m in self.spec.models if fleet_total(regions, m) > 0}

    def _finish(
        self, status: FailoverStatus, regions: list[RegionStatus], raises: list[RaiseFloor]
    ) -> Decision:
        current = self.observed.weights
        target, guard = weights(self.spec, regions, current or status.weights)
        if guard:
            self._note(Note("FailoverGuard", guard, warning=True))
        regions = [self._restart_hold(r, target, current or status.weights) for r in regions]
        releases, regions = self._release(regions)
        shift = current is None or dict(current) != target
        actions: list[Action] = [*raises, *([SetWeights(target)] if shift else []), *releases]
        reason = self._reason(target, shift, guard)
        if shift:
            self._note(Note("WeightsSet", reason))
        recorded = FailoverStatus(
            regions=tuple(regions), weights=target, observed_at=self.now,
            healthy_regions=sum(r.phase is Phase.HEALTHY for r in regions),
            last_decision=LastDecision(reason=reason, at=self.now, shifted=shift),
        )  # fmt: skip
        return Decision(recorded, tuple(actions), reason, tuple(self.notes))

    def _restart_hold(
        self, region: RegionStatus, target: Mapping[str, int], before: Mapping[str, int]
    ) -> RegionStatus:
        # The hold counts from when the traffic actually left: a region the guard kept in
        # (every region was out) starts its hold when another region takes over.
        left_now = target.get(region.name, 0) == 0 and before.get(region.name, 0) > 0
        if region.phase is Phase.UNHEALTHY and left_now and region.since != self.now:
            return region.model_copy(update={"since": self.now})
        return region

    def _release(
        self, regions: list[RegionStatus]
    ) -> tuple[list[ReleaseFloor], list[RegionStatus]]:
        # Raised floors go back only once every region is healthy: the fleet is whole again.
        if not all(r.phase is Phase.HEALTHY for r in regions):
            return [], regions
        releases = [ReleaseFloor(r.name, m) for r in regions for m in sorted(r.raised_floors)]
        return releases, [r.model_copy(update={"raised_floors": {}}) for r in regions]

    def _reason(self, target: Mapping[str, int], shift: bool, guard: str | None) -> str:
        weights_text = ", ".join(f"{n}={w}" for n, w in target.items())
        told = ("WeightsSet", "FailoverGuard")
        changes = "; ".join(n.message for n in self.notes if n.reason not in told)
        head = f"weights {weights_text}" if shift else f"holding weights {weights_text}"
        return "; ".join(part for part in (head, guard, changes) if part)

    def _note(self, note: Note | None) -> None:
        if note is not None:
            self.notes.append(note)
