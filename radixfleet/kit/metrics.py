"""Per-controller series of the operator: ticks, errors and decisions, on one registry.

`radixfleet_controller_ticks_total{controller}` counts reconciles begun,
`radixfleet_controller_errors_total{controller,kind}` those that failed (kind `temporary`: kopf
retries it; `permanent`: it needs a person), `radixfleet_controller_decisions_total
{controller,verb}` the decisions taken. The kopf glue records them, so every controller gets
the same series without a line of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter


@dataclass
class ControllerMetrics:
    """The three counters on their own registry (tests make a fresh one each)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.ticks = Counter(
            "radixfleet_controller_ticks", "Reconciles begun.", ["controller"],
            registry=self.registry,
        )  # fmt: skip
        self.errors = Counter(
            "radixfleet_controller_errors", "Reconciles that failed, by retry kind.",
            ["controller", "kind"], registry=self.registry,
        )  # fmt: skip
        self.decisions = Counter(
            "radixfleet_controller_decisions", "Decisions taken, by verb.",
            ["controller", "verb"], registry=self.registry,
        )  # fmt: skip

    def tick(self, controller: str) -> None:
        self.ticks.labels(controller).inc()

    def error(self, controller: str, *, temporary: bool) -> None:
        self.errors.labels(controller, "temporary" if temporary else "permanent").inc()

    def decided(self, controller: str, verbs: Iterable[str]) -> None:
        for verb in verbs:
            self.decisions.labels(controller, verb).inc()


#: The operator's counters; `radixfleet.kit.operator` serves them with every controller's own.
METRICS = ControllerMetrics()
