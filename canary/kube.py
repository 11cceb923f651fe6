"""The canary's Kubernetes ports (canary/ports.py) on the kubernetes client.

Traffic moves by a JSON patch whose `test` re-checks the canary revision in the same request;
policy status is replaced through the status subresource with the resourceVersion read, and a
409 is retried from a fresh read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from canary.ports import ConflictError, KubeError, StaleRevisionError, merge_rollout
from canary.spec import API_VERSION, PLURAL
from radixfleet.labels import GROUP

KSERVE_GROUP, KSERVE_VERSION, ISVC_PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
PERCENT_PATH = "/spec/predictor/canaryTrafficPercent"
CANARY_PATH = "/status/components/predictor/latestCreatedRevision"
FIELD_MANAGER = "radixfleet-canary"
CONFLICT_ATTEMPTS = 5

T = TypeVar("T")
log = logging.getLogger(__name__)


def kube_call(what: str, call: Callable[[], T]) -> T:
    """`call()`, with the client's ApiException turned into our KubeError family (every
    controller's Kubernetes adapter goes through this; 409 becomes ConflictError)."""
    try:
        return call()
    except ApiException as exc:
        kind = ConflictError if exc.status == 409 else KubeError
        raise kind(f"{what}: HTTP {exc.status} {_message(exc)}", status=exc.status) from exc


def as_dict(found: object) -> dict[str, Any]:
    """A CustomObjects API answer as the dict it is."""
    # The CustomObjects API is typed `object`; for JSON objects it returns dicts.
    assert isinstance(found, dict), type(found)
    return found


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message", exc.reason))
    except ValueError:
        return str(exc.reason)


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
    """CanaryPolicies; status through the status subresource with optimistic concurrency."""

    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                kube_call(
                    f"get canarypolicy {namespace}/{name}", lambda: self._get(namespace, name)
                )
            )
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    def write_rollout(self, namespace: str, name: str, rollout: dict[str, Any]) -> None:
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            policy = self.get(namespace, name)
            if policy is None:
                raise KubeError(f"canarypolicy {namespace}/{name} is gone", status=404)
            policy["status"] = merge_rollout(policy.get("status") or {}, rollout)
            try:
                kube_call(
                    f"write status of {namespace}/{name}", partial(self._replace_status, policy)
                )
                return
            except ConflictError:
                if attempt == CONFLICT_ATTEMPTS:
                    raise

    def annotate(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        kube_call(
            f"annotate canarypolicy {namespace}/{name}",
            lambda: self.api.patch_namespaced_custom_object(
                GROUP, API_VERSION, namespace, PLURAL, name, body, field_manager=FIELD_MANAGER
            ),
        )

    def _get(self, namespace: str, name: str) -> Any:
        return self.api.get_namespaced_custom_object(GROUP, API_VERSION, namespace, PLURAL, name)

    def _replace_status(self, policy: dict[str, Any]) -> Any:
        # The body carries metadata.resourceVersion, so a concurrent write answers 409.
        meta = policy["metadata"]
        return self.api.replace_namespaced_custom_object_status(
            GROUP, API_VERSION, meta["namespace"], PLURAL, meta["name"], policy,
            field_manager=FIELD_MANAGER,
        )  # fmt: skip


class KubeEvents:
    """core/v1 Events about an object, as `kubectl describe` shows them; best effort.

    `component` is the Event's `source.component` (the failover posts through this adapter too,
    under its own name). A refused or failed Event is logged and dropped, never raised: it is a
    report of something already done (status written, traffic moved), so failing the reconcile
    over it would only re-run a tick that has nothing left to do, and one InferenceService's lost
    Event would keep the policy's other InferenceServices from being reconciled that tick.
    """

    def __init__(
        self, api_client: Any, *, clock: Callable[[], datetime], component: str = FIELD_MANAGER
    ) -> None:
        self.api = client.CoreV1Api(api_client)
        self.clock = clock
        self.component = component

    def emit(
        self, *, involved: Mapping[str, Any], reason: str, message: str, warning: bool
    ) -> None:
        meta = involved["metadata"]
        now = self.clock()
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                generate_name=f"{meta['name']}.", namespace=meta["namespace"]
            ),
            involved_object=client.V1ObjectReference(
                api_version=involved.get("apiVersion"), kind=involved.get("kind"),
                name=meta["name"], namespace=meta["namespace"], uid=meta.get("uid"),
            ),
            reason=reason, message=message[:1024], type="Warning" if warning else "Normal",
            source=client.V1EventSource(component=self.component),
            first_timestamp=now, last_timestamp=now, count=1,
        )  # fmt: skip
        try:
            kube_call(
                f"event {reason} on {meta['namespace']}/{meta['name']}",
                lambda: self.api.create_namespaced_event(meta["namespace"], event),
            )
        except KubeError as error:
            log.warning("%s not posted: %s", reason, error)
