"""The failover's Prometheus series, under the names and labels of `radixfleet.metrics_names`.

The Regions dashboard reads them: the weight set for each model's record in each region, the
controller's verdict per region, and traffic shifts out of a region and back into it. One
registry per controller, so tests and the local fleet can run several.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from radixfleet import metrics_names as m
from radixfleet.controllers.failover.decide import Decision
from radixfleet.controllers.failover.spec import FailoverPolicySpec
from radixfleet.controllers.failover.state import Phase

# Which notes count as a shift, and in which direction.
DIRECTIONS = {"RegionUnhealthy": "out", "FailbackStarted": "back"}


def _base(metric: m.Metric) -> str:
    # prometheus_client appends `_total` to counters itself.
    return metric.name.removesuffix("_total") if metric.type == "counter" else metric.name


class FailoverMetrics:
    """Records each decision's weights, verdicts and shifts."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.weight = self._gauge(m.REGION_WEIGHT)
        self.healthy = self._gauge(m.REGION_HEALTHY)
        self.events = Counter(
            _base(m.FAILOVER_EVENTS), m.FAILOVER_EVENTS.help, list(m.FAILOVER_EVENTS.labels),
            registry=self.registry,
        )  # fmt: skip

    def _gauge(self, metric: m.Metric) -> Gauge:
        return Gauge(metric.name, metric.help, list(metric.labels), registry=self.registry)

    def record(self, spec: FailoverPolicySpec, decision: Decision) -> None:
        status = decision.status
        for region in status.regions:
            self.healthy.labels(region.name).set(float(region.phase is Phase.HEALTHY))
            for model in spec.models:
                self.weight.labels(region.name, model).set(status.weights.get(region.name, 0))
        for note in decision.notes:
            direction = DIRECTIONS.get(note.reason)
            if direction is not None and note.region is not None:
                self.events.labels(note.region, direction).inc()
