"""Act: carry out the autoscaler's decisions on the cluster, and the kopf handlers that run them.

Each tick of an AutoscalePolicy (a kopf timer) observes its InferenceService's serving Revision
(KServe status, the Revision's replica counts, Prometheus), decides (`decide`, pure) and acts:

1. the policy's status first (a controller restarted at any moment resumes from it);
2. on a scale-down, pod deletion costs in the cache-aware drain order, *before* the count drops,
   so the ReplicaSet removes the pods whose caches are worth least;
3. the scale bounds on the Revision and its PodAutoscaler
(radixfleet/controllers/autoscale/knative.py), only
   when they differ from what is there: an unchanged decision writes nothing to the Revision;
4. a revision at zero that a floor wants up gets one request through the activator (min-scale
   alone does not wake it).

A prefill/decode model's roles each tick on their own policy; a role's count is first raised to
what the pair rule wants beside its peer's last desired count (pairing.py), so neither role
sleeps while the other serves.

Between ticks, at every timer call, new pods of the serving revision are pre-warmed
(radixfleet/controllers/autoscale/warming.py): out of their router's selection until their prefix
cache holds the model's hottest prefixes.

When the serving revision changes (a rollout), the previous one is released to min-scale 0 so
that Knative can retire it. kopf watches the AutoscalePolicy only, never the InferenceService:
kopf keeps bookkeeping in annotations of what it handles, and KServe copies InferenceService
annotations into the revision template (a new revision).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
from prometheus_client import Gauge

from radixfleet import metrics_names as m
from radixfleet.adapters.prometheus import HttpPrometheus, Prometheus
from radixfleet.controllers.autoscale.decide import Decision, decide, due
from radixfleet.controllers.autoscale.knative import (
    DELETION_COST,
    deletion_costs,
    scale_annotations,
)
from radixfleet.controllers.autoscale.observe import ceiling, observe, serving_revision
from radixfleet.controllers.autoscale.pairing import paired, peer_of
from radixfleet.controllers.autoscale.ports import (
    AutoscalePolicies,
    InferenceServices,
    Pods,
    Revisions,
    Waker,
)
from radixfleet.controllers.autoscale.queries import QueryConfig
from radixfleet.controllers.autoscale.spec import (
    API_VERSION,
    MIN_INTERVAL_SECONDS,
    PLURAL,
    AutoscalePolicySpec,
)
from radixfleet.controllers.autoscale.state import (
    AutoscaleStatus,
    Observed,
    Verb,
    status_of,
    to_wire,
)
from radixfleet.controllers.autoscale.victims import choose_victims, drain_last
from radixfleet.controllers.autoscale.warming import Warmer
from radixfleet.kit import kopfglue
from radixfleet.kit.errors import KubeError
from radixfleet.kit.events import Events
from radixfleet.kit.kube import Resource
from radixfleet.kit.plugin import OperatorOptions
from radixfleet.labels import BASELINE_POOL, GROUP, POOL
from radixfleet.platform import ENTRY_URL, ENTRY_URL_ENV, PROMETHEUS_URL, PROMETHEUS_URL_ENV

log = logging.getLogger(__name__)

NAME = "autoscale"
RESOURCE = Resource(GROUP, API_VERSION, PLURAL)

EVENT_REASONS = {
    Verb.SCALE_UP: "AutoscaleUp",
    Verb.SCALE_DOWN: "AutoscaleDown",
    Verb.HOLD: "AutoscaleHold",
    Verb.HALT: "AutoscaleHalted",
}

DESIRED = Gauge(m.DESIRED_REPLICAS.name, m.DESIRED_REPLICAS.help, list(m.DESIRED_REPLICAS.labels))


@dataclass
class Controller:
    """The act layer: ports in, decisions carried out. `reconcile_policy` is one tick."""

    isvcs: InferenceServices
    revisions: Revisions
    pods: Pods
    policies: AutoscalePolicies
    events: Events
    prometheus: Prometheus
    waker: Waker | None = None
    queries: QueryConfig = field(default_factory=QueryConfig)
    warmer: Warmer | None = None
    # Each policy's last observation, which pre-warming reads between ticks.
    seen: dict[tuple[str, str], Observed] = field(default_factory=dict)

    def reconcile_policy(self, policy: Mapping[str, Any], *, now: datetime) -> Decision | None:
        """Decide and act for the policy's InferenceService; None when no decision is due."""
        spec = AutoscalePolicySpec.model_validate(policy.get("spec") or {})
        before = status_of(policy)
        namespace = policy["metadata"]["namespace"]
        self._prewarm(policy, spec, before, now)
        if not due(spec, before, now):
            return None
        isvc = self.isvcs.get(namespace, spec.inference_service)
        observed, revision = self.observe(namespace, spec, isvc, now=now)
        self.seen[(namespace, policy["metadata"]["name"])] = observed
        decision = self._paired(namespace, isvc, decide(observed, spec, before, now))
        self.act(policy, spec, isvc, revision, observed, before, decision)
        return decision

    def _paired(
        self, namespace: str, isvc: Mapping[str, Any] | None, decision: Decision
    ) -> Decision:
        """A prefill/decode role's decision under the pair rule, given its peer's last desired
        count (pairing.py); any other model's as it is."""
        peer = peer_of(isvc)
        if peer is None:
            return decision
        found = self.policies.get(namespace, peer.name)
        desired = ((found or {}).get("status") or {}).get("desired", 0)
        return paired(decision, role=peer.role, peer_desired=int(desired))

    def observe(
        self,
        namespace: str,
        spec: AutoscalePolicySpec,
        isvc: Mapping[str, Any] | None,
        *,
        now: datetime,
    ) -> tuple[Observed, Mapping[str, Any] | None]:
        if isvc is None:
            missing = f"InferenceService {namespace}/{spec.inference_service} not found"
            return Observed(ready=0, metrics_error=missing), None
        name = serving_revision(isvc)
        revision = self.revisions.get(namespace, name) if name else None
        observed = observe(
            isvc=isvc, revision=revision, prometheus=self.prometheus, config=self.queries, at=now
        )
        return observed, revision

    def act(
        self,
        policy: Mapping[str, Any],
        spec: AutoscalePolicySpec,
        isvc: Mapping[str, Any] | None,
        revision: Mapping[str, Any] | None,
        observed: Observed,
        before: AutoscaleStatus | None,
        decision: Decision,
    ) -> None:
        meta = policy["metadata"]
        seen = decision.status.model_copy(update={"observed_generation": meta.get("generation")})
        self.policies.write_status(meta["namespace"], meta["name"], to_wire(seen))
        DESIRED.labels(meta["namespace"], spec.inference_service).set(decision.desired)
        if isvc is None or revision is None or spec.paused:
            return
        top = _ceiling(spec, isvc)
        self._release_previous(meta["namespace"], before, observed, top)
        if decision.verb is Verb.SCALE_DOWN:
            self._order_drain(meta["namespace"], observed, spec)
        wanted = scale_annotations(decision.desired, top)
        if _differs(revision, wanted):
            self.revisions.set_scale(meta["namespace"], revision["metadata"]["name"], wanted)
        self._wake_if_at_zero(isvc, observed, decision)
        if _newsworthy(before, decision):
            self.events.emit(
                involved=isvc, reason=EVENT_REASONS[decision.verb], message=decision.reason,
                warning=decision.warning,
            )  # fmt: skip

    def _prewarm(
        self, policy: Mapping[str, Any], spec: AutoscalePolicySpec,
        before: AutoscaleStatus | None, now: datetime,
    ) -> None:  # fmt: skip
        """New pods of the revision the last tick served, held out and warmed (warming.py)."""
        if self.warmer is None or spec.paused or before is None:
            return
        meta = policy["metadata"]
        seen = self.seen.get((meta["namespace"], meta["name"]))
        try:
            self.warmer.tick(meta["namespace"], spec, before.revision, seen, now=now,
                             desired=before.desired)  # fmt: skip
        except KubeError as error:  # the next call tries again; scaling goes on meanwhile
            log.warning("pre-warming in %s skipped: %s", meta["namespace"], error)

    def _wake_if_at_zero(
        self, isvc: Mapping[str, Any], observed: Observed, decision: Decision
    ) -> None:
        # A floor (a schedule, a forecast) asking for replicas of a revision at zero.
        url = isvc.get("status", {}).get("url")
        if self.waker is not None and url and decision.desired > 0 and observed.current == 0:
            self.waker.wake(str(url))

    def _release_previous(
        self, namespace: str, before: AutoscaleStatus | None, observed: Observed, top: int
    ) -> None:
        # The revision the policy pinned before a rollout: back to min-scale 0, so Knative
        # scales it down once no traffic reaches it.
        old = before.revision if before is not None else None
        if old is None or old == observed.revision or self.revisions.get(namespace, old) is None:
            return
        self.revisions.set_scale(namespace, old, scale_annotations(0, top))

    def _order_drain(self, namespace: str, observed: Observed, spec: AutoscalePolicySpec) -> None:
        """Deletion costs on the revision's pods: lowest on the first to drain, highest on a
        canary's baseline (a rollout is judged against it)."""
        assert observed.revision is not None
        pods = self.pods.of_revision(namespace, observed.revision)
        baseline = {p["metadata"]["name"] for p in pods
                    if (p["metadata"].get("labels") or {}).get(POOL) == BASELINE_POOL}  # fmt: skip
        order = choose_victims(observed, 0, cache_aware=spec.cache_aware_drain)
        costs = deletion_costs(drain_last(order, baseline))
        for pod in pods:
            name = pod["metadata"]["name"]
            current = (pod["metadata"].get("annotations") or {}).get(DELETION_COST)
            if name in costs and current != str(costs[name]):
                self.pods.set_deletion_cost(namespace, name, costs[name])


