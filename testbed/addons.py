"""The objects that install KServe and Knative Serving in the test cluster, as plain dicts.

The upstream install YAML is vendored under ``testbed/addons/`` (see its ``PROVENANCE.md``):
KServe v0.20.0's ``config/overlays/standalone/kserve`` rendered by kustomize, and Knative Serving
1.21.1's ``config/core`` with the CRDs it links from knative.dev/networking and knative.dev/caching.
:func:`render_addons` changes only what this cluster needs changed:

- every image is one the caller built here (``images``), pulled ``IfNotPresent`` (no registry can
  be reached; images are imported into containerd), and every image nobody built points at a
  ``localhost/`` name, so that a pod needing one fails to start instead of reaching a registry;
- KServe's webhook certificate is made here (no cert-manager): a CA and a serving certificate in
  the Secret the manager mounts, the CA in every webhook's ``caBundle``;
- KServe's metrics proxy sidecar (kube-rbac-proxy, an image from a registry) is dropped; the
  manager serves metrics itself, as upstream's ``manager_prometheus_metrics_patch.yaml`` does;
- KServe's ``inferenceservice-config`` runs without Istio: no Ingress, no VirtualService;
- Knative skips tag-to-digest resolution for ``localhost/`` images (it would ask a registry).

Knative's webhook makes its own certificate: it writes the ``webhook-certs`` Secret and sets the
``caBundle`` of its webhook configurations itself (knative.dev/pkg ``webhook/certificates``).

What the images must hold: KServe's Deployment runs ``/manager``; Knative's Deployments (and the
queue-proxy sidecar Knative adds to each revision) set no command, so each Knative image's
entrypoint must be its binary. All run with ``runAsNonRoot: true`` and no ``runAsUser``, so each
image must name a numeric non-root user (e.g. ``USER 65532``), or the kubelet refuses to start it.
"""

from __future__ import annotations

import base64
import copy
import datetime
import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from testbed.webhook_tls import WebhookTLS, make_webhook_tls

Obj = dict[str, Any]
Mode = Literal["Standard", "Knative"]

HERE = Path(__file__).resolve().parent / "addons"
KSERVE_VERSION = "v0.20.0"
KNATIVE_SERVING_VERSION = "v0.48.1"  # Knative Serving 1.21.1

KSERVE_NAMESPACE = "kserve"
KSERVE_WEBHOOK_SERVICE = "kserve-webhook-server-service"
KSERVE_WEBHOOK_SECRET = "kserve-webhook-server-cert"  # the Secret the manager Deployment mounts
KSERVE_MANAGER = "kserve-manager"
# KServe images the cluster does not need (request logger and batcher, InferenceGraph router,
# model download): pods that would use one fail visibly unless the caller passes it.
KSERVE_STORAGE_INITIALIZER = "kserve-storage-initializer"
KSERVE_OPTIONAL = ("kserve-agent", "kserve-router", KSERVE_STORAGE_INITIALIZER)
# KServe's local model cache: its CRDs go with KServe (the manager's webhook lists the caches of
# every InferenceService it admits); its controller, webhook and node agent are installed apart
# (`local_model_objects`), by the tests that use them.
LOCALMODEL_FILE = "kserve-localmodel.yaml"
LOCALMODEL_CONTROLLER = "kserve-localmodel-controller"  # image keys, as KServe names them
LOCALMODEL_AGENT = "kserve-localmodelnode-agent"
LOCALMODEL_WEBHOOK_SERVICE = "localmodel-webhook-server-service"
LOCALMODEL_WEBHOOK_SECRET = "localmodel-webhook-server-cert"
LOCALMODEL_JOBS = "kserve-localmodel-jobs"  # where the agent's download jobs run
KNATIVE_NAMESPACE = "knative-serving"
KNATIVE_COMMANDS = ("controller", "webhook", "autoscaler", "activator", "queue")
KNATIVE_INGRESS_CLASS = "istio.ingress.networking.knative.dev"  # upstream's default
# Knative resolves image tags to digests by asking the registry, except for these registries.
KNATIVE_SKIP_TAG_RESOLVING = "kind.local,ko.local,dev.local,localhost"

# kustomize's order: what others refer to first, webhook configurations last (a webhook
# configured before its server runs rejects the objects it matches).
KIND_ORDER = (
    "Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Role",
    "ClusterRoleBinding", "RoleBinding", "ConfigMap", "Secret", "Service", "Deployment",
    "HorizontalPodAutoscaler", "PodDisruptionBudget",
)  # fmt: skip
LAST_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class AddonsError(ValueError):
    """The caller asked for something the add-ons cannot be rendered with."""


