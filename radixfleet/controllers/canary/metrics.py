"""The canary controller's Prometheus series, under the names of `radixfleet.metrics_names`.

The dashboards read them with their own label values (`check="ttft_p95"`, `decision="halt"`),
so the mapping from the canary's `Metric` and `Verb` to those values lives here, once. Gauges
show the rollout as recorded in the policy's status (weight, the last analysis); the counter
counts decisions of rollouts in progress, so a finished rollout's idle ticks add nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from radixfleet import metrics_names as names
from radixfleet.controllers.canary.decide import Decision
from radixfleet.controllers.canary.spec import Metric
from radixfleet.controllers.canary.state import RolloutStatus, Verb

# The dashboards' names for the canary's checks and decisions.
CHECK_LABELS: Mapping[Metric, str] = {
    Metric.TTFT_P95: "ttft_p95",
    Metric.ITL_P95: "itl_p95",
    Metric.ERROR_RATE: "error_ratio",
    Metric.CACHE_HIT_RATE: "prefix_hit_ratio",
}
DECISION_LABELS: Mapping[Verb, str] = {
    Verb.ADVANCE: "advance",
    Verb.HOLD: "hold",
    Verb.HALT: "halt",
    Verb.PROMOTE: "promote",
    Verb.ROLLBACK: "rollback",
}
# The `revision` label of radixfleet_canary_check_value: the canary, and what it was compared
# with (Measured.against_for: the stable revision, a baseline, or both pooled for errors).
CANARY = "canary"
REFERENCE_LABELS: Mapping[str, str] = {
    "stable": "stable",
    "baseline": "baseline",
    "stable and baseline": "stable+baseline",
}


def _gauge(metric: names.Metric, registry: CollectorRegistry) -> Gauge:
    return Gauge(metric.name, metric.help, list(metric.labels), registry=registry)


class CanaryMetrics:
    """radixfleet_canary_{weight,check_value,check_failed,decisions_total}."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.weight = _gauge(names.CANARY_WEIGHT, self.registry)
        self.check_value = _gauge(names.CANARY_CHECK_VALUE, self.registry)
        self.check_failed = _gauge(names.CANARY_CHECK_FAILED, self.registry)
        decisions = names.CANARY_DECISIONS
        self.decisions = Counter(
            # prometheus_client appends `_total` to a counter's name itself.
            decisions.name.removesuffix("_total"),
            decisions.help,
            list(decisions.labels),
            registry=self.registry,
        )

    def record(self, *, namespace: str, isvc: str, decision: Decision) -> None:
        """One decision carried out for one InferenceService."""
        status = decision.status
        if status is None:
            return  # no rollout at all: nothing to show
        if not (status.phase.final and decision.verb is Verb.HOLD):
            self.decisions.labels(namespace, isvc, DECISION_LABELS[decision.verb]).inc()
        self.weight.labels(namespace, isvc).set(status.weight)
        self._checks(namespace, isvc, status)

    def _checks(self, namespace: str, isvc: str, status: RolloutStatus) -> None:
        for result in status.checks:
            check = CHECK_LABELS[result.metric]
            self.check_value.labels(namespace, isvc, check, CANARY).set(result.canary)
            against = (
                "stable" if status.measured is None else status.measured.against_for(result.metric)
            )
            self._reference(namespace, isvc, check, REFERENCE_LABELS[against], result.stable)
            self.check_failed.labels(namespace, isvc, check).set(0 if result.passed else 1)

    def _reference(
        self, namespace: str, isvc: str, check: str, label: str, value: float | None
    ) -> None:
        """The compared value under its own label; the other references' last values go, so a
        rollout that starts or ends a baseline never leaves a stale line on the dashboard."""
        for other in REFERENCE_LABELS.values():
            if other != label or value is None:
                self.check_value.remove(namespace, isvc, check, other)
        if value is not None:
            self.check_value.labels(namespace, isvc, check, label).set(value)