def _ceiling(spec: AutoscalePolicySpec, isvc: Mapping[str, Any]) -> int:
    top = ceiling(isvc)
    return spec.max_replicas if not top else min(spec.max_replicas, top)


def _differs(revision: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    current = revision.get("metadata", {}).get("annotations") or {}
    return any(current.get(key) != value for key, value in wanted.items())


def _newsworthy(before: AutoscaleStatus | None, decision: Decision) -> bool:
    if decision.verb in (Verb.SCALE_UP, Verb.SCALE_DOWN):
        return True
    was = before.last_decision.action if before and before.last_decision else None
    return decision.verb is Verb.HALT and was is not Verb.HALT


# ---- kopf ----------------------------------------------------------------------------------


def register(registry: kopf.OperatorRegistry, controller: Controller) -> None:
    """Add the autoscaler's timer to `registry`; nothing is registered on import."""

    def tick(body: Mapping[str, Any], now: datetime, retry: int) -> None:
        run_tick(controller, body, now=now, retry=retry)

    kopfglue.timer(
        registry, resource=RESOURCE, id="autoscale-tick", interval=MIN_INTERVAL_SECONDS, tick=tick
    )


def run_tick(
    controller: Controller, body: Mapping[str, Any], *, now: datetime, retry: int = 0
) -> None:
    """One timer tick, with errors in kopf's retry vocabulary (the kit's one rule)."""
    kopfglue.run_tick(
        NAME, lambda: controller.reconcile_policy(body, now=now), kind="AutoscalePolicy",
        retry=retry,
    )  # fmt: skip


def kube_controller(options: OperatorOptions | None = None) -> Controller:
    """A Controller on the in-cluster (or kubeconfig) credentials and the given Prometheus."""
    from radixfleet.controllers.autoscale.kube import (
        FIELD_MANAGER,
        HttpWaker,
        HttpWarmUp,
        KubeAutoscalePolicies,
        KubeDataPlaneKeys,
        KubeInferenceServices,
        KubePods,
        KubeRevisions,
    )
    from radixfleet.kit.kube import KubeEvents, api_client

    options = options or OperatorOptions()
    api = api_client()
    url = options.prometheus_url or os.environ.get(PROMETHEUS_URL_ENV, PROMETHEUS_URL)
    pods = KubePods(api)
    warm_up = HttpWarmUp(os.environ.get(ENTRY_URL_ENV, ENTRY_URL))
    return Controller(
        isvcs=KubeInferenceServices(api),
        revisions=KubeRevisions(api),
        pods=pods,
        policies=KubeAutoscalePolicies(api),
        events=KubeEvents(api, clock=lambda: datetime.now(UTC), component=FIELD_MANAGER),
        prometheus=HttpPrometheus(url),
        waker=HttpWaker(),
        warmer=Warmer(pods=pods, keys=KubeDataPlaneKeys(api), http=warm_up),
    )
