"""The autoscaler's Kubernetes ports (policies/autoscale/ports.py) on the kubernetes client.

Scale bounds go to the Revision and to its PodAutoscaler as merge patches of annotations (the
PodAutoscaler may be absent or unserved: Knative's own reconciler copies the Revision's
annotations there in current releases). Policy status is replaced through the status
subresource with the resourceVersion read, and a 409 is retried from a fresh read.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any

from kubernetes import client

from canary.kube import as_dict, kube_call
from policies.autoscale.knative import DELETION_COST, REVISION_LABEL
from policies.autoscale.ports import ConflictError, KubeError
from policies.autoscale.spec import API_VERSION, PLURAL
from radixfleet.labels import GROUP

KSERVE = ("serving.kserve.io", "v1beta1", "inferenceservices")
REVISIONS = ("serving.knative.dev", "v1", "revisions")
PODAUTOSCALERS = ("autoscaling.internal.knative.dev", "v1alpha1", "podautoscalers")
OURS = (GROUP, API_VERSION, PLURAL)
FIELD_MANAGER = "radixfleet-autoscale"
CONFLICT_ATTEMPTS = 5


def _get(api: client.CustomObjectsApi, kind: tuple[str, str, str], ns: str, name: str) -> Any:
    group, version, plural = kind
    try:
        found = kube_call(
            f"get {plural} {ns}/{name}",
            lambda: api.get_namespaced_custom_object(group, version, ns, plural, name),
        )
    except KubeError as error:
        if error.status == 404:
            return None
        raise
    return as_dict(found)


def _annotate(
    api: client.CustomObjectsApi, kind: tuple[str, str, str], ns: str, name: str,
    annotations: dict[str, str],
) -> None:  # fmt: skip
    group, version, plural = kind
    body = {"metadata": {"annotations": annotations}}
    kube_call(
        f"annotate {plural} {ns}/{name}",
        lambda: api.patch_namespaced_custom_object(
            group, version, ns, plural, name, body, field_manager=FIELD_MANAGER
        ),
    )


class KubeInferenceServices:
    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = _get(self.api, KSERVE, namespace, name)
        return found


class KubeRevisions:
    """Knative Revisions, and the PodAutoscaler of the same name."""

    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = _get(self.api, REVISIONS, namespace, name)
        return found

    def set_scale(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        _annotate(self.api, REVISIONS, namespace, name, annotations)
        try:
            _annotate(self.api, PODAUTOSCALERS, namespace, name, annotations)
        except KubeError as error:
            if error.status != 404:  # no PA (yet), or its kind is not served: the Revision's do
                raise


class KubePods:
    def __init__(self, api_client: Any) -> None:
        self.api = client.CoreV1Api(api_client)
        self.serializer = client.ApiClient() if api_client is None else api_client

    def of_revision(self, namespace: str, revision: str) -> list[dict[str, Any]]:
        found = kube_call(
            f"list pods of {namespace}/{revision}",
            lambda: self.api.list_namespaced_pod(
                namespace, label_selector=f"{REVISION_LABEL}={revision}"
            ),
        )
        items: list[dict[str, Any]] = self.serializer.sanitize_for_serialization(found)["items"]
        return items

    def set_deletion_cost(self, namespace: str, name: str, cost: int) -> None:
        body = {"metadata": {"annotations": {DELETION_COST: str(cost)}}}
        kube_call(
            f"set deletion cost of {namespace}/{name}",
            lambda: self.api.patch_namespaced_pod(
                name, namespace, body, field_manager=FIELD_MANAGER
            ),
        )


class KubeAutoscalePolicies:
    """AutoscalePolicies' status through the status subresource, with optimistic concurrency."""

    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = _get(self.api, OURS, namespace, name)
        return found

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            policy = self.get(namespace, name)
            if policy is None:
                raise KubeError(f"autoscalepolicy {namespace}/{name} is gone", status=404)
            policy["status"] = status
            try:
                kube_call(f"write status of {namespace}/{name}", partial(self._replace, policy))
                return
            except ConflictError:
                if attempt == CONFLICT_ATTEMPTS:
                    raise

    def _replace(self, policy: dict[str, Any]) -> Any:
        # The body carries metadata.resourceVersion, so a concurrent write answers 409.
        meta = policy["metadata"]
        return self.api.replace_namespaced_custom_object_status(
            GROUP, API_VERSION, meta["namespace"], PLURAL, meta["name"], policy,
            field_manager=FIELD_MANAGER,
        )  # fmt: skip


class HttpWaker:
    """Wakes a revision with one GET of the InferenceService's health path through its URL."""

    def __init__(self, *, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s

    def wake(self, url: str) -> None:
        import requests

        # The answer does not matter (it may time out while the pod starts): the activator has
        # counted the request and asked the autoscaler for a pod.
        with contextlib.suppress(requests.RequestException):
            requests.get(url.rstrip("/") + "/health", timeout=self.timeout_s)
