"""The canary controller's Kubernetes ports and their implementation on the kubernetes client.

Three small ports: InferenceServices (read, move traffic), CanaryPolicies (read, write one
rollout's status, annotate commands) and Events. Errors keep the HTTP status: `ConflictError` (409,
re-read and retry), `StaleRevisionError` (the canary changed under us: drop the action), and
`KubeError.temporary` for what a later attempt can fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any, Protocol, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from canary.spec import API_VERSION, PLURAL, POLICY_ANNOTATION
from radixfleet.labels import GROUP

KSERVE_GROUP, KSERVE_VERSION, ISVC_PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
PERCENT_PATH = "/spec/predictor/canaryTrafficPercent"
CANARY_PATH = "/status/components/predictor/latestCreatedRevision"
FIELD_MANAGER = "radixfleet-canary"
CONFLICT_ATTEMPTS = 5
TEMPORARY_STATUSES = frozenset({429, 500, 502, 503, 504})

T = TypeVar("T")


class KubeError(Exception):
    """A Kubernetes API call failed; `status` is the HTTP status (None: no response)."""

    def __init__(self, message: str, *, status: int | None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def temporary(self) -> bool:
        return self.status is None or self.status in TEMPORARY_STATUSES


class ConflictError(KubeError):
    """409: the object changed since it was read; re-read and decide again."""


class StaleRevisionError(KubeError):
    """The InferenceService's latest revision is no longer the canary the action was for."""


class InferenceServices(Protocol):
    def in_namespace(self, namespace: str) -> list[dict[str, Any]]: ...

    def set_canary_percent(
        self, namespace: str, name: str, *, percent: int | None, canary_revision: str
    ) -> None:
        """Set canaryTrafficPercent (None removes it) only if `canary_revision` is still latest."""
        ...


class CanaryPolicies(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def write_rollout(self, namespace: str, name: str, rollout: dict[str, Any]) -> None:
        """Replace the policy's `status.rollouts` entry of `rollout["inferenceService"]`."""
        ...

    def annotate(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        """Set annotations on the policy; None removes one."""
        ...


class Events(Protocol):
    def emit(
        self, *, involved: Mapping[str, Any], reason: str, message: str, warning: bool
    ) -> None: ...


def policy_name(isvc: Mapping[str, Any]) -> str | None:
    """The CanaryPolicy an InferenceService names in its annotation, if any."""
    annotations = isvc.get("metadata", {}).get("annotations") or {}
    name = annotations.get(POLICY_ANNOTATION)
    return str(name) if name else None


def merge_rollout(status: Mapping[str, Any], rollout: dict[str, Any]) -> dict[str, Any]:
    """A policy status with `rollout` in place of its InferenceService's entry."""
    key = rollout["inferenceService"]
    others = [r for r in status.get("rollouts", []) if r.get("inferenceService") != key]
    rollouts = sorted([*others, rollout], key=lambda r: str(r["inferenceService"]))
    active = sum(r.get("phase") not in ("Promoted", "RolledBack") for r in rollouts)
    return {**status, "rollouts": rollouts, "activeRollouts": active}


def _call(what: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except ApiException as exc:
        kind = ConflictError if exc.status == 409 else KubeError
        raise kind(f"{what}: HTTP {exc.status} {_message(exc)}", status=exc.status) from exc


def _as_dict(found: object) -> dict[str, Any]:
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
        found = _call(
            f"list inferenceservices in {namespace}",
            lambda: self.api.list_namespaced_custom_object(
                KSERVE_GROUP, KSERVE_VERSION, namespace, ISVC_PLURAL
            ),
        )
        items: list[dict[str, Any]] = _as_dict(found).get("items", [])
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
            _call(f"patch {namespace}/{name}", lambda: self._patch(namespace, name, [test, move]))
        except KubeError as error:
            if error.status == 422 and "test" in str(error):
                raise StaleRevisionError(str(error), status=error.status) from error
            raise

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
                _call(f"get canarypolicy {namespace}/{name}", lambda: self._get(namespace, name))
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
                _call(f"write status of {namespace}/{name}", partial(self._replace_status, policy))
                return
            except ConflictError:
                if attempt == CONFLICT_ATTEMPTS:
                    raise

    def annotate(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        _call(
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
    """core/v1 Events about an InferenceService, as `kubectl describe isvc` shows them."""

    def __init__(self, api_client: Any, *, clock: Callable[[], datetime]) -> None:
        self.api = client.CoreV1Api(api_client)
        self.clock = clock

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
            source=client.V1EventSource(component=FIELD_MANAGER),
            first_timestamp=now, last_timestamp=now, count=1,
        )  # fmt: skip
        _call(
            f"event on {meta['namespace']}/{meta['name']}",
            lambda: self.api.create_namespaced_event(meta["namespace"], event),
        )
