"""The whole canary policy, as pure functions: `decide(observed, spec, status, now)`.

No I/O, no clock: the controller, the local fleet and the twin call the same function. Rules,
in the order they apply:

1. A new predictor revision starts a rollout at 0%; a final rollout only repairs traffic.
2. The platform team's abort and promote win over everything else.
3. A canary revision not ready holds, and is rolled back once the progress deadline passes.
4. Paused holds. A passed manual gate advances at once.
5. Every `intervalSeconds` the canary is judged against the stable revision, or, when one runs,
   against a baseline (the stable model sent the canary's share of traffic): latency and cache
   hit rate against the baseline, errors against the stable revision and the baseline pooled
   (radixfleet.revisions.Measured). Metrics that are
   missing, empty, NaN, or from too few requests halt: they are neither a pass nor a failure,
   never roll back and never promote (Flagger's "halt, don't fail").
6. A canary beyond a relative bound fails that check only when the difference is significant,
   one-sided, below the policy's `significance` (radixfleet/significance.py): for latency,
   Mann-Whitney U of the window's histograms against the stable revision's times
   `relativeToStable` (the bound is the minimum effect, and the null hypothesis); for errors,
   Fisher's exact test of the error counts. Beyond the bound but not significant
   halts for more data: the next interval's window is judged afresh. An absolute `limit`, the
   cache hit rate, and numbers that come without their distribution are judged as they are.
7. All checks passed: advance to the next step, or promote after the last one below 100.
   A failed analysis counts; `threshold` failed analyses in a rollout roll it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from radixfleet.controllers.canary.spec import FULL_TRAFFIC, CanaryPolicySpec, Metric, MetricCheck
from radixfleet.controllers.canary.state import (
    CheckResult,
    LastDecision,
    Measured,
    Observed,
    Phase,
    RevisionMetrics,
    RolloutStatus,
    Verb,
    finite,
)
from radixfleet.significance import fisher_greater, mann_whitney_greater


@dataclass(frozen=True)
class Decision:
    """What to do now, why, and the status to record.

    `canary_percent` is the canaryTrafficPercent to set (None: leave it); `remove_percent`
    drops the field, which is how KServe promotes. `status` is None only when there is no
    rollout at all.
    """

    verb: Verb
    reason: str
    status: RolloutStatus | None
    canary_percent: int | None = None
    remove_percent: bool = False

    @property
    def moves_traffic(self) -> bool:
        return self.canary_percent is not None or self.remove_percent

    @property
    def warning(self) -> bool:
        return self.verb in (Verb.HALT, Verb.ROLLBACK)


def decide(
    observed: Observed, spec: CanaryPolicySpec, status: RolloutStatus | None, now: datetime
) -> Decision:
    """The next step of one InferenceService's rollout under `spec`."""
    if observed.canary_revision is None:
        return Decision(Verb.HOLD, "no new revision to roll out", status)
    if status is None or status.canary_revision != observed.canary_revision:
        status = start(observed, now=now)
    if status.phase.final:
        return _keep_final(observed, status, now)
    return _active(observed, spec, status, now)


def start(observed: Observed, *, now: datetime) -> RolloutStatus:
    """A fresh rollout of the observed canary revision, at 0% until it is ready."""
    assert observed.canary_revision is not None
    return RolloutStatus(
        inference_service=observed.inference_service,
        canary_revision=observed.canary_revision,
        stable_revision=observed.stable_revision,
        phase=Phase.WAITING,
        weight=0,
        started_at=now,
        last_progress_at=now,
    )


def analysis_due(spec: CanaryPolicySpec, status: RolloutStatus | None, now: datetime) -> bool:
    """Whether an analysis would run now; the controller queries Prometheus only then."""
    if status is None or status.phase.final or status.weight == 0:
        return False
    since = status.last_analysis_at or status.last_progress_at
    return now - since >= timedelta(seconds=spec.interval_seconds)