def render_addons(
    images: Mapping[str, str],
    *,
    modes: Sequence[Mode] = ("Standard",),
    knative_ingress_class: str = KNATIVE_INGRESS_CLASS,
    knative_features: Mapping[str, str] | None = None,
    now: datetime.datetime | None = None,
) -> list[Obj]:
    """The objects to apply, in order, for KServe (and Knative Serving when ``Knative`` is in
    ``modes``). The first mode is KServe's default deployment mode.

    ``images`` maps ``kserve-manager`` and, with Knative, ``knative-<command>`` for each of
    :data:`KNATIVE_COMMANDS` to image references; ``kserve-agent``, ``kserve-router`` and
    ``kserve-storage-initializer`` are optional. Custom resources come after every CRD: apply
    them once the CRDs are established. Knative's CRDs come before KServe's manager, which
    checks for them only when it starts (and never watches Knative Services if they were late).
    ``knative_features`` are the flags of Knative's ``config-features`` to switch on (a platform's
    own set: radixfleet's is ``radixfleet.platform.KNATIVE_FEATURES``).
    """
    _check(images, modes)
    tls = make_webhook_tls(
        KSERVE_WEBHOOK_SERVICE, KSERVE_NAMESPACE, now=now or datetime.datetime.now(datetime.UTC)
    )
    objects = kserve_objects(images, default_mode=modes[0], knative="Knative" in modes, tls=tls)
    if "Knative" in modes:
        objects += knative_objects(
            images, ingress_class=knative_ingress_class, features=knative_features or {}
        )
    return sorted(objects, key=_apply_rank)


def required_images(modes: Sequence[Mode]) -> list[str]:
    """The keys of ``images`` that :func:`render_addons` needs for ``modes``."""
    knative = [f"knative-{c}" for c in KNATIVE_COMMANDS] if "Knative" in modes else []
    return [KSERVE_MANAGER, *knative]


def _check(images: Mapping[str, str], modes: Sequence[Mode]) -> None:
    if not modes or any(mode not in ("Standard", "Knative") for mode in modes):
        raise AddonsError(f"modes must be a non-empty sequence of 'Standard', 'Knative': {modes}")
    missing = [key for key in required_images(modes) if not images.get(key)]
    if missing:
        raise AddonsError(f"no image given for {', '.join(missing)}")


def _apply_rank(obj: Obj) -> int:
    kind = obj["kind"]
    if kind in LAST_KINDS:
        return len(KIND_ORDER) + 1
    if kind in KIND_ORDER:
        return KIND_ORDER.index(kind)
    return len(KIND_ORDER)  # custom resources: after their CRDs, before the webhooks


# --- KServe ---------------------------------------------------------------------------------


def kserve_objects(
    images: Mapping[str, str], *, default_mode: Mode, knative: bool, tls: WebhookTLS
) -> list[Obj]:
    """KServe's controller, CRDs, RBAC, webhooks and config, changed for this cluster."""
    objects = [o for o in _load(HERE / "kserve" / "kserve-standalone.yaml") if _kserve_keeps(o)]
    for obj in objects:
        _drop_cert_manager_annotation(obj)
        _KSERVE_EDITS.get(obj["kind"], _unchanged)(obj, images, default_mode, knative)
        _set_ca_bundle(obj, service=KSERVE_WEBHOOK_SERVICE, ca_pem=tls.ca_pem)
    crds = [o for o in _load(HERE / "kserve" / LOCALMODEL_FILE)
            if o["kind"] == "CustomResourceDefinition"]  # fmt: skip
    return [*objects, *crds, _tls_secret(KSERVE_WEBHOOK_SECRET, KSERVE_NAMESPACE, tls)]


def local_model_objects(
    images: Mapping[str, str],
    *,
    host_path: str,
    now: datetime.datetime | None = None,
) -> list[Obj]:
    """KServe's local model controller (with its LocalModelCache webhook), its node agent on
    the nodes KServe's own selector picks (as its chart leaves it: the label infra gives the GPU
    nodes of caching pools) keeping models under ``host_path``, and the namespace of
    its download jobs, in apply order; the CRDs come with :func:`render_addons`. ``images``
    maps :data:`LOCALMODEL_CONTROLLER` and :data:`LOCALMODEL_AGENT`. The webhook's certificate
    is made here, as KServe's own is."""
    tls = make_webhook_tls(
        LOCALMODEL_WEBHOOK_SERVICE, KSERVE_NAMESPACE,
        now=now or datetime.datetime.now(datetime.UTC),
    )  # fmt: skip
    objects = [o for o in _load(HERE / "kserve" / LOCALMODEL_FILE)
               if o["kind"] not in ("CustomResourceDefinition", "Certificate")]  # fmt: skip
    for obj in objects:
        _drop_cert_manager_annotation(obj)
        _set_ca_bundle(obj, service=LOCALMODEL_WEBHOOK_SERVICE, ca_pem=tls.ca_pem)
        if obj["kind"] in ("Deployment", "DaemonSet"):
            spec = obj["spec"]["template"]["spec"]
            (manager,) = spec["containers"]
            key = LOCALMODEL_CONTROLLER if obj["kind"] == "Deployment" else LOCALMODEL_AGENT
            manager["image"], manager["imagePullPolicy"] = images[key], "IfNotPresent"
        if obj["kind"] == "DaemonSet":
            (models,) = spec["volumes"]
            models["hostPath"]["path"] = host_path
    jobs = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LOCALMODEL_JOBS}}
    secret = _tls_secret(LOCALMODEL_WEBHOOK_SECRET, KSERVE_NAMESPACE, tls)
    return sorted([jobs, *objects, secret], key=_apply_rank)


