"""Knative Serving's objects for the test cluster, as plain dicts.

Knative Serving 1.21.1's ``config/core`` is vendored under ``testbed/addons/knative/`` with the
CRDs it links from knative.dev/networking and knative.dev/caching (see ``PROVENANCE.md``).
:func:`knative_objects` changes only what this cluster needs changed:

- every image is one the caller built here, pulled ``IfNotPresent`` (no registry can be reached;
  images are imported into containerd);
- Knative skips tag-to-digest resolution for ``localhost/`` images (it would ask a registry);
- the ingress class and the ``config-features`` flags are the caller's.

Knative's webhook makes its own certificate: it writes the ``webhook-certs`` Secret and sets the
``caBundle`` of its webhook configurations itself (knative.dev/pkg ``webhook/certificates``).
Knative's Deployments (and the queue-proxy sidecar Knative adds to each revision) set no
command, so each image's entrypoint must be its binary; all run with ``runAsNonRoot: true`` and no
``runAsUser``, so each image must name a numeric non-root user.

infra installs Knative through the Knative operator and a ``KnativeServing``; the test bed
applies the same release's YAML (``tests/README.md`` says why).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

HERE = Path(__file__).resolve().parent / "addons"
SERVING_VERSION = "v0.48.1"  # the knative.dev/serving module of Knative Serving 1.21.1
NAMESPACE = "knative-serving"
COMMANDS = ("controller", "webhook", "autoscaler", "activator", "queue")
# Its Deployments (the queue-proxy is a sidecar of each revision's pods).
DEPLOYMENTS = ("controller", "webhook", "autoscaler", "activator")
INGRESS_CLASS = "istio.ingress.networking.knative.dev"  # upstream's default
# Knative resolves image tags to digests by asking the registry, except for these registries.
SKIP_TAG_RESOLVING = "kind.local,ko.local,dev.local,localhost"


class KnativeError(ValueError):
    """The caller asked for something Knative's objects cannot be rendered with."""


def image_keys() -> list[str]:
    """The keys of the ``images`` that :func:`knative_objects` takes."""
    return [f"knative-{command}" for command in COMMANDS]


# The files of Knative's release YAML (serving-crds.yaml, serving-core.yaml), in the order the
# release concatenates them: serving's config/core and the CRDs and config it links from
# knative.dev/networking and knative.dev/caching (symbolic links upstream, absent from the zips).
FILES = (
    "serving/config/core",
    "networking/config",
    "caching/config/image.yaml",
)


# kustomize's order: what others refer to first, webhook configurations last (a webhook
# configured before its server runs rejects the objects it matches).
KIND_ORDER = (
    "Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Role",
    "ClusterRoleBinding", "RoleBinding", "ConfigMap", "Secret", "Service", "Deployment",
    "HorizontalPodAutoscaler", "PodDisruptionBudget",
)  # fmt: skip
LAST_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def knative_objects(
    images: Mapping[str, str],
    *,
    features: Mapping[str, str],
    ingress_class: str = INGRESS_CLASS,
) -> list[Obj]:
    """Knative Serving's core (no networking layer), changed for this cluster, in apply order.

    ``images`` maps each of :func:`image_keys` to an image reference; ``features`` are the
    flags of Knative's ``config-features`` to switch on (radixfleet's are
    ``radixfleet.platform.KNATIVE_FEATURES``). Custom resources come after every CRD: apply them
    once the CRDs are established."""
    missing = [key for key in image_keys() if not images.get(key)]
    if missing:
        raise KnativeError(f"no image given for {', '.join(missing)}")
    objects = [obj for path in _paths() for obj in _load(path)]
    for obj in objects:
        for container in _containers(obj):
            container["image"] = _knative_image(images, container["image"])
            if obj["kind"] == "Deployment":  # an Image (caching) spec has no pull policy
                container["imagePullPolicy"] = "IfNotPresent"
    _knative_config(objects, "config-deployment").update(
        {
            "queue-sidecar-image": images["knative-queue"],
            "registries-skipping-tag-resolving": SKIP_TAG_RESOLVING,
        }
    )
    _knative_config(objects, "config-network")["ingress-class"] = ingress_class
    _knative_config(objects, "config-features").update(features)
    return sorted(objects, key=_apply_rank)


def _apply_rank(obj: Obj) -> int:
    kind = obj["kind"]
    if kind in LAST_KINDS:
        return len(KIND_ORDER) + 1
    if kind in KIND_ORDER:
        return KIND_ORDER.index(kind)
    return len(KIND_ORDER)  # custom resources: after their CRDs, before the webhooks


def _paths() -> Iterator[Path]:
    for name in FILES:
        path = HERE / "knative" / name
        yield from sorted(path.rglob("*.yaml")) if path.is_dir() else [path]


def _knative_image(images: Mapping[str, str], ko_ref: str) -> str:
    """``ko://knative.dev/serving/cmd/<command>`` (ko's build reference) -> the caller's image."""
    command = ko_ref.removeprefix("ko://knative.dev/serving/cmd/")
    if command not in COMMANDS:
        raise KnativeError(f"unexpected image reference in Knative's YAML: {ko_ref}")
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


def _load(path: Path) -> list[Obj]:
    """The documents of an upstream file, as a copy the caller may change."""
    return copy.deepcopy(_parsed(path))


@functools.cache
def _parsed(path: Path) -> list[Obj]:
    # Parsed once per process: the CRDs are large, and the session and the tests both read them.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(path.read_text(), Loader=loader) if doc]
