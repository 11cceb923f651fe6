"""Act: carry out the canary's decisions on the cluster, and the kopf handlers that run them.

Each tick of a CanaryPolicy (a kopf timer) reconciles every InferenceService that names it:
observe (KServe status, command annotations, Prometheus when an analysis is due), decide
(`radixfleet.controllers.canary.decide`, pure), act. Acting writes the rollout's status first and
moves traffic second, so a controller stopped between the two re-asserts the recorded weight on
restart. Traffic moves by a JSON patch that re-checks the canary revision atomically; a stale action
is dropped and decided again next tick. Events go to the InferenceService.

kopf watches the CanaryPolicy, not the InferenceService: kopf keeps its own bookkeeping in
annotations of the objects it handles, and KServe copies InferenceService annotations into the
Knative revision template, which would start a new revision.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import kopf

from radixfleet.adapters.prometheus import HttpPrometheus, Prometheus
from radixfleet.controllers.canary.baseline import action
from radixfleet.controllers.canary.decide import Decision, analysis_due, decide
from radixfleet.controllers.canary.metrics import CanaryMetrics
from radixfleet.controllers.canary.observe import commands, measure, observe_isvc
from radixfleet.controllers.canary.ports import (
    Baselines,
    CanaryPolicies,
    InferenceServices,
    StaleRevisionError,
    policy_name,
)
from radixfleet.controllers.canary.queries import QueryConfig
from radixfleet.controllers.canary.spec import (
    API_VERSION,
    MIN_INTERVAL_SECONDS,
    PLURAL,
    CanaryPolicySpec,
)
from radixfleet.controllers.canary.state import (
    BaselineStatus,
    Observed,
    RolloutStatus,
    Verb,
    rollout_of,
)
from radixfleet.kit import kopfglue
from radixfleet.kit.events import Events
from radixfleet.kit.kube import Resource
from radixfleet.kit.plugin import OperatorOptions
from radixfleet.labels import GROUP
from radixfleet.platform import PROMETHEUS_URL, PROMETHEUS_URL_ENV
from radixfleet.wire import status_to_wire

log = logging.getLogger(__name__)


def to_wire(status: RolloutStatus) -> dict[str, Any]:
    """A rollout as stored in the CR: camelCase, and no null (the schema has no nullable)."""
    return status_to_wire(status)


@dataclass
class Controller:
    """The act layer: ports in, decisions carried out. `reconcile_policy` is one tick.

    `min_interval_seconds` lowers the analysis interval's floor where Prometheus scrapes every
    second (the local fleet); `metrics`, when set, exports the rollouts' series; `baselines`,
    where the fleet can run one, the baselines of policies that ask for them (`spec.baseline`;
    without the port such a policy judges against the stable revision, and its reasons say so).
    """

    isvcs: InferenceServices
    policies: CanaryPolicies
    events: Events
    prometheus: Prometheus
    queries: QueryConfig = field(default_factory=QueryConfig)
    metrics: CanaryMetrics | None = None
    min_interval_seconds: int = MIN_INTERVAL_SECONDS
    baselines: Baselines | None = None

    def reconcile_policy(self, policy: Mapping[str, Any], *, now: datetime) -> list[Decision]:
        """Decide and act for every InferenceService that names this policy."""
        meta = policy["metadata"]
        spec = CanaryPolicySpec.parse(
            policy.get("spec") or {}, min_interval_seconds=self.min_interval_seconds
        )
        return [
            self.reconcile(isvc, policy, spec, now=now)
            for isvc in self.isvcs.in_namespace(meta["namespace"])
            if policy_name(isvc) == meta["name"]
        ]

    def reconcile(
        self,
        isvc: Mapping[str, Any],
        policy: Mapping[str, Any],
        spec: CanaryPolicySpec,
        *,
        now: datetime,
    ) -> Decision:
        before = rollout_of(policy, isvc["metadata"]["name"])
        observed = self.observe(isvc, policy, spec, before, now=now)
        decision = decide(observed, spec, before, now)
        decision = self.keep_baseline(isvc, spec, observed, before, decision)
        done = self.act(isvc, policy, observed, before, decision)
        if done and self.metrics is not None:
            meta = isvc["metadata"]
            self.metrics.record(namespace=meta["namespace"], isvc=meta["name"], decision=decision)
        return decision

    def observe(
        self,
        isvc: Mapping[str, Any],
        policy: Mapping[str, Any],
        spec: CanaryPolicySpec,
        before: RolloutStatus | None,
        *,
        now: datetime,
    ) -> Observed:
        observed = observe_isvc(isvc)
        observed = replace(observed, manual=commands(policy, observed))
        if before is None or before.canary_revision != observed.canary_revision:
            return observed
        if not (observed.canary_ready and analysis_due(spec, before, now)):
            return observed  # Prometheus is asked only when an analysis will use the answer
        measured, error = measure(
            self.prometheus, namespace=isvc["metadata"]["namespace"], observed=observed,
            spec=spec, at=now, config=self.queries,
            with_baseline=self._with_baseline(spec) and before.baseline is not None,
        )  # fmt: skip
        return replace(observed, measured=measured, metrics_error=error)

    def _with_baseline(self, spec: CanaryPolicySpec) -> bool:
        return spec.baseline and self.baselines is not None

    def keep_baseline(
        self,
        isvc: Mapping[str, Any],
        spec: CanaryPolicySpec,
        observed: Observed,
        before: RolloutStatus | None,
        decision: Decision,
    ) -> Decision:
        """Carry out `radixfleet.controllers.canary.baseline.action` (idempotent, so a restarted
        controller ends a baseline its predecessor started); `decision` with the baseline in its
        status, which is written before traffic moves."""
        if self.baselines is None:
            return decision
        meta = isvc["metadata"]
        status = decision.status
        canary, stable = observed.canary_revision, observed.stable_revision
        baseline = status.baseline if status is not None else None
        todo = action(asked=spec.baseline, observed=observed, before=before, status=status)
        if todo == "ensure" and canary and stable:
            try:
                ready = self.baselines.ensure(
                    meta["namespace"], meta["name"], stable_revision=stable, canary_revision=canary
                )
                made = ready is not None
                baseline = BaselineStatus(revision=stable, ready=ready) if made else None
            except StaleRevisionError:
                log.info("%s/%s: the revisions moved on; the baseline follows next tick",
                         *_ns_name(meta))  # fmt: skip
        elif todo == "release":
            self.baselines.release(meta["namespace"], meta["name"])
            baseline = None
        if status is None or status.baseline == baseline:
            return decision
        return replace(decision, status=status.model_copy(update={"baseline": baseline}))

    def act(
        self,
        isvc: Mapping[str, Any],
        policy: Mapping[str, Any],
        observed: Observed,
        before: RolloutStatus | None,
        decision: Decision,
    ) -> bool:
        """Record and carry out `decision`; False when it went stale before traffic moved."""
        meta = isvc["metadata"]
        if decision.status is not None and _worth_writing(before, decision.status):
            self.policies.write_rollout(
                meta["namespace"],
                policy["metadata"]["name"],
                to_wire(decision.status),
                generation=policy["metadata"].get("generation"),
            )
        moved = not _traffic_differs(observed, decision) or self._move(meta, observed, decision)
        if not moved:
            return False
        if _newsworthy(before, decision):
            self.events.emit(
                involved=isvc, reason=f"Canary{decision.verb.value.capitalize()}",
                message=decision.reason, warning=decision.warning,
            )  # fmt: skip
        return True

    def _move(self, meta: Mapping[str, Any], observed: Observed, decision: Decision) -> bool:
        assert observed.canary_revision is not None
        try:
            self.isvcs.set_canary_percent(
                meta["namespace"], meta["name"], percent=decision.canary_percent,
                canary_revision=observed.canary_revision,
            )  # fmt: skip
        except StaleRevisionError:
            log.info("%s/%s: a newer revision appeared; deciding again", *_ns_name(meta))
            return False
        return True


def _ns_name(meta: Mapping[str, Any]) -> tuple[str, str]:
    return meta["namespace"], meta["name"]


def _traffic_differs(observed: Observed, decision: Decision) -> bool:
    if decision.remove_percent:
        return observed.weight is not None
    return decision.canary_percent is not None and decision.canary_percent != observed.weight


def _worth_writing(before: RolloutStatus | None, after: RolloutStatus) -> bool:
    # A hold's countdown changes its reason every tick; writing it each time would churn the
    # object for nothing. Anything else that changed is progress and is written.
    if before is None or before.last_decision is None or after.last_decision is None:
        return True
    if before.model_copy(update={"last_decision": None}) != after.model_copy(
        update={"last_decision": None}
    ):
        return True
    was, now = before.last_decision, after.last_decision
    return was.action != now.action or (now.action is Verb.HALT and was.reason != now.reason)


def _newsworthy(before: RolloutStatus | None, decision: Decision) -> bool:
    after = decision.status
    if after is None:
        return False
    if decision.verb in (Verb.ADVANCE, Verb.PROMOTE, Verb.ROLLBACK):
        return True
    if before is None or before.canary_revision != after.canary_revision:
        return True
    return before.phase != after.phase or before.failed_checks != after.failed_checks


# ---- kopf ----------------------------------------------------------------------------------


NAME = "canary"
RESOURCE = Resource(GROUP, API_VERSION, PLURAL)


def register(registry: kopf.OperatorRegistry, controller: Controller) -> None:
    """Add the canary's timer to `registry`; nothing is registered on import."""

    def tick(body: Mapping[str, Any], now: datetime, retry: int) -> None:
        run_tick(controller, body, now=now, retry=retry)

    kopfglue.timer(
        registry, resource=RESOURCE, id="canary-tick", interval=MIN_INTERVAL_SECONDS, tick=tick
    )