# Objects for cert-manager, and the metrics proxy's RBAC and Services (its port goes with it).
_KSERVE_DROPPED = {
    ("Certificate", "serving-cert"),
    ("Issuer", "selfsigned-issuer"),
    ("ClusterRole", "kserve-proxy-role"),
    ("ClusterRoleBinding", "kserve-proxy-rolebinding"),
    ("Service", "kserve-controller-manager-metrics-service"),
    ("Service", "kserve-controller-manager-service"),
}


def _kserve_keeps(obj: Obj) -> bool:
    return (obj["kind"], obj["metadata"]["name"]) not in _KSERVE_DROPPED


def _drop_cert_manager_annotation(obj: Obj) -> None:
    annotations = obj["metadata"].get("annotations") or {}
    annotations.pop("cert-manager.io/inject-ca-from", None)


def _unchanged(obj: Obj, images: Mapping[str, str], mode: Mode, knative: bool) -> None:
    del obj, images, mode, knative


def _kserve_deployment(obj: Obj, images: Mapping[str, str], mode: Mode, knative: bool) -> None:
    spec = obj["spec"]["template"]["spec"]
    spec["containers"] = [c for c in spec["containers"] if c["name"] == "manager"]
    manager = spec["containers"][0]
    manager["image"] = images[KSERVE_MANAGER]
    manager["imagePullPolicy"] = "IfNotPresent"
    # Without the proxy in front, metrics are served on the pod's port, as upstream's
    # manager_prometheus_metrics_patch.yaml sets it up.
    manager["args"] = [a for a in manager["args"] if not a.startswith("--metrics-addr")]
    manager["args"].insert(0, "--metrics-addr=:8080")
    manager["ports"].append({"containerPort": 8080, "name": "metrics", "protocol": "TCP"})


def _kserve_configmap(obj: Obj, images: Mapping[str, str], mode: Mode, knative: bool) -> None:
    if obj["metadata"]["name"] != "inferenceservice-config":
        return
    storage = _image_or_missing(images, KSERVE_STORAGE_INITIALIZER)
    art = _image_or_missing(images, "kserve-art-explainer")
    updates: dict[str, dict[str, Any]] = {
        "deploy": {"defaultDeploymentMode": mode},
        # No Istio here: Standard mode creates no Ingress (the predictor's Service is the way
        # in), Knative mode no VirtualService (Knative's Route and KIngress carry the traffic).
        "ingress": {"disableIngressCreation": True, "disableIstioVirtualHost": True},
        # Enabled as infra enables it where GPU nodes cache weights: the manager's webhook
        # then mounts a cached model's claim into its predictors.
        "localModel": {
            "enabled": True,
            "jobNamespace": LOCALMODEL_JOBS,
            "defaultJobImage": storage,
        },
        "explainers": {"art": {"image": art, "defaultImageVersion": "0"}},
        **{key: {"image": image} for key, image in _kserve_config_images(images).items()},
    }
    for key, update in updates.items():
        _merge_json(obj["data"], key, update)


def _kserve_config_images(images: Mapping[str, str]) -> dict[str, str]:
    agent = _image_or_missing(images, "kserve-agent")
    return {
        "agent": agent,
        "batcher": agent,
        "logger": agent,
        "router": _image_or_missing(images, "kserve-router"),
        "storageInitializer": _image_or_missing(images, KSERVE_STORAGE_INITIALIZER),
    }


def _kserve_storage_container(
    obj: Obj, images: Mapping[str, str], mode: Mode, knative: bool
) -> None:
    container = obj["spec"]["container"]
    container["image"] = _image_or_missing(images, KSERVE_STORAGE_INITIALIZER)
    container["imagePullPolicy"] = "IfNotPresent"


_KSERVE_EDITS: dict[str, Callable[[Obj, Mapping[str, str], Mode, bool], None]] = {
    "Deployment": _kserve_deployment,
    "ConfigMap": _kserve_configmap,
    "ClusterStorageContainer": _kserve_storage_container,
}


