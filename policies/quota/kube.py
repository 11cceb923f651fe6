"""The quota controller's ports (policies/quota/ports.py) on the kubernetes client.

Tenant status is replaced through the status subresource with the resourceVersion just read,
and a 409 is retried from a fresh read: a merge patch could not remove a stale commitment.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from kubernetes import client

from canary.kube import kube_call
from policies.quota.ports import ConflictError, KubeError
from policies.quota.spec import API_VERSION, GPU_QUOTA_RESOURCE, PLURAL, QUOTA_NAME, SecretKeyRef
from radixfleet import labels

FIELD_MANAGER = "radixfleet-quota"
CONFLICT_ATTEMPTS = 5
KSERVE = ("serving.kserve.io", "v1beta1", "inferenceservices")

T = TypeVar("T")


def _absent(what: str, call: Callable[[], T]) -> T | None:
    """The call's answer, or None on 404."""
    try:
        return kube_call(what, call)
    except KubeError as error:
        if error.status == 404:
            return None
        raise


def _items(found: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = found.get("items", []) if isinstance(found, dict) else []
    return items


class KubeTenants:
    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)

    def list(self) -> list[dict[str, Any]]:
        return _items(
            kube_call(
                "list tenants",
                lambda: self.api.list_cluster_custom_object(labels.GROUP, API_VERSION, PLURAL),
            )
        )

    def write_status(self, name: str, status: dict[str, Any]) -> None:
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            tenant = _absent(f"get tenant {name}", lambda: self._get(name))
            if tenant is None:
                raise KubeError(f"tenant {name} is gone", status=404)
            tenant["status"] = status  # carries metadata.resourceVersion: a race answers 409
            try:
                kube_call(f"write status of tenant {name}", partial(self._replace, name, tenant))
                return
            except ConflictError:
                if attempt == CONFLICT_ATTEMPTS:
                    raise

    def _get(self, name: str) -> dict[str, Any]:
        found = self.api.get_cluster_custom_object(labels.GROUP, API_VERSION, PLURAL, name)
        assert isinstance(found, dict)
        return found

    def _replace(self, name: str, body: dict[str, Any]) -> Any:
        return self.api.replace_cluster_custom_object_status(
            labels.GROUP, API_VERSION, PLURAL, name, body, field_manager=FIELD_MANAGER
        )


class KubeInferenceServices:
    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)

    def everywhere(self) -> list[dict[str, Any]]:
        return _items(
            kube_call(
                "list inferenceservices", lambda: self.api.list_cluster_custom_object(*KSERVE)
            )
        )


class KubeResourceQuotas:
    def __init__(self, api_client: Any) -> None:
        self.api = client.CoreV1Api(api_client)
        self.serialize = api_client.sanitize_for_serialization

    def get(self, namespace: str) -> dict[str, Any] | None:
        found = _absent(
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
        self.api = client.CoreV1Api(api_client)

    def key(self, ref: SecretKeyRef) -> str | None:
        secret = _absent(
            f"get secret {ref}", lambda: self.api.read_namespaced_secret(ref.name, ref.namespace)
        )
        data = (getattr(secret, "data", None) or {}) if secret is not None else {}
        encoded = data.get(ref.key)
        if not encoded:
            return None
        try:
            return base64.b64decode(encoded).decode().strip() or None
        except (binascii.Error, UnicodeDecodeError):
            return None
