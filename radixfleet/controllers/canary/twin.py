"""The canary in the fleet twin: radixfleet's (the controller's own `decide`) and a no-analysis one.

Both are twin plug-ins of the canary's `ControllerPlugin` (radixfleet/controllers/canary/plugin.py):
a scenario's `canary: radixfleet` or `canary: no_analysis` resolves here through the controller
registry, so the twin never imports the canary.

:class:`RadixfleetCanary` calls `radixfleet.controllers.canary.decide.decide` exactly as the
controller does, with the twin's per-revision numbers in place of Prometheus and virtual time turned
into datetimes; it keeps the rollout status between ticks as the CanaryPolicy's status would.
:class:`NoAnalysis` is the baseline: KServe's `canaryTrafficPercent` stepped on the same schedule
(Flagger's 60 s interval) with nothing judged, so every canary is promoted.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from radixfleet.controllers.canary.decide import analysis_due, decide
from radixfleet.controllers.canary.spec import FULL_TRAFFIC, CanaryPolicySpec
from radixfleet.controllers.canary.state import Measured, Observed, RolloutStatus, Verb
from radixfleet.twin.interfaces import CanaryObservation, CanaryStep
from radixfleet.twin.registry import PolicyContext

#: Virtual second 0 as a datetime, for the controller's decision function.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
#: How often the controller looks at a rollout (its kopf timer).
TICK_S = 10.0


def at(seconds: float) -> datetime:
    """Virtual seconds as the datetime the canary's `decide` expects."""
    return EPOCH + timedelta(seconds=seconds)


class RadixfleetCanary:
    """radixfleet's canary controller: metric-gated steps with halt-don't-fail.

    `significance=False` hides the latency histograms from the judge, so it decides on the p95s
    alone, as it did before it tested significance: the baseline of benchmarks/canary_bench.py.
    A spec with `baseline: true` asks the twin for a baseline beside the canary (the stable
    model on replicas of its own, sent the canary's share of the traffic), which the judge then
    compares with, as the controller's `Baselines` port does on the local fleet.
    """

    def __init__(
        self,
        spec: CanaryPolicySpec | None = None,
        *,
        tick_s: float = TICK_S,
        significance: bool = True,
    ) -> None:
        self.spec = spec or CanaryPolicySpec()
        self.tick_s = tick_s
        self.window_s = float(self.spec.interval_seconds)
        self.status: RolloutStatus | None = None
        self.significance = significance

    @property
    def baseline(self) -> bool:
        """Whether the twin runs a baseline beside the canary (the policy's `baseline`)."""
        return self.spec.baseline

    def step(self, observed: CanaryObservation, now: float) -> CanaryStep:
        """One controller pass over the rollout."""
        when = at(now)
        due = analysis_due(self.spec, self.status, when)
        measured = observed.measured if due else None
        if measured is not None and not self.significance:
            measured = _without_histograms(measured)
        snapshot = Observed(
            inference_service=observed.service,
            canary_revision="canary",
            stable_revision="stable",
            canary_ready=observed.canary_ready,
            weight=observed.weight,
            measured=measured,
        )
        decision = decide(snapshot, self.spec, self.status, when)
        self.status = decision.status
        if decision.remove_percent:
            return CanaryStep(promote=True, reason=decision.reason)
        if decision.verb is Verb.ROLLBACK:
            return CanaryStep(rollback=True, reason=decision.reason)
        return CanaryStep(weight=decision.canary_percent, reason=decision.reason)


def _without_histograms(measured: Measured) -> Measured:
    hidden = {"ttft_buckets": None, "itl_buckets": None}
    baseline = measured.baseline
    return Measured(
        canary=measured.canary.model_copy(update=hidden),
        stable=measured.stable.model_copy(update=hidden),
        baseline=None if baseline is None else baseline.model_copy(update=hidden),
    )


class NoAnalysis:
    """Steps through the same weights every interval once the canary is ready; never judges."""

    baseline = False

    def __init__(self, spec: CanaryPolicySpec | None = None, *, tick_s: float = TICK_S) -> None:
        self.spec = spec or CanaryPolicySpec()
        self.tick_s = tick_s
        self.window_s = float(self.spec.interval_seconds)
        self._last_move: float | None = None

    def step(self, observed: CanaryObservation, now: float) -> CanaryStep:
        """The next weight when the interval has passed; promote after the last one."""
        if not observed.canary_ready:
            return CanaryStep(reason="waiting for the canary to become ready")
        due = self._last_move is None or now - self._last_move >= self.spec.interval_seconds
        if observed.weight > 0 and not due:
            return CanaryStep(reason=f"holding at {observed.weight}%")
        self._last_move = now
        target = self.spec.next_step(observed.weight)
        if target >= FULL_TRAFFIC:
            return CanaryStep(promote=True, reason=f"promoting after {observed.weight}%")
        return CanaryStep(weight=target, reason=f"advancing to {target}% without analysis")


def radixfleet(ctx: PolicyContext) -> RadixfleetCanary:
    """Twin factory: the canary controller's decisions with the CanaryPolicy's defaults."""
    return RadixfleetCanary()


def radixfleet_baseline(ctx: PolicyContext) -> RadixfleetCanary:
    """Twin factory: the canary controller's decisions against a baseline of the canary's share."""
    return RadixfleetCanary(CanaryPolicySpec(baseline=True))


def radixfleet_p95_only(ctx: PolicyContext) -> RadixfleetCanary:
    """Twin factory: the same controller judging p95s without significance tests (baseline)."""
    return RadixfleetCanary(significance=False)


def no_analysis(ctx: PolicyContext) -> NoAnalysis:
    """Twin factory: the same steps, never judged (the baseline)."""
    return NoAnalysis()