def _keep_final(observed: Observed, status: RolloutStatus, now: datetime) -> Decision:
    # Re-issue the final traffic change: a controller may have stopped between recording the
    # decision and patching the InferenceService (status is written first).
    if status.phase is Phase.ROLLED_BACK and observed.weight != 0:
        reason = f"keeping {status.canary_revision} pinned at 0% after its rollback"
        return _decide(Verb.ROLLBACK, reason, status, now, canary_percent=0)
    if status.phase is Phase.PROMOTED and observed.weight is not None:
        reason = f"re-issuing the promotion of {status.canary_revision}"
        return _decide(Verb.PROMOTE, reason, status, now, remove_percent=True)
    return Decision(Verb.HOLD, f"rollout of {status.canary_revision} is {status.phase}", status)


def _active(
    observed: Observed, spec: CanaryPolicySpec, status: RolloutStatus, now: datetime
) -> Decision:
    manual = observed.manual
    if manual.abort:
        return _rollback(status, now, f"aborted by the platform team at {status.weight}%")
    if manual.promote:
        return _promote(status, now, f"promoted by the platform team at {status.weight}%")
    if not observed.canary_ready:
        return _not_ready(observed, spec, status, now)
    if spec.paused or manual.paused:
        return _hold(observed, status, now, Phase.PAUSED, f"paused at {status.weight}%")
    if status.weight == 0 or _gate_passed(observed, spec, status):
        return _step(observed, spec, status, now)
    if not analysis_due(spec, status, now):
        return _hold(observed, status, now, status.phase, _next_analysis(spec, status, now))
    return _analyse(observed, spec, status, now)


def _not_ready(
    observed: Observed, spec: CanaryPolicySpec, status: RolloutStatus, now: datetime
) -> Decision:
    waited = now - status.last_progress_at
    if waited > timedelta(seconds=spec.progress_deadline_seconds):
        reason = f"{status.canary_revision} not ready within {spec.progress_deadline_seconds} s"
        return _rollback(status, now, reason)
    reason = f"waiting for {status.canary_revision} to become ready ({_secs(waited)} s)"
    return _hold(observed, status, now, Phase.WAITING, reason)


def _gate_passed(observed: Observed, spec: CanaryPolicySpec, status: RolloutStatus) -> bool:
    approved = observed.manual.approved_weight or 0
    waiting = status.phase is Phase.AWAITING_APPROVAL and status.passed_last_analysis
    return waiting and approved >= spec.next_step(status.weight)


def _step(
    observed: Observed, spec: CanaryPolicySpec, status: RolloutStatus, now: datetime
) -> Decision:
    """Move to the next step, unless a manual gate holds it; the step after the last promotes."""
    target = spec.next_step(status.weight)
    if target in spec.manual_gates and (observed.manual.approved_weight or 0) < target:
        reason = f"waiting for approval to go from {status.weight}% to {target}%"
        return _hold(observed, status, now, Phase.AWAITING_APPROVAL, reason)
    if target >= FULL_TRAFFIC:
        return _promote(status, now, f"every check passed at {status.weight}%")
    moved = status.model_copy(
        update={"phase": Phase.PROGRESSING, "weight": target, "last_progress_at": now}
    )
    reason = f"advancing from {status.weight}% to {target}%"
    return _decide(Verb.ADVANCE, reason, moved, now, canary_percent=target)


def _analyse(
    observed: Observed, spec: CanaryPolicySpec, status: RolloutStatus, now: datetime
) -> Decision:
    measured = observed.measured
    halt = observed.metrics_error or halt_reason(spec, measured)
    if halt is not None:
        return _halt(spec, status, now, halt, measured)
    assert measured is not None
    results = tuple(evaluate(check, measured, spec.significance) for check in spec.checks)
    failed = [r for r in results if not r.passed and not r.inconclusive]
    unsure = [r for r in results if r.inconclusive]
    judged = status.model_copy(
        update={"measured": measured, "checks": results, "last_analysis_at": now}
    )
    if unsure and not failed:
        # The interval is spent: the next analysis judges a fresh window, never the same
        # requests again (retrying each tick on overlapping windows would test until noise
        # passes for significance).
        return _halt(spec, judged, now, _inconclusive(unsure, spec, measured), measured)
    if not failed:
        return _step(observed, spec, judged, now)
    return _failed(spec, judged, now, failed, measured)


