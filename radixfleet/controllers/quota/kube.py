"""The quota controller's ports (radixfleet/controllers/quota/ports.py) on the kubernetes client.

Tenant status is replaced whole through the kit's one status writer (the resourceVersion just
read, re-read on a 409): a merge patch could not remove a stale commitment. `RULES` is every
call below and every watch of the quota's kopf handlers, as RBAC.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubernetes import client

from radixfleet import labels
from radixfleet.controllers.quota.carry import Stored
from radixfleet.controllers.quota.spec import (
    API_VERSION,
    GPU_QUOTA_RESOURCE,
    PLURAL,
    QUOTA_NAME,
    SecretKeyRef,
)
from radixfleet.kit.errors import ConflictError
from radixfleet.kit.kube import (
    INFERENCE_SERVICES,
    KubeStatus,
    Resource,
    absent_as_none,
    kube_call,
    read_secret_value,
)
from radixfleet.kit.rbac import OWN_NAMESPACE, READ, TENANT_NAMESPACES, PolicyRule, rule
from radixfleet.platform import ENTRY_LEDGER, PLATFORM_NAMESPACE

FIELD_MANAGER = "radixfleet-quota"
TENANTS = Resource(labels.GROUP, API_VERSION, PLURAL, namespaced=False)

RULES: tuple[PolicyRule, ...] = (
    # kopf's event handlers watch all three; the adapters list them and write what is ours.
    TENANTS.rule(*READ),
    *KubeStatus.rules(TENANTS),
    INFERENCE_SERVICES.rule("list", "watch"),
    rule("", "resourcequotas", *READ, "create", "patch"),
    # API keys: one Secret at a time, by the name a Tenant gives (never listed), in its
    # namespace (radixfleet/render/tenant_access.py).
    rule("", "secrets", "get", scope=TENANT_NAMESPACES),
)


def _items(found: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = found.get("items", []) if isinstance(found, dict) else []
    return items


class KubeTenants:
    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.status = KubeStatus(api_client, TENANTS, field_manager=FIELD_MANAGER)

    def list(self) -> list[dict[str, Any]]:
        return _items(
            kube_call(
                "list tenants",
                lambda: self.api.list_cluster_custom_object(labels.GROUP, API_VERSION, PLURAL),
            )
        )

    def write_status(self, name: str, status: dict[str, Any]) -> None:
        self.status.replace(None, name, status)


class KubeResourceQuotas:
    def __init__(self, api_client: Any) -> None:
        self.api = client.CoreV1Api(api_client)
        self.serialize = api_client.sanitize_for_serialization

    def get(self, namespace: str) -> dict[str, Any] | None:
        found = absent_as_none(
            f"get resourcequota {namespace}/{QUOTA_NAME}",
            lambda: self.api.read_namespaced_resource_quota(QUOTA_NAME, namespace),
        )
        return None if found is None else dict(self.serialize(found))

    def set_hard(self, namespace: str, *, tenant: str, gpus: int) -> None:
        # The client serializes plain dicts as they are; its stubs only name the model class.
        body: Any = quota_manifest(namespace, tenant=tenant, gpus=gpus)
        if self.get(namespace) is None:
            kube_call(
                f"create resourcequota in {namespace}",
                lambda: self.api.create_namespaced_resource_quota(
                    namespace, body, field_manager=FIELD_MANAGER
                ),
            )
            return
        kube_call(
            f"patch resourcequota {namespace}/{QUOTA_NAME}",
            lambda: self.api.patch_namespaced_resource_quota(
                QUOTA_NAME, namespace, {"spec": body["spec"]}, field_manager=FIELD_MANAGER
            ),
        )


def quota_manifest(namespace: str, *, tenant: str, gpus: int) -> dict[str, Any]:
    """The ResourceQuota that keeps a namespace's running GPUs within its tenant's share."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": QUOTA_NAME,
            "namespace": namespace,
            "labels": {labels.TENANT: tenant, labels.MANAGED_BY: labels.MANAGER},
        },
        "spec": {"hard": {GPU_QUOTA_RESOURCE: str(gpus)}},
    }


class KubeSecrets:
    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def key(self, ref: SecretKeyRef) -> str | None:
        return read_secret_value(self.api_client, ref.namespace, ref.name, ref.key)


ENTRY_FIELD_MANAGER = "radixfleet-entry"


class KubeLedgerStore:
    """The entry replicas' debts (radixfleet/controllers/quota/carry.py) in one ConfigMap of
    radixfleet's namespace, a key per replica: each replica patches only its own key; a claim of
    others' keys carries the resourceVersion it read, so the API server refuses it (409) if anyone
    wrote since. The ConfigMap is rendered with the entry, so the entry needs no right to create
    one."""

    RULES: tuple[PolicyRule, ...] = (rule("", "configmaps", "get", "patch", scope=OWN_NAMESPACE),)

    def __init__(
        self, api_client: Any, *, namespace: str = PLATFORM_NAMESPACE, name: str = ENTRY_LEDGER
    ) -> None:
        self.api = client.CoreV1Api(api_client)
        self.namespace, self.name = namespace, name

    def read(self) -> Stored:
        read = kube_call(
            f"get configmap {self.namespace}/{self.name}",
            lambda: self.api.read_namespaced_config_map(self.name, self.namespace),
        )
        found: dict[str, Any] = self.api.api_client.sanitize_for_serialization(read)
        return Stored(found["metadata"]["resourceVersion"], dict(found.get("data") or {}))

    def claim(self, version: str, replicas: Sequence[str]) -> bool:
        body = {"metadata": {"resourceVersion": version}, "data": dict.fromkeys(replicas)}
        try:
            self._patch(f"claim {len(replicas)} entries of", body)
        except ConflictError:
            return False
        return True

    def write(self, replica: str, text: str | None) -> None:
        self._patch(f"write {replica}'s entry in", {"data": {replica: text}})

    def _patch(self, what: str, body: dict[str, Any]) -> None:
        kube_call(
            f"{what} configmap {self.namespace}/{self.name}",
            lambda: self.api.patch_namespaced_config_map(
                self.name, self.namespace, body, field_manager=ENTRY_FIELD_MANAGER
            ),
        )