def _image_or_missing(images: Mapping[str, str], key: str) -> str:
    """The caller's image for ``key``, or a local name that no registry serves (see module doc)."""
    return images.get(key) or f"localhost/radixfleet/not-built/{key}:{KSERVE_VERSION}"


def _merge_json(data: dict[str, str], key: str, update: Mapping[str, Any]) -> None:
    """KServe's config keeps one JSON document per key: set ``update``'s top-level keys in it."""
    document = json.loads(data[key])
    document.update(update)
    data[key] = json.dumps(document, indent=2)


# --- Knative Serving ------------------------------------------------------------------------

# The files of Knative's release YAML (serving-crds.yaml, serving-core.yaml), in the order the
# release concatenates them: serving's config/core and the CRDs and config it links from
# knative.dev/networking and knative.dev/caching (symbolic links upstream, absent from the zips).
KNATIVE_FILES = (
    "serving/config/core",
    "networking/config",
    "caching/config/image.yaml",
)


def knative_objects(
    images: Mapping[str, str], *, ingress_class: str, features: Mapping[str, str]
) -> list[Obj]:
    """Knative Serving's core (no networking layer), changed for this cluster."""
    objects = [obj for path in _knative_paths() for obj in _load(path)]
    for obj in objects:
        for container in _containers(obj):
            container["image"] = _knative_image(images, container["image"])
            if obj["kind"] == "Deployment":  # an Image (caching) spec has no pull policy
                container["imagePullPolicy"] = "IfNotPresent"
    _knative_config(objects, "config-deployment").update(
        {
            "queue-sidecar-image": images["knative-queue"],
            "registries-skipping-tag-resolving": KNATIVE_SKIP_TAG_RESOLVING,
        }
    )
    _knative_config(objects, "config-network")["ingress-class"] = ingress_class
    _knative_config(objects, "config-features").update(features)
    return objects


def _knative_paths() -> Iterator[Path]:
    for name in KNATIVE_FILES:
        path = HERE / "knative" / name
        yield from sorted(path.rglob("*.yaml")) if path.is_dir() else [path]


def _knative_image(images: Mapping[str, str], ko_ref: str) -> str:
    """``ko://knative.dev/serving/cmd/<command>`` (ko's build reference) -> the caller's image."""
    command = ko_ref.removeprefix("ko://knative.dev/serving/cmd/")
    if command not in KNATIVE_COMMANDS:
        raise AddonsError(f"unexpected image reference in Knative's YAML: {ko_ref}")
    return images[f"knative-{command}"]


def _containers(obj: Obj) -> list[dict[str, Any]]:
    """Every container an object runs, and the queue-proxy image Knative's cache warms."""
    if obj["kind"] == "Deployment":
        spec = obj["spec"]["template"]["spec"]
        return [*spec.get("initContainers", []), *spec["containers"]]
    if obj["kind"] == "Image" and obj["apiVersion"].startswith("caching.internal.knative.dev"):
        return [obj["spec"]]
    return []


def _knative_config(objects: list[Obj], name: str) -> dict[str, str]:
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
    data: dict[str, str] = config.setdefault("data", {})
    return data


# --- shared ---------------------------------------------------------------------------------


def _load(path: Path) -> list[Obj]:
    """The documents of an upstream file, as a copy the caller may change."""
    return copy.deepcopy(_parsed(path))


@functools.cache
def _parsed(path: Path) -> list[Obj]:
    # Parsed once per process: KServe's CRDs are 2.3 MB of YAML, seconds even for libyaml.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(path.read_text(), Loader=loader) if doc]


def _set_ca_bundle(obj: Obj, *, service: str, ca_pem: bytes) -> None:
    """Trust ``ca_pem`` in every webhook client config that calls ``service``."""
    bundle = base64.b64encode(ca_pem).decode()
    for client in _webhook_clients(obj):
        if client.get("service", {}).get("name") == service:
            client["caBundle"] = bundle


def _webhook_clients(obj: Obj) -> Iterator[dict[str, Any]]:
    if obj["kind"] in LAST_KINDS:
        for webhook in obj.get("webhooks", []):
            yield webhook["clientConfig"]
    if obj["kind"] != "CustomResourceDefinition":
        return
    conversion = obj["spec"].get("conversion")
    if conversion and conversion.get("strategy") == "Webhook":
        yield conversion["webhook"]["clientConfig"]


def _tls_secret(name: str, namespace: str, tls: WebhookTLS) -> Obj:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace},
        "data": {
            "tls.crt": b64(tls.cert_pem),
            "tls.key": b64(tls.key_pem),
            "ca.crt": b64(tls.ca_pem),
        },
    }
