"""The failover's Kubernetes ports (radixfleet/controllers/failover/ports.py) on the kubernetes
client.

Status goes through the kit's one status writer (the resourceVersion read, re-read on a 409).
Floors live in one ConfigMap per region, `radixfleet-failover-floors` in the models' namespace,
one key per model: the autoscaler reads it as a lower bound. A ConfigMap rather than
`minReplicas` on the InferenceService, because KServe turns that field into the Knative revision
template, and changing it would roll out a new revision of a model while its region is taking
over another region's traffic. `RULES` is every call below, as RBAC (the floors' rules apply in
each region's cluster).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from kubernetes import client

from radixfleet.controllers.failover.spec import API_VERSION, PLURAL
from radixfleet.kit.errors import KubeError
from radixfleet.kit.kube import KubeEvents, KubeStatus, Resource, kube_call
from radixfleet.kit.rbac import KOPF_TIMER, PolicyRule, rule
from radixfleet.labels import GROUP, MANAGED_BY, MANAGER

log = logging.getLogger(__name__)

FLOORS_CONFIGMAP = "radixfleet-failover-floors"
FIELD_MANAGER = "radixfleet-failover"
POLICIES = Resource(GROUP, API_VERSION, PLURAL)

RULES: tuple[PolicyRule, ...] = (
    POLICIES.rule(*KOPF_TIMER),  # kopf's timer on the policies
    *KubeStatus.rules(POLICIES),
    rule("", "configmaps", "get", "create", "patch"),
    *KubeEvents.RULES,
)


class KubeFailoverPolicies:
    """FailoverPolicies; status through the kit's status writer."""

    def __init__(self, api_client: Any) -> None:
        self.status = KubeStatus(api_client, POLICIES, field_manager=FIELD_MANAGER)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.status.get(namespace, name)

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.status.replace(namespace, name, status)


class KubeFloors:
    """Floors in each region's cluster: `clients` maps a region to its ApiClient."""

    def __init__(self, clients: Mapping[str, Any], *, namespace: str) -> None:
        self.apis = {region: client.CoreV1Api(api) for region, api in clients.items()}
        self.namespace = namespace

    def raise_floor(self, region: str, model: str, replicas: int) -> None:
        if not self._reachable(region):
            return
        current = self._floors(region)
        if int(current.get(model, "0")) >= replicas:
            return
        self._patch(region, {model: str(replicas)}, create=not current and not self._exists(region))

    def release_floor(self, region: str, model: str) -> None:
        if self._reachable(region) and model in self._floors(region):
            self._patch(region, {model: None}, create=False)

    def _reachable(self, region: str) -> bool:
        # Without credentials for a region's cluster the failover still moves traffic; it only
        # cannot pre-scale there. Said once a call, not raised: a KeyError would stop the tick.
        if region in self.apis:
            return True
        log.warning("no credentials for %s's cluster (--failover-context): floor left", region)
        return False

    def _floors(self, region: str) -> dict[str, str]:
        try:
            found = kube_call(f"read floors in {region}", partial(self._read, region))
        except KubeError as error:
            if error.status == 404:
                return {}
            raise
        return dict(found.data or {})

    def _exists(self, region: str) -> bool:
        try:
            kube_call(f"read floors in {region}", partial(self._read, region))
        except KubeError as error:
            if error.status == 404:
                return False
            raise
        return True

    def _read(self, region: str) -> Any:
        return self.apis[region].read_namespaced_config_map(FLOORS_CONFIGMAP, self.namespace)

    def _patch(self, region: str, data: Mapping[str, str | None], *, create: bool) -> None:
        api, ns = self.apis[region], self.namespace
        if create:
            body = client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=FLOORS_CONFIGMAP, labels={MANAGED_BY: MANAGER}),
                data={k: v for k, v in data.items() if v is not None},
            )
            call: Callable[[], Any] = partial(api.create_namespaced_config_map, ns, body)
        else:
            # A merge patch: a null value removes the key.
            patch = {"data": dict(data)}
            call = partial(api.patch_namespaced_config_map, FLOORS_CONFIGMAP, ns, patch)
        kube_call(f"write floors in {region}", call)
