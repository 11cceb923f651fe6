"""The canary's Kubernetes ports (radixfleet/controllers/canary/ports.py) on the kubernetes client,
and their RBAC.

Traffic moves by a JSON patch whose `test` re-checks the canary revision in the same request;
policy status goes through the kit's one status writer (`radixfleet.kit.kube.KubeStatus`: the
resourceVersion read, re-read on a 409). A baseline is the stable revision's predictor pods
relabelled (`KubeBaselines`; which ones, `radixfleet/controllers/canary/baseline.py`). `RULES` is
every call below, as RBAC.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client

from radixfleet.controllers.canary import baseline
from radixfleet.controllers.canary.ports import StaleRevisionError, merge_rollout
from radixfleet.controllers.canary.spec import API_VERSION, PLURAL
from radixfleet.kit.errors import KubeError
from radixfleet.kit.kube import KubeEvents, KubeStatus, Resource, as_dict, kube_call
from radixfleet.kit.rbac import KOPF_TIMER, TENANT_NAMESPACES, PolicyRule, rule
from radixfleet.labels import BASELINE_POOL, GROUP, POOL

KSERVE_GROUP, KSERVE_VERSION, ISVC_PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
PERCENT_PATH = "/spec/predictor/canaryTrafficPercent"
CANARY_PATH = "/status/components/predictor/latestCreatedRevision"
FIELD_MANAGER = "radixfleet-canary"
ISVCS = Resource(KSERVE_GROUP, KSERVE_VERSION, ISVC_PLURAL)
POLICIES = Resource(GROUP, API_VERSION, PLURAL)

RULES: tuple[PolicyRule, ...] = (
    ISVCS.rule("get", "list"),
    # A rollout's traffic step, only in tenant namespaces, where the models are.
    ISVCS.rule("patch", scope=TENANT_NAMESPACES, by_name=False),
    # kopf's timer watches the policies; commands are annotations (patch) on them.
    POLICIES.rule(*KOPF_TIMER),
    *KubeStatus.rules(POLICIES),
    *KubeEvents.RULES,
    rule("", "pods", "list"),
    # A baseline: the stable revision's pods' pool label, only in tenant namespaces.
    rule("", "pods", "patch", scope=TENANT_NAMESPACES, by_name=False),
)
ISVC_LABEL = "serving.kserve.io/inferenceservice"
REVISION_LABEL = "serving.knative.dev/revision"


class KubeInferenceServices:
    """InferenceServices through the CustomObjects API."""

    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        found = kube_call(
            f"list inferenceservices in {namespace}",
            lambda: self.api.list_namespaced_custom_object(
                KSERVE_GROUP, KSERVE_VERSION, namespace, ISVC_PLURAL
            ),
        )
        items: list[dict[str, Any]] = as_dict(found).get("items", [])
        return items

    def set_canary_percent(
        self, namespace: str, name: str, *, percent: int | None, canary_revision: str
    ) -> None:
        # A JSON patch whose `test` makes the re-check and the write one atomic step: if KServe
        # created a newer revision meanwhile, nothing is written.
        test = {"op": "test", "path": CANARY_PATH, "value": canary_revision}
        move = (
            {"op": "remove", "path": PERCENT_PATH}
            if percent is None
            else {"op": "add", "path": PERCENT_PATH, "value": percent}
        )
        try:
            kube_call(
                f"patch {namespace}/{name}", lambda: self._patch(namespace, name, [test, move])
            )
        except KubeError as error:
            # A failed `test` answers a bare 422 "Invalid"; read the object to tell it apart
            # from a refused value.
            if error.status == 422 and self._latest(namespace, name) != canary_revision:
                raise StaleRevisionError(f"{name}: the canary is no longer {canary_revision}",
                                         status=422) from error  # fmt: skip
            raise

    def _latest(self, namespace: str, name: str) -> str | None:
        isvc = as_dict(
            kube_call(
                f"get {namespace}/{name}",
                lambda: self.api.get_namespaced_custom_object(
                    KSERVE_GROUP, KSERVE_VERSION, namespace, ISVC_PLURAL, name
                ),
            )
        )
        predictor = isvc.get("status", {}).get("components", {}).get("predictor", {})
        latest = predictor.get("latestCreatedRevision")
        return str(latest) if latest else None

    def _patch(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> Any:
        return self.api.patch_namespaced_custom_object(
            KSERVE_GROUP, KSERVE_VERSION, namespace, ISVC_PLURAL, name, ops,
            field_manager=FIELD_MANAGER, _content_type="application/json-patch+json",
        )  # fmt: skip


class KubeCanaryPolicies:
    """CanaryPolicies; status through the kit's status writer."""

    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.status = KubeStatus(api_client, POLICIES, field_manager=FIELD_MANAGER)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.status.get(namespace, name)

    def write_rollout(
        self, namespace: str, name: str, rollout: dict[str, Any], *, generation: int | None = None
    ) -> None:
        self.status.update(
            namespace, name, lambda status: merge_rollout(status, rollout, generation)
        )

    def annotate(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        kube_call(
            f"annotate canarypolicy {namespace}/{name}",
            lambda: self.api.patch_namespaced_custom_object(
                GROUP, API_VERSION, namespace, PLURAL, name, body, field_manager=FIELD_MANAGER
            ),
        )


class KubeBaselines:
    """The Baselines port on the predictor pods' `radixfleet.io/pool` label."""

    def __init__(self, api_client: Any) -> None:
        self.api = client.CoreV1Api(api_client)
        self.serializer = client.ApiClient() if api_client is None else api_client

    def ensure(
        self, namespace: str, name: str, *, stable_revision: str, canary_revision: str
    ) -> int | None:
        selector = f"{REVISION_LABEL} in ({stable_revision},{canary_revision})"
        carving = baseline.carve(
            self._pods(namespace, selector), stable=stable_revision, canary=canary_revision
        )
        self._relabel(namespace, carving.moves)
        return carving.ready if carving.possible else None

    def release(self, namespace: str, name: str) -> None:
        selector = f"{ISVC_LABEL}={name},{POOL}={BASELINE_POOL}"
        self._relabel(namespace, baseline.release(self._pods(namespace, selector)))

    def _pods(self, namespace: str, selector: str) -> list[baseline.Pod]:
        found = kube_call(
            f"list pods of {namespace} ({selector})",
            lambda: self.api.list_namespaced_pod(namespace, label_selector=selector),
        )
        items = self.serializer.sanitize_for_serialization(found)["items"]
        return [_pod(item) for item in items]

    def _relabel(self, namespace: str, moves: tuple[tuple[str, str], ...]) -> None:
        for pod, pool in moves:
            try:
                self._set_pool(namespace, pod, pool)
            except KubeError as error:
                if error.status != 404:  # a pod gone since the list: the next tick sees it
                    raise

    def _set_pool(self, namespace: str, pod: str, pool: str) -> None:
        body = {"metadata": {"labels": {POOL: pool}}}
        kube_call(
            f"set pool of {namespace}/{pod}",
            lambda: self.api.patch_namespaced_pod(
                pod, namespace, body, field_manager=FIELD_MANAGER
            ),
        )


def _pod(item: Mapping[str, Any]) -> baseline.Pod:
    meta, status = item.get("metadata") or {}, item.get("status") or {}
    labels = meta.get("labels") or {}
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return baseline.Pod(
        name=meta.get("name", ""),
        revision=labels.get(REVISION_LABEL, ""),
        pool=labels.get(POOL, ""),
        ready=ready and not meta.get("deletionTimestamp"),
    )