def _inconclusive(
    results: Sequence[CheckResult], spec: CanaryPolicySpec, measured: Measured
) -> str:
    what = "; ".join(
        f"{_describe(r, measured)} but p={r.p_value:.2g} >= {spec.significance:g}" for r in results
    )
    return f"inconclusive, waiting for more data: {what}"


def halt_reason(spec: CanaryPolicySpec, measured: Measured | None) -> str | None:
    """Why `measured` cannot be judged under `spec`, or None when every check can be."""
    if measured is None:
        return "metrics were not measured"
    needs_stable = any(check.needs_stable for check in spec.checks)
    sides = [("canary", measured.canary)] + [(measured.against, measured.reference)] * needs_stable
    for side, metrics in sides:
        requests = finite(metrics.requests)
        if requests is None:
            return f"too few requests: no request count for the {side} revision"
        if requests < spec.min_requests:
            return f"too few requests: {side} served {requests:.0f} of {spec.min_requests} needed"
    for check in spec.checks:
        for side, metrics in sides[: 1 + check.needs_stable]:
            if metrics.value(check.metric) is None:
                return f"no data for {check.metric} of the {side} revision (missing or NaN)"
    return None


def evaluate(check: MetricCheck, measured: Measured, significance: float) -> CheckResult:
    """One check of a window `halt_reason` accepted; the bound is the tightest limit. Beyond
    only its relative bound, the canary fails when the difference is significant, and is
    inconclusive when it is not."""
    canary = measured.canary.value(check.metric)
    stable = measured.reference_for(check.metric).value(check.metric)
    assert canary is not None and (stable is not None or not check.needs_stable)
    bounds = _bounds(check, stable)
    bound = max(bounds) if check.metric.higher_is_better else min(bounds)
    result = CheckResult(
        metric=check.metric,
        passed=_within(check.metric, canary, bound),
        canary=canary,
        stable=stable,
        bound=bound,
    )
    within_limit = check.limit is None or _within(check.metric, canary, check.limit)
    if result.passed or not within_limit or not check.needs_stable:
        return result
    p_value = _p_value(check, measured)
    if p_value is None:  # numbers without their distribution: judged as they are
        return result
    return result.model_copy(update={"p_value": p_value, "inconclusive": p_value >= significance})


def _within(metric: Metric, value: float, bound: float) -> bool:
    return value >= bound if metric.higher_is_better else value <= bound


def _p_value(check: MetricCheck, measured: Measured) -> float | None:
    """How likely a canary no worse than the check allows is to look this much worse: for
    latency, no slower than `relativeToStable` times the stable revision (the minimum effect);
    for errors, no more often than the stable revision."""
    metric, canary, stable = check.metric, measured.canary, measured.reference_for(check.metric)
    if metric is Metric.ERROR_RATE:
        canary_counts, stable_counts = _errors_and_total(canary), _errors_and_total(stable)
        if canary_counts is None or stable_counts is None:
            return None
        return fisher_greater(*canary_counts, *stable_counts)
    canary_hist, stable_hist = canary.histogram(metric), stable.histogram(metric)
    if canary_hist is None or stable_hist is None:
        return None
    scale = check.relative_to_stable or 1.0
    return mann_whitney_greater(canary_hist, stable_hist, scale=scale)


def _errors_and_total(metrics: RevisionMetrics) -> tuple[int, int] | None:
    requests, rate = finite(metrics.requests), finite(metrics.error_rate)
    if requests is None or rate is None:
        return None
    total = round(requests)
    return round(rate * total), total


