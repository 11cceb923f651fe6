"""The canary's Kubernetes ports (canary/ports.py) on the kubernetes client, and their RBAC.

Traffic moves by a JSON patch whose `test` re-checks the canary revision in the same request;
policy status goes through the kit's one status writer (`radixfleet.kit.kube.KubeStatus`: the
resourceVersion read, re-read on a 409). `RULES` is every call below, as RBAC.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client

from canary.ports import StaleRevisionError, merge_rollout
from canary.spec import API_VERSION, PLURAL
from radixfleet.kit.errors import KubeError
from radixfleet.kit.kube import KubeEvents, KubeStatus, Resource, as_dict, kube_call
from radixfleet.kit.rbac import KOPF_TIMER, PolicyRule
from radixfleet.labels import GROUP

KSERVE_GROUP, KSERVE_VERSION, ISVC_PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
PERCENT_PATH = "/spec/predictor/canaryTrafficPercent"
CANARY_PATH = "/status/components/predictor/latestCreatedRevision"
FIELD_MANAGER = "radixfleet-canary"
ISVCS = Resource(KSERVE_GROUP, KSERVE_VERSION, ISVC_PLURAL)
POLICIES = Resource(GROUP, API_VERSION, PLURAL)

RULES: tuple[PolicyRule, ...] = (
    ISVCS.rule("get", "list", "patch"),
    # kopf's timer watches the policies; commands are annotations (patch) on them.
    POLICIES.rule(*KOPF_TIMER),
    *KubeStatus.rules(POLICIES),
    *KubeEvents.RULES,
)


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
