"""The canary controller on the local fleet: the same observe, decide and act, the fleet as KServe.

`FleetInferenceServices` is the InferenceServices port over one region of a `LocalFleet`. Each
model is an InferenceService of that name whose predictor status tells the fleet's revisions as
KServe would: `latestCreatedRevision` is the canary while there is one, `latestRolledoutRevision`
the stable one, `latestReadyRevision` the canary once one of its replicas is ready; its
`canaryTrafficPercent` is the entry's split. Setting the percent moves the split, removing it
promotes (the old revision is retired), 0 rolls back and keeps the canary pinned.

`LocalRollouts` ticks the real `Controller` over that port on a thread, as kopf's timer does in a
cluster, with the CanaryPolicy and the Events held in memory (`canary.fakes`) and the fleet's
real Prometheus answering the canary's PromQL.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from canary.controller import Controller
from canary.decide import Decision
from canary.fakes import FakeCanaryPolicies, FakeEvents
from canary.metrics import CanaryMetrics
from canary.ports import StaleRevisionError
from canary.spec import POLICY_ANNOTATION
from canary.state import RolloutStatus, rollout_of
from radixfleet.adapters.prometheus import HttpPrometheus
from radixfleet.fleet import LocalFleet

log = logging.getLogger(__name__)

DEFAULT_POLICY = "default"
LOCAL_MIN_INTERVAL_S = 1  # the fleet's Prometheus scrapes every second


class FleetInferenceServices:
    """The InferenceServices port over one region of a local fleet."""

    def __init__(self, fleet: LocalFleet, *, region: str, policy: str = DEFAULT_POLICY) -> None:
        self.fleet = fleet
        self.region = region
        self.policy = policy

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        models = self.fleet.spec.region(self.region).models
        return [self._isvc(m.name, namespace) for m in models if m.namespace == namespace]

    def set_canary_percent(
        self, namespace: str, name: str, *, percent: int | None, canary_revision: str
    ) -> None:
        # The cluster adapter re-checks the canary in its JSON patch; here a read first will do:
        # nothing but this controller creates or promotes revisions while it runs.
        latest = self.fleet.revisions(self.region, name).latest
        if latest != canary_revision:
            raise StaleRevisionError(f"{name}: the canary is now {latest}", status=422)
        if percent is None:
            self.fleet.promote(self.region, name)
        else:
            self.fleet.set_canary_percent(self.region, name, percent)

    def _isvc(self, model: str, namespace: str) -> dict[str, Any]:
        revisions = self.fleet.revisions(self.region, model)
        predictor: dict[str, Any] = {}
        if revisions.canary is not None:
            predictor["canaryTrafficPercent"] = revisions.canary_percent
        ready = revisions.latest if revisions.canary_ready else revisions.stable
        return {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {
                "name": model,
                "namespace": namespace,
                "annotations": {POLICY_ANNOTATION: self.policy},
            },
            "spec": {"predictor": predictor},
            "status": {
                "components": {
                    "predictor": {
                        "latestCreatedRevision": revisions.latest,
                        "latestReadyRevision": ready,
                        "latestRolledoutRevision": revisions.stable,
                    }
                }
            },
        }


@dataclass
class LocalRollouts:
    """The canary controller ticking over one region of a local fleet, on its own thread."""

    controller: Controller
    policies: FakeCanaryPolicies
    namespace: str
    policy: str = DEFAULT_POLICY
    tick_s: float = 1.0
    decisions: list[tuple[str, Decision]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @classmethod
    def for_fleet(
        cls,
        fleet: LocalFleet,
        *,
        region: str,
        namespace: str,
        spec: Mapping[str, Any],
        prometheus_url: str,
        tick_s: float = 1.0,
    ) -> LocalRollouts:
        """A controller over `region` of `fleet`, under one CanaryPolicy with `spec`."""
        policies = FakeCanaryPolicies()
        policies.add({"metadata": {"name": DEFAULT_POLICY, "namespace": namespace}, "spec": spec})
        controller = Controller(
            isvcs=FleetInferenceServices(fleet, region=region),
            policies=policies,
            events=FakeEvents(),
            prometheus=HttpPrometheus(prometheus_url),
            metrics=CanaryMetrics(),
            min_interval_seconds=LOCAL_MIN_INTERVAL_S,
        )
        return cls(controller, policies, namespace, tick_s=tick_s)

    def tick(self, *, now: datetime | None = None) -> list[Decision]:
        """One pass over every InferenceService under the policy."""
        policy = self.policies.get(self.namespace, self.policy)
        assert policy is not None
        decided = self.controller.reconcile_policy(policy, now=now or datetime.now(UTC))
        for decision in decided:
            if decision.status is not None:
                self.decisions.append((decision.status.inference_service, decision))
        return decided

    def rollout(self, isvc: str) -> RolloutStatus | None:
        """The recorded rollout of `isvc`, as the policy's status holds it."""
        policy = self.policies.get(self.namespace, self.policy)
        return None if policy is None else rollout_of(policy, isvc)

    @contextmanager
    def running(self) -> Iterator[LocalRollouts]:
        """Tick every `tick_s` on a thread until the block ends."""
        stop = threading.Event()
        thread = threading.Thread(target=self._loop, args=(stop,), name="canary", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=30)

    def _loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.tick_s):
            try:
                self.tick()
            except Exception as error:  # a failed tick is retried on the next, as kopf does
                log.warning("canary tick failed: %s", error)
                self.errors.append(str(error))