def _bounds(check: MetricCheck, stable: float | None) -> list[float]:
    sign = -1.0 if check.metric.higher_is_better else 1.0
    bounds = [] if check.limit is None else [check.limit]
    if check.relative_to_stable is not None and stable is not None:
        bounds.append(stable * check.relative_to_stable + sign * check.slack)
    return bounds


def _failed(
    spec: CanaryPolicySpec,
    status: RolloutStatus,
    now: datetime,
    failed: Sequence[CheckResult],
    measured: Measured,
) -> Decision:
    count = status.failed_checks + 1
    what = "; ".join(_describe(r, measured) for r in failed)
    counted = status.model_copy(update={"failed_checks": count, "phase": Phase.PROGRESSING})
    if count >= spec.threshold:
        return _rollback(counted, now, f"failed {count} of {spec.threshold}: {what}")
    reason = f"failed analysis {count} of {spec.threshold} at {status.weight}%: {what}"
    return _decide(Verb.HOLD, reason, counted, now)


def _describe(result: CheckResult, measured: Measured) -> str:
    """One check's numbers, naming what the canary was compared with."""
    op = "<" if result.metric.higher_is_better else ">"
    against = measured.against_for(result.metric)
    stable = "" if result.stable is None else f", {against} {result.stable:.4g}"
    return f"{result.metric} {result.canary:.4g} {op} bound {result.bound:.4g}{stable}"


def _halt(
    spec: CanaryPolicySpec,
    status: RolloutStatus,
    now: datetime,
    reason: str,
    measured: Measured | None,
) -> Decision:
    # last_analysis_at stays: the analysis is retried on every tick until it can be judged.
    stalled = now - status.last_progress_at
    if stalled > timedelta(seconds=spec.progress_deadline_seconds):
        reason += f"; no progress for {_secs(stalled)} s (deadline passed, not rolling back)"
    halted = status.model_copy(
        update={"phase": Phase.HALTED, "measured": measured or status.measured}
    )
    return _decide(Verb.HALT, f"halted at {status.weight}%: {reason}", halted, now)


def _hold(
    observed: Observed, status: RolloutStatus, now: datetime, phase: Phase, reason: str
) -> Decision:
    # Re-assert the recorded weight: status is written before traffic is patched, so a
    # difference means a patch was lost (or someone moved traffic by hand mid-rollout).
    repair = status.weight if observed.weight != status.weight else None
    held = status.model_copy(update={"phase": phase})
    return _decide(Verb.HOLD, reason, held, now, canary_percent=repair)


def _promote(status: RolloutStatus, now: datetime, reason: str) -> Decision:
    done = status.model_copy(
        update={"phase": Phase.PROMOTED, "weight": FULL_TRAFFIC, "last_progress_at": now}
    )
    reason = f"promoting {status.canary_revision}: {reason}"
    return _decide(Verb.PROMOTE, reason, done, now, remove_percent=True)


def _rollback(status: RolloutStatus, now: datetime, reason: str) -> Decision:
    done = status.model_copy(update={"phase": Phase.ROLLED_BACK, "weight": 0})
    reason = f"rolling back {status.canary_revision}: {reason}"
    return _decide(Verb.ROLLBACK, reason, done, now, canary_percent=0)


def _decide(
    verb: Verb,
    reason: str,
    status: RolloutStatus,
    now: datetime,
    *,
    canary_percent: int | None = None,
    remove_percent: bool = False,
) -> Decision:
    recorded = status.model_copy(
        update={"last_decision": LastDecision(action=verb, reason=reason, at=now)}
    )
    return Decision(verb, reason, recorded, canary_percent, remove_percent)


def _next_analysis(spec: CanaryPolicySpec, status: RolloutStatus, now: datetime) -> str:
    since = status.last_analysis_at or status.last_progress_at
    left = timedelta(seconds=spec.interval_seconds) - (now - since)
    return f"at {status.weight}%, next analysis in {_secs(left)} s"


def _secs(delta: timedelta) -> int:
    return round(delta.total_seconds())
