"""The Kubernetes side every controller shares: credentials, calls, the status writer, Events.

`kube_call` turns the client's ApiException into the kit's `KubeError` family (status and
Retry-After kept; 409 becomes `ConflictError`). `KubeStatus` is the one status writer: it reads
the object, changes its status, and replaces it through the status subresource with the
resourceVersion it read, so a concurrent write answers 409; then it re-reads and tries again.
`KubeEvents` posts core/v1 Events. Each class declares the RBAC rules its calls need.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from radixfleet.kit.errors import CONFLICT, FORBIDDEN, ConflictError, KubeError
from radixfleet.kit.rbac import CLUSTER, PolicyRule, rule

T = TypeVar("T")
log = logging.getLogger(__name__)

# A status write that keeps meeting newer versions gives up after this many reads; kopf then
# retries the whole tick (a 409 is temporary).
CONFLICT_ATTEMPTS = 5


def api_client() -> Any:
    """An ApiClient on the in-cluster service account, else on the local kubeconfig."""
    from kubernetes import config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


def keep_kopf_state_in_annotations(settings: kopf.OperatorSettings, *, prefix: str) -> None:
    """kopf's progress and diff-base in annotations under `prefix`, never in our status."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=prefix)


def kube_call(what: str, call: Callable[[], T]) -> T:
    """`call()`, with the client's ApiException turned into the KubeError family."""
    try:
        return call()
    except ApiException as exc:
        kind = ConflictError if exc.status == CONFLICT else KubeError
        message = f"{what}: HTTP {exc.status} {_message(exc)}"
        raise kind(message, status=exc.status, retry_after=_retry_after(exc)) from exc


def absent_as_none(what: str, call: Callable[[], T]) -> T | None:
    """The call's answer, or None on 404."""
    try:
        return kube_call(what, call)
    except KubeError as error:
        if error.status == 404:
            return None
        raise


def read_secret_value(api_client: Any, namespace: str, name: str, key: str) -> str | None:
    """One value of a Secret, decoded and stripped; None when the Secret, the key or a
    readable value is missing, or when radixfleet may not read it (the caller names the key
    it wants)."""
    return read_secret_values(api_client, namespace, name).get(key)


def read_secret_values(api_client: Any, namespace: str, name: str) -> dict[str, str]:
    """Every readable value of a Secret, decoded and stripped, by key; {} when the Secret is
    missing or radixfleet may not read it (a value that is empty or not text is left out)."""
    core = client.CoreV1Api(api_client)
    what = f"get secret {namespace}/{name}"
    try:
        found = absent_as_none(what, lambda: core.read_namespaced_secret(name, namespace))
    except KubeError as error:
        if error.status != FORBIDDEN:
            raise
        # Not ours to read: reads are held to the Secrets a tenant namespace's Role names
        # (radixfleet/render/tenant_access.py). The caller sees a missing key, as it should.
        log.warning("%s (not named in the namespace's secret access)", error)
        return {}
    decoded = {k: _decoded(v) for k, v in (getattr(found, "data", None) or {}).items()}
    return {k: v for k, v in decoded.items() if v}


def _decoded(encoded: str | None) -> str | None:
    try:
        return base64.b64decode(encoded or "").decode().strip() or None
    except (binascii.Error, UnicodeDecodeError):
        return None


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


