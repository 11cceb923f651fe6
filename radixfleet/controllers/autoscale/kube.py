"""The autoscaler's Kubernetes ports (radixfleet/controllers/autoscale/ports.py) on the kubernetes
client.

Scale bounds go to the Revision and to its PodAutoscaler as merge patches of annotations (the
PodAutoscaler may be absent or unserved: Knative's own reconciler copies the Revision's
annotations there in current releases). Policy status goes through the kit's one status writer
(the resourceVersion read, re-read on a 409). `RULES` is every call below, as RBAC.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kubernetes import client

from radixfleet import dataplane, labels
from radixfleet.controllers.autoscale.knative import DELETION_COST, REVISION_LABEL
from radixfleet.controllers.autoscale.spec import API_VERSION, PLURAL
from radixfleet.controllers.autoscale.warming import WARMED
from radixfleet.kit.errors import KubeError
from radixfleet.kit.kube import (
    KubeEvents,
    KubeStatus,
    Resource,
    absent_as_none,
    as_dict,
    kube_call,
    read_secret_value,
)
from radixfleet.kit.rbac import KOPF_TIMER, TENANT_NAMESPACES, PolicyRule, rule
from radixfleet.labels import GROUP

KSERVE = Resource("serving.kserve.io", "v1beta1", "inferenceservices")
REVISIONS = Resource("serving.knative.dev", "v1", "revisions")
PODAUTOSCALERS = Resource("autoscaling.internal.knative.dev", "v1alpha1", "podautoscalers")
OURS = Resource(GROUP, API_VERSION, PLURAL)
FIELD_MANAGER = "radixfleet-autoscale"

RULES: tuple[PolicyRule, ...] = (
    KSERVE.rule("get"),
    REVISIONS.rule("get"),
    # A revision's scale bounds, on it and its PodAutoscaler, only in tenant namespaces, where
    # the models are; a revision is named per generation, so no Role can name it ahead.
    REVISIONS.rule("patch", scope=TENANT_NAMESPACES, by_name=False),
    PODAUTOSCALERS.rule("patch", scope=TENANT_NAMESPACES, by_name=False),
    rule("", "pods", "list"),
    # A pod's pool label and deletion cost, only in tenant namespaces, for any of their pods.
    rule("", "pods", "patch", scope=TENANT_NAMESPACES, by_name=False),
    # Pre-warming: the data plane's key of a tenant namespace, by its one name, to warm its
    # pods and ask the entry for their model's hottest prefixes
    # (radixfleet/controllers/autoscale/warming.py).
    rule("", "secrets", "get", scope=TENANT_NAMESPACES),
    OURS.rule(*KOPF_TIMER),  # kopf's timer on the policies
    *KubeStatus.rules(OURS),
    *KubeEvents.RULES,
)


def _get(api: client.CustomObjectsApi, kind: Resource, ns: str, name: str) -> Any:
    found = absent_as_none(
        f"get {kind.plural} {ns}/{name}",
        lambda: api.get_namespaced_custom_object(kind.group, kind.version, ns, kind.plural, name),
    )
    return None if found is None else as_dict(found)


def _annotate(
    api: client.CustomObjectsApi, kind: Resource, ns: str, name: str, annotations: dict[str, str]
) -> None:
    body = {"metadata": {"annotations": annotations}}
    kube_call(
        f"annotate {kind.plural} {ns}/{name}",
        lambda: api.patch_namespaced_custom_object(
            kind.group, kind.version, ns, kind.plural, name, body, field_manager=FIELD_MANAGER
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

    def set_pool(self, namespace: str, name: str, pool: str, note: str | None = None) -> None:
        body: dict[str, Any] = {"metadata": {"labels": {labels.POOL: pool}}}
        if note is not None:
            body["metadata"]["annotations"] = {WARMED: note}
        kube_call(
            f"set pool of {namespace}/{name}",
            lambda: self.api.patch_namespaced_pod(
                name, namespace, body, field_manager=FIELD_MANAGER
            ),
        )


class KubeDataPlaneKeys:
    """Each tenant namespace's data-plane key, read from its Secret (radixfleet.dataplane)."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def key(self, namespace: str, name: str = dataplane.KEY) -> str | None:
        return read_secret_value(self.api_client, namespace, dataplane.SECRET, name)


class HttpWarmUp:
    """A warm-up's calls: the region entry's hottest prefixes, a pod's KV size and prefills."""

    def __init__(self, entry_url: str, *, timeout_s: float = 10.0) -> None:
        self.entry_url = entry_url.rstrip("/")
        self.timeout_s = timeout_s

    def hottest(
        self, namespace: str, model: str, *, key: str, kv_blocks: int, kv_fraction: float,
        min_hits: float,
    ) -> list[str]:  # fmt: skip
        import requests

        answer = requests.get(
            f"{self.entry_url}/fleet/v1/prefixes/{namespace}/{model}",
            params={"kvBlocks": kv_blocks, "kvFraction": kv_fraction, "minHits": min_hits},
            headers=dataplane.bearer(key), timeout=self.timeout_s,
        )  # fmt: skip
        answer.raise_for_status()
        prefixes = answer.json().get("prefixes")
        return [p for p in prefixes if isinstance(p, str)] if isinstance(prefixes, list) else []

    def kv_tokens(self, pod_url: str, *, key: str) -> int:
        """The pod's KV cache in tokens, as SGLang's `/server_info` reports it."""
        import requests

        answer = requests.get(
            f"{pod_url}/server_info", headers=dataplane.bearer(key), timeout=self.timeout_s
        )
        answer.raise_for_status()
        return int(answer.json()["internal_states"][0]["max_total_num_tokens"])

    def prefill(self, pod_url: str, text: str, *, key: str, timeout_s: float) -> None:
        import requests

        body = {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
        answer = requests.post(
            f"{pod_url}/generate", json=body, headers=dataplane.bearer(key), timeout=timeout_s
        )
        answer.raise_for_status()


class KubeAutoscalePolicies:
    """AutoscalePolicies; status through the kit's status writer."""

    def __init__(self, api_client: Any) -> None:
        self.status = KubeStatus(api_client, OURS, field_manager=FIELD_MANAGER)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.status.get(namespace, name)

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.status.replace(namespace, name, status)


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
