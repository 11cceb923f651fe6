"""The routers controller's adapters on the kubernetes client, and the RBAC they need.

Routers are applied server-side under the field manager `radixfleet-routers`, so the
controller owns exactly the fields it writes and a second apply of the same router is a no-op.
A router is parked by applying it again with zero replicas; nothing here deletes.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kubernetes import client

from radixfleet import dataplane, labels
from radixfleet.controllers.routers.decide import Existing, Key, RevisionRef
from radixfleet.controllers.routers.manifests import IMAGE_ANNOTATION, deployment, service
from radixfleet.controllers.routers.spec import COMPONENT, ROLE, Router
from radixfleet.kit.errors import ConflictError
from radixfleet.kit.kube import INFERENCE_SERVICES, Resource, kube_call
from radixfleet.kit.rbac import READ, TENANT_NAMESPACES, PolicyRule, rule
from radixfleet.platform import KSERVE_INFERENCESERVICE_LABEL

FIELD_MANAGER = "radixfleet-routers"
REVISIONS = Resource("serving.knative.dev", "v1", "revisions")
# The revisions KServe made (a router's owner must be one of them).
KSERVE_REVISIONS = "serving.kserve.io/inferenceservice"
KSERVE_LABEL = KSERVE_INFERENCESERVICE_LABEL  # on the Deployments of a Standard-mode predictor
SELECTOR = f"{COMPONENT}={ROLE},{labels.MANAGED_BY}={labels.MANAGER}"
APPLY = "application/apply-patch+yaml"  # JSON is YAML: the body goes as it is

RULES: tuple[PolicyRule, ...] = (
    # kopf's event handler watches InferenceServices; the controller lists and re-reads them.
    INFERENCE_SERVICES.rule(*READ),
    REVISIONS.rule("list"),  # their UIDs, for the owner references
    # (A Standard-mode model's head is a Deployment: its UID comes from the `deployments` list
    # below, across namespaces.)
    # A server-side apply is a patch, and needs `create` too when the object is new.
    # Only in tenant namespaces, where the models are; a router is named for its revision, so
    # no Role can name it ahead.
    rule("apps", "deployments", "list"),
    rule("apps", "deployments", "create", "patch", scope=TENANT_NAMESPACES, by_name=False),
    rule("", "services", "create", "patch", scope=TENANT_NAMESPACES, by_name=False),
    # The data plane's key: created once per namespace, never read back (radixfleet.dataplane).
    rule("", "secrets", "create", scope=TENANT_NAMESPACES),
)


class KubeRevisions:
    def __init__(self, api_client: Any) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.serialize = api_client.sanitize_for_serialization

    def listed(self) -> dict[Key, RevisionRef]:
        """(namespace, revision) -> UID and pool label of every revision KServe made, and of
        every Standard-mode head Deployment (what a router may be owned by)."""
        group, version, plural = REVISIONS.group, REVISIONS.version, REVISIONS.plural
        found = kube_call("list revisions", lambda: self.api.list_cluster_custom_object(
            group, version, plural, label_selector=KSERVE_REVISIONS,
        ))  # fmt: skip
        items = found.get("items", []) if isinstance(found, dict) else []
        revisions = {(i["metadata"]["namespace"], i["metadata"]["name"]): _ref(i) for i in items}
        return {**revisions, **self._heads()}

    def _heads(self) -> dict[Key, RevisionRef]:
        """KServe's raw predictor Deployments (a worker's too: no router ever names one)."""
        found = kube_call("list raw predictor deployments",
                          lambda: self.apps.list_deployment_for_all_namespaces(
                              label_selector=KSERVE_LABEL))  # fmt: skip
        items = self.serialize(found).get("items") or []
        return {(i["metadata"]["namespace"], i["metadata"]["name"]): _head_ref(i) for i in items}


def _ref(revision: dict[str, Any]) -> RevisionRef:
    meta, spec = revision["metadata"], revision.get("spec") or {}
    return RevisionRef(
        uid=meta["uid"],
        pooled=labels.POOL in (meta.get("labels") or {}),
        data_plane_key=dataplane.key_name(spec) or dataplane.KEY,
    )


def _head_ref(deployment: dict[str, Any]) -> RevisionRef:
    template = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    return RevisionRef(uid=deployment["metadata"]["uid"],
                       data_plane_key=dataplane.key_name(template) or dataplane.KEY)  # fmt: skip


class KubeRouters:
    def __init__(self, api_client: Any) -> None:
        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.serialize = api_client.sanitize_for_serialization

    def existing(self) -> dict[Key, Existing]:
        found = kube_call(
            "list router deployments",
            lambda: self.apps.list_deployment_for_all_namespaces(label_selector=SELECTOR),
        )
        items = self.serialize(found).get("items") or []
        listed = [(d.get("metadata") or {}, d.get("spec") or {}) for d in items]
        return {
            (meta["namespace"], meta["name"]): Existing(
                isvc=(meta.get("labels") or {}).get(labels.MODEL, ""),
                image=(meta.get("annotations") or {}).get(IMAGE_ANNOTATION, ""),
                replicas=int(spec.get("replicas", 1)),
                tokenizer=(meta.get("annotations") or {}).get(labels.TOKENIZER, ""),
                hub_token=(meta.get("annotations") or {}).get(labels.HF_TOKEN_SECRET, ""),
            )
            for meta, spec in listed
        }

    def apply(self, router: Router, *, image: str) -> None:
        where = f"{router.namespace}/{router.name}"
        kube_call(f"apply router deployment {where}", lambda: self.apps.patch_namespaced_deployment(
            router.name, router.namespace, deployment(router, image=image),
            field_manager=FIELD_MANAGER, force=True, _content_type=APPLY,
        ))  # fmt: skip
        kube_call(f"apply router service {where}", lambda: self.core.patch_namespaced_service(
            router.name, router.namespace, service(router, image=image),
            field_manager=FIELD_MANAGER, force=True, _content_type=APPLY,
        ))  # fmt: skip

    def ensure_key(self, namespace: str) -> None:
        """Create the data plane's key in `namespace`; one already there is kept as it is."""
        wanted = dataplane.secret(namespace)
        secret = client.V1Secret(
            metadata=client.V1ObjectMeta(**wanted["metadata"]),
            string_data=wanted["stringData"], type=wanted["type"],
        )  # fmt: skip
        with contextlib.suppress(ConflictError):  # it exists, which is all that was wanted
            kube_call(f"create secret {namespace}/{dataplane.SECRET}",
                      lambda: self.core.create_namespaced_secret(namespace, secret))  # fmt: skip

    def park(self, key: Key) -> None:
        """Zero replicas: the router stays, with its Service, until its revision is collected."""
        namespace, name = key
        kube_call(f"park router {namespace}/{name}", lambda: self.apps.patch_namespaced_deployment(
            name, namespace, {"spec": {"replicas": 0}}, field_manager=FIELD_MANAGER,
        ))  # fmt: skip