def _retry_after(exc: ApiException) -> float | None:
    value = (exc.headers or {}).get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Resource:
    """A custom resource kind: where the CustomObjects API finds it."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    def rule(
        self, *verbs: str, subresource: str = "", scope: str = CLUSTER, by_name: bool = True
    ) -> PolicyRule:
        """A rule for `verbs` on this resource (or on its `subresource`), granted in `scope`
        (radixfleet.kit.rbac)."""
        resources = f"{self.plural}/{subresource}" if subresource else self.plural
        return rule(self.group, resources, *verbs, scope=scope, by_name=by_name)


class KubeStatus:
    """The one status writer: read, change the status, replace it; re-read on a 409."""

    def __init__(self, api_client: Any, resource: Resource, *, field_manager: str) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.resource = resource
        self.field_manager = field_manager

    @staticmethod
    def rules(resource: Resource) -> tuple[PolicyRule, ...]:
        """What `get` and `update` call."""
        return (resource.rule("get"), resource.rule("update", subresource="status"))

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, None when there is none."""
        found = absent_as_none(
            f"get {self._what(namespace, name)}", partial(self._get, namespace, name)
        )
        return None if found is None else as_dict(found)

    def replace(self, namespace: str | None, name: str, status: Mapping[str, Any]) -> None:
        """Replace the whole status."""
        self.update(namespace, name, lambda _: dict(status))

    def update(
        self,
        namespace: str | None,
        name: str,
        change: Callable[[Mapping[str, Any]], dict[str, Any]],
    ) -> None:
        """Write `change(current status)`, from a fresh read after every 409."""
        what = self._what(namespace, name)
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            body = self.get(namespace, name)
            if body is None:
                raise KubeError(f"{what} is gone", status=404)
            body["status"] = change(body.get("status") or {})
            try:
                kube_call(f"write status of {what}", partial(self._replace, body))
                return
            except ConflictError:
                if attempt == CONFLICT_ATTEMPTS:
                    raise

    def _what(self, namespace: str | None, name: str) -> str:
        return (
            f"{self.resource.plural} {namespace}/{name}"
            if namespace
            else f"{self.resource.plural} {name}"
        )

    def _get(self, namespace: str | None, name: str) -> Any:
        r = self.resource
        if namespace is None:
            return self.api.get_cluster_custom_object(r.group, r.version, r.plural, name)
        return self.api.get_namespaced_custom_object(r.group, r.version, namespace, r.plural, name)

    def _replace(self, body: dict[str, Any]) -> Any:
        # The body carries metadata.resourceVersion, so a concurrent write answers 409.
        r, meta = self.resource, body["metadata"]
        if not r.namespaced:
            return self.api.replace_cluster_custom_object_status(
                r.group, r.version, r.plural, meta["name"], body, field_manager=self.field_manager
            )
        return self.api.replace_namespaced_custom_object_status(
            r.group, r.version, meta["namespace"], r.plural, meta["name"], body,
            field_manager=self.field_manager,
        )  # fmt: skip


class KubeEvents:
    """core/v1 Events about an object, as `kubectl describe` shows them; best effort.

    `component` is the Event's `source.component` (each controller posts under its own name).
    A refused or failed Event is logged and dropped, never raised: it is a report of something
    already done (status written, traffic moved), so failing the reconcile over it would only
    re-run a tick that has nothing left to do, and one object's lost Event would keep the
    policy's other objects from being reconciled that tick.
    """

    RULES: tuple[PolicyRule, ...] = (rule("", "events", "create"),)

    def __init__(self, api_client: Any, *, clock: Callable[[], datetime], component: str) -> None:
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


#: KServe's InferenceServices, as every controller and the region entry read them.
INFERENCE_SERVICES = Resource("serving.kserve.io", "v1beta1", "inferenceservices")


def list_everywhere(api: client.CustomObjectsApi, resource: Resource) -> list[dict[str, Any]]:
    """Every object of a custom resource, in every namespace (list on `resource`)."""
    found = kube_call(
        f"list {resource.plural}",
        lambda: api.list_cluster_custom_object(resource.group, resource.version, resource.plural),
    )
    return list(found.get("items", [])) if isinstance(found, dict) else []


class KubeInferenceServices:
    """Every InferenceService in the cluster, and one re-read: list (and get) on
    `INFERENCE_SERVICES`, declared in the RULES of each module that uses this."""

    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)

    def everywhere(self) -> list[dict[str, Any]]:
        return list_everywhere(self.api, INFERENCE_SERVICES)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        r = INFERENCE_SERVICES
        found = absent_as_none(
            f"get inferenceservice {namespace}/{name}",
            lambda: self.api.get_namespaced_custom_object(
                r.group, r.version, namespace, r.plural, name
            ),
        )
        return found if isinstance(found, dict) else None
