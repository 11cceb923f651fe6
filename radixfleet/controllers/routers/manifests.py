"""A router's Deployment and Service as manifests: pure data, applied server-side by kube.py.

The Knative Revision owns both (an owner reference without `blockOwnerDeletion`, which would
need the right to update the revision's finalizers), so Kubernetes' garbage collector removes a
router with its revision, and with its model; a Standard-mode model's head Deployment owns its
router the same way, and a prefill/decode model's decode InferenceService its PD router. The
pod runs smg as the router service account of its namespace, which may only read pods there
(rendered with the catalog), non-root on a read-only root file system.
"""

from __future__ import annotations

from typing import Any

from radixfleet import dataplane, labels
from radixfleet.controllers.routers import spec
from radixfleet.controllers.routers.spec import ROUTES_FOR, Router

Manifest = dict[str, Any]
IMAGE_ANNOTATION = f"{labels.GROUP}/router-image"
# smg drains streams for up to its grace period on SIGTERM; the pod waits a little longer.
DRAIN_SECONDS = 60
# Ready as soon as smg serves: with no worker yet it answers 503 `no_available_workers`, and
# the entry then sends the request the Knative way (which wakes the revision).
LIVENESS = {"path": "/liveness", "port": "http"}
REVISION_OWNER = {"apiVersion": "serving.knative.dev/v1", "kind": "Revision"}
HEAD_OWNER = {"apiVersion": "apps/v1", "kind": "Deployment"}  # a Standard-mode model's head
# A prefill/decode model's router: its decode InferenceService.
ISVC_OWNER = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService"}


def router_labels(router: Router) -> dict[str, str]:
    """The labels of a router's objects and pods (never Knative's or KServe's: smg's own pod
    discovery and the PodMonitors must not take a router for a predictor)."""
    return {
        "app.kubernetes.io/name": "radixfleet-router",
        spec.COMPONENT: spec.ROLE,
        ROUTES_FOR: router.routes_for,
        labels.MODEL: router.isvc,
        labels.TENANT: router.tenant,
        labels.MANAGED_BY: labels.MANAGER,
    }


def _meta(router: Router, image: str) -> Manifest:
    return {
        "name": router.name,
        "namespace": router.namespace,
        "labels": router_labels(router),
        "annotations": {IMAGE_ANNOTATION: image,
                        **({labels.TOKENIZER: router.tokenizer} if router.tokenizer else {}),
                        **({labels.HF_TOKEN_SECRET: router.hub_token} if router.hub_token
                           else {})},
        "ownerReferences": [_owner(router)],
    }  # fmt: skip


def _owner(router: Router) -> Manifest:
    if router.pd:
        return {**ISVC_OWNER, "name": router.isvc, "uid": router.revision_uid}
    kind = HEAD_OWNER if router.standard else REVISION_OWNER
    return {**kind, "name": router.revision, "uid": router.revision_uid}


def deployment(router: Router, *, image: str, replicas: int = 1) -> Manifest:
    """One smg replica for the revision (its prefix tree is the routing state; one tree), or
    none for a parked router."""
    selector = {ROUTES_FOR: router.routes_for, spec.COMPONENT: spec.ROLE}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(router, image),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": router_labels(router)},
                "spec": _pod(router, image),
            },
        },
    }


def _pod(router: Router, image: str) -> Manifest:
    pod = _smg_pod(router, image)
    if router.tokenizer.startswith("hf://"):
        # smg fetches the tokenizer's files into its Hugging Face cache, under HOME (/tmp): the
        # one thing it writes, on a read-only root file system.
        pod["volumes"] = [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]
        pod["containers"][0]["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    return pod


def _smg_pod(router: Router, image: str) -> Manifest:
    return {
        "serviceAccountName": spec.SERVICE_ACCOUNT,
        "terminationGracePeriodSeconds": DRAIN_SECONDS,
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{
            "name": "smg",
            "image": image,
            "args": spec.smg_args(router),
            "env": [dataplane.env_var(router.data_plane_key), *hub_token_env(router.hub_token)],
            "ports": [
                {"name": "http", "containerPort": dataplane.ROUTER_PORT},
                {"name": "metrics", "containerPort": dataplane.ROUTER_METRICS_PORT},
            ],
            "readinessProbe": {"httpGet": LIVENESS, "periodSeconds": 2},
            "livenessProbe": {"httpGet": LIVENESS, "periodSeconds": 10},
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                          "limits": {"memory": "512Mi"}},
            "securityContext": {
                "runAsNonRoot": True, "readOnlyRootFilesystem": True,
                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            },
        }],
    }  # fmt: skip


def hub_token_env(ref: str) -> list[Manifest]:
    """HF_TOKEN from `SECRET/KEY`, by reference (the value is in no manifest): smg fetches a
    gated repository's tokenizer with it."""
    if not ref:
        return []
    name, _, key = ref.partition("/")
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}]


def service(router: Router, *, image: str) -> Manifest:
    """`<revision>-router:8000`, where the region entry sends the revision's requests."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(router, image),
        "spec": {
            "selector": {ROUTES_FOR: router.routes_for, spec.COMPONENT: spec.ROLE},
            "ports": [{"name": "http", "port": dataplane.ROUTER_PORT, "targetPort": "http"}],
        },
    }


def access(namespace: str) -> list[Manifest]:
    """The router service account of a tenant namespace, allowed to read its pods (smg's
    discovery) and nothing else; rendered with the catalog for every tenant namespace."""
    meta = {"namespace": namespace, "labels": {labels.MANAGED_BY: labels.MANAGER}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": spec.SERVICE_ACCOUNT, **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": spec.SERVICE_ACCOUNT, **meta},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": spec.SERVICE_ACCOUNT, **meta},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": spec.SERVICE_ACCOUNT},
         "subjects": [{"kind": "ServiceAccount", "name": spec.SERVICE_ACCOUNT,
                       "namespace": namespace}]},
    ]  # fmt: skip
