"""Act: carry out the failover's decisions, and the kopf handlers that run them.

Each tick of a FailoverPolicy (a kopf timer) that starts a new interval observes every region
(its Prometheus, the Route 53 records and health checks), decides
(`radixfleet.controllers.failover.decide`, pure) and acts, in this order:

1. raise floors: pre-scaling comes before any traffic moves;
2. write the status: a controller stopped after this re-issues the same weights on restart;
3. set weights, after a re-check: the records are re-read and only changed ones are written
   (one atomic batch), and a shift that gives more weight to a region whose Route 53 health
   check now says unhealthy is deferred to the next interval;
4. release floors, once the weights are back;
5. post the decision's notes as Events on the FailoverPolicy.

The failover writes global Route 53 records, so it runs once per fleet, not once per region:
`radixfleet operator run --with-failover` in one cluster that can see every region's
Prometheus (or `radixfleet failover run`). Leader election between the operator's replicas is
the kit's (kopf peering, `radixfleet.kit.leader`). A brief overlap is harmless: every action is
idempotent and decided from the status.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from radixfleet.adapters.prometheus import HttpPrometheus, Prometheus
from radixfleet.adapters.route53 import AwsRoute53, WeightedRecords
from radixfleet.controllers.failover.decide import (
    Decision,
    RaiseFloor,
    ReleaseFloor,
    SetWeights,
    decide,
    interval_due,
)
from radixfleet.controllers.failover.metrics import FailoverMetrics
from radixfleet.controllers.failover.observe import (
    PrometheusFor,
    health_checks,
    observe,
    read_records,
)
from radixfleet.controllers.failover.ports import FailoverPolicies, Floors
from radixfleet.controllers.failover.queries import QueryConfig
from radixfleet.controllers.failover.settings import CONTEXTS, FLOORS_NAMESPACE
from radixfleet.controllers.failover.spec import (
    API_VERSION,
    MIN_INTERVAL_SECONDS,
    PLURAL,
    FailoverPolicySpec,
)
from radixfleet.controllers.failover.state import FailoverStatus, HealthCheck, Observed
from radixfleet.dataplane.signals import TOKEN_ENV
from radixfleet.kit import kopfglue
from radixfleet.kit.errors import KubeError
from radixfleet.kit.events import Events
from radixfleet.kit.kube import Resource
from radixfleet.kit.plugin import OperatorOptions
from radixfleet.labels import GROUP
from radixfleet.wire import status_to_wire

log = logging.getLogger(__name__)

PROMETHEUS_URL_ENV = "RADIXFLEET_PROMETHEUS_URL_TEMPLATE"
DEFAULT_PROMETHEUS_URL = "http://prometheus.{region}.monitoring.internal:9090"
NAME = "failover"
RESOURCE = Resource(GROUP, API_VERSION, PLURAL)

Observer = Callable[[FailoverPolicySpec, str, datetime], Observed]


def to_wire(status: FailoverStatus) -> dict[str, Any]:
    """A status as stored in the CR: camelCase, and no null (the schema has no nullable)."""
    return status_to_wire(status)


def status_of(policy: Mapping[str, Any]) -> FailoverStatus | None:
    """The status a policy carries, None before the first decision."""
    status = policy.get("status") or {}
    return FailoverStatus.model_validate(status) if status.get("regions") else None


@dataclass
class Controller:
    """The act layer: ports in, decisions carried out. `reconcile` is one tick."""

    route53: WeightedRecords
    prometheus_for: PrometheusFor
    policies: FailoverPolicies
    events: Events
    floors: Floors
    queries: QueryConfig = field(default_factory=QueryConfig)
    # Another way to see the regions (the local fleet probes its entries); None: Prometheus.
    observer: Observer | None = None
    metrics: FailoverMetrics = field(default_factory=FailoverMetrics)

    def reconcile(self, policy: Mapping[str, Any], *, now: datetime) -> Decision | None:
        """Decide and act if a new interval has begun; None when it has not."""
        spec = FailoverPolicySpec.model_validate(policy.get("spec") or {})
        before = status_of(policy)
        if not interval_due(spec, before, now):
            return None
        observed = self.observe(spec, policy["metadata"]["namespace"], now)
        decision = decide(observed, spec, before, now)
        self.act(policy, spec, observed, decision)
        self.metrics.record(spec, decision)
        return decision

    def observe(self, spec: FailoverPolicySpec, namespace: str, now: datetime) -> Observed:
        """Every region's signals and the records' weights, for one interval."""
        if self.observer is not None:
            return self.observer(spec, namespace, now)
        return observe(
            spec, namespace=namespace, route53=self.route53, prometheus_for=self.prometheus_for,
            at=now, config=self.queries,
        )  # fmt: skip

    def act(
        self,
        policy: Mapping[str, Any],
        spec: FailoverPolicySpec,
        observed: Observed,
        decision: Decision,
    ) -> None:
        meta = policy["metadata"]
        for action in decision.actions:
            if isinstance(action, RaiseFloor):
                self._floor(policy, action)
        self.policies.write_status(meta["namespace"], meta["name"], to_wire(decision.status))
        for action in decision.actions:
            if isinstance(action, SetWeights):
                self._shift(policy, spec, observed, action)
            elif isinstance(action, ReleaseFloor):
                self._floor(policy, action)
        for note in decision.notes:
            self._event(policy, note.reason, note.message, warning=note.warning)

    def _shift(
        self,
        policy: Mapping[str, Any],
        spec: FailoverPolicySpec,
        observed: Observed,
        action: SetWeights,
    ) -> None:
        if blocked := self._recheck(spec, observed, action):
            self._event(policy, "ShiftDeferred", blocked, warning=True)
            return
        ids = {spec.region(name).record_id: weight for name, weight in action.weights.items()}
        changed = self.route53.set_weights(
            spec.hosted_zone_id, spec.record_name, spec.record_type, ids
        )
        log.info("%s: weights %s (changed %s)", spec.record_name, dict(action.weights), changed)

    def _recheck(self, spec: FailoverPolicySpec, observed: Observed, action: SetWeights) -> str:
        """Why the shift must wait, or "": a region gaining weight is now failing its check."""
        before = observed.weights or {}
        gaining = [n for n, w in action.weights.items() if w > before.get(n, 0)]
        if not gaining or not spec.signals.use_health_checks:
            return ""
        checks = health_checks(self.route53, read_records(self.route53, spec))
        failing = [n for n in gaining if checks.get(n) is HealthCheck.UNHEALTHY]
        if failing:
            return f"not shifting: {', '.join(failing)} now fail their Route 53 health check"
        return ""

    def _floor(self, policy: Mapping[str, Any], action: RaiseFloor | ReleaseFloor) -> None:
        # A floor that cannot be set never holds the shift back: the failing region's traffic
        # is lost anyway, and the next interval tries the floor again.
        try:
            if isinstance(action, RaiseFloor):
                self.floors.raise_floor(action.region, action.model, action.replicas)
            else:
                self.floors.release_floor(action.region, action.model)
        except KubeError as error:
            what = f"floor of {action.model} in {action.region}: {error}"
            self._event(policy, "FloorFailed", what, warning=True)

    def _event(
        self, policy: Mapping[str, Any], reason: str, message: str, *, warning: bool
    ) -> None:
        try:
            self.events.emit(involved=policy, reason=reason, message=message, warning=warning)
        except KubeError as error:  # an Event is a report, never a reason to stop acting
            log.warning("event %s not posted: %s", reason, error)


# ---- kopf ----------------------------------------------------------------------------------


def register(registry: kopf.OperatorRegistry, controller: Controller) -> None:
    """Add the failover's timer to `registry`; nothing is registered on import."""

    def tick(body: Mapping[str, Any], now: datetime, retry: int) -> None:
        run_tick(controller, body, now=now, retry=retry)

    kopfglue.timer(
        registry, resource=RESOURCE, id="failover-tick", interval=MIN_INTERVAL_SECONDS, tick=tick
    )