def run_tick(
    controller: Controller, body: Mapping[str, Any], *, now: datetime, retry: int = 0
) -> None:
    """One timer tick, with errors in kopf's retry vocabulary (the kit's one rule)."""
    kopfglue.run_tick(
        NAME, lambda: controller.reconcile_policy(body, now=now), kind="CanaryPolicy", retry=retry
    )


def kube_controller(options: OperatorOptions | None = None) -> Controller:
    """A Controller on the in-cluster (or kubeconfig) credentials and the given Prometheus."""
    from radixfleet.controllers.canary.kube import (
        FIELD_MANAGER,
        KubeBaselines,
        KubeCanaryPolicies,
        KubeInferenceServices,
    )
    from radixfleet.kit.kube import KubeEvents, api_client

    options = options or OperatorOptions()
    api = api_client()
    url = options.prometheus_url or os.environ.get(PROMETHEUS_URL_ENV, PROMETHEUS_URL)
    return Controller(
        isvcs=KubeInferenceServices(api),
        policies=KubeCanaryPolicies(api),
        events=KubeEvents(api, clock=lambda: datetime.now(UTC), component=FIELD_MANAGER),
        prometheus=HttpPrometheus(url),
        metrics=CanaryMetrics(),
        baselines=KubeBaselines(api),
    )
