"""The failover's Kubernetes ports (policies/failover/ports.py) on the kubernetes client.

Status goes through the status subresource with the resourceVersion read (a 409 is retried
from a fresh read). Floors live in one ConfigMap per region, `radixfleet-failover-floors` in
the models' namespace, one key per model: the autoscaler reads it as a lower bound. A ConfigMap
rather than `minReplicas` on the InferenceService, because KServe turns that field into the
Knative revision template, and changing it would roll out a new revision of a model while its
region is taking over another region's traffic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from kubernetes import client

from canary.kube import as_dict, kube_call
from policies.failover.ports import ConflictError, KubeError
from policies.failover.spec import API_VERSION, PLURAL
from radixfleet.labels import GROUP, MANAGED_BY, MANAGER

FLOORS_CONFIGMAP = "radixfleet-failover-floors"
CONFLICT_ATTEMPTS = 5
FIELD_MANAGER = "radixfleet-failover"


class KubeFailoverPolicies:
    """FailoverPolicies; status through the status subresource with optimistic concurrency."""

    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            policy = as_dict(kube_call(f"get failoverpolicy {namespace}/{name}",
                                    partial(self._get, namespace, name)))  # fmt: skip
            policy["status"] = status
            try:
                kube_call(f"write status of {namespace}/{name}", partial(self._replace, policy))
                return
            except ConflictError:
                if attempt == CONFLICT_ATTEMPTS:
                    raise

    def _get(self, namespace: str, name: str) -> Any:
        return self.api.get_namespaced_custom_object(GROUP, API_VERSION, namespace, PLURAL, name)

    def _replace(self, policy: dict[str, Any]) -> Any:
        meta = policy["metadata"]
        return self.api.replace_namespaced_custom_object_status(
            GROUP, API_VERSION, meta["namespace"], PLURAL, meta["name"], policy,
            field_manager=FIELD_MANAGER,
        )  # fmt: skip


class KubeFloors:
    """Floors in each region's cluster: `clients` maps a region to its ApiClient."""

    def __init__(self, clients: Mapping[str, Any], *, namespace: str) -> None:
        self.apis = {region: client.CoreV1Api(api) for region, api in clients.items()}
        self.namespace = namespace

    def raise_floor(self, region: str, model: str, replicas: int) -> None:
        current = self._floors(region)
        if int(current.get(model, "0")) >= replicas:
            return
        self._patch(region, {model: str(replicas)}, create=not current and not self._exists(region))

    def release_floor(self, region: str, model: str) -> None:
        if model in self._floors(region):
            self._patch(region, {model: None}, create=False)

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