def run_tick(
    controller: Controller, body: Mapping[str, Any], *, now: datetime, retry: int = 0
) -> None:
    """One timer tick, with errors in kopf's retry vocabulary (the kit's one rule: Route 53's
    throttling is temporary like a 409 or a 5xx)."""
    kopfglue.run_tick(
        NAME, lambda: controller.reconcile(body, now=now), kind="FailoverPolicy", retry=retry
    )


def prometheus_per_region(template: str, *, token: str = "") -> PrometheusFor:
    """Each region's Prometheus: its `prometheusUrl`, else `template` with `{region}`. With the
    fleet `token`, each is read through its region's entry (`radixfleet/dataplane/signals.py`)."""
    cache: dict[str, Prometheus] = {}
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def for_region(region: Any) -> Prometheus:
        url = region.prometheus_url or template.format(region=region.name)
        return cache.setdefault(url, HttpPrometheus(url, timeout_seconds=3.0, headers=headers))

    return for_region


def kube_controller(options: OperatorOptions) -> Controller:
    """A Controller on in-cluster credentials, with one kubeconfig context per region."""
    from kubernetes import config

    from radixfleet.adapters.route53 import client as route53_client
    from radixfleet.controllers.failover.kube import FIELD_MANAGER, KubeFailoverPolicies, KubeFloors
    from radixfleet.kit.kube import KubeEvents, api_client

    api = api_client()
    # Its own region through its own credentials; the others through the contexts given.
    regional = {options.region: api} | {
        r: config.new_client_from_config(context=c)  # type: ignore[no-untyped-call]
        for r, c in options.setting(NAME, CONTEXTS).items()
    }
    template = os.environ.get(PROMETHEUS_URL_ENV, DEFAULT_PROMETHEUS_URL)
    token = os.environ.get(TOKEN_ENV, "")
    return Controller(
        route53=AwsRoute53(route53_client()),
        prometheus_for=prometheus_per_region(template, token=token),
        policies=KubeFailoverPolicies(api),
        events=KubeEvents(api, clock=lambda: datetime.now(UTC), component=FIELD_MANAGER),
        floors=KubeFloors(regional, namespace=options.setting(NAME, FLOORS_NAMESPACE)),
    )
