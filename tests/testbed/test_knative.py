"""Knative Serving's objects as the test cluster applies them: our images only, upstream's CRDs,
Knative's own webhook certificates, in an order the API server accepts."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.knative import KnativeError, image_keys, knative_objects

DIGEST = "@sha256:" + "0" * 64
IMAGES = {key: f"localhost/radixfleet/{key}{DIGEST}" for key in image_keys()}
FEATURES = {"kubernetes.podspec-init-containers": "enabled"}
KNATIVE_CRDS = {
    "configurations.serving.knative.dev", "domainmappings.serving.knative.dev",
    "revisions.serving.knative.dev", "routes.serving.knative.dev", "services.serving.knative.dev",
    "metrics.autoscaling.internal.knative.dev", "podautoscalers.autoscaling.internal.knative.dev",
    "certificates.networking.internal.knative.dev", "ingresses.networking.internal.knative.dev",
    "serverlessservices.networking.internal.knative.dev",
    "clusterdomainclaims.networking.internal.knative.dev", "images.caching.internal.knative.dev",
}  # fmt: skip
# A registry host in an image reference, or ko's build references.
REGISTRY_HOST = re.compile(r"\b(docker\.io|quay\.io|gcr\.io|ghcr\.io|registry\.k8s\.io|ko://)")


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return knative_objects(IMAGES, features=FEATURES)


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def images_in(value: Any) -> Iterator[str]:
    """Every image reference in an object."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("image", "queue-sidecar-image") and isinstance(item, str):
                yield item
            else:
                yield from images_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from images_in(item)


def test_every_deployment_runs_only_the_given_images(rendered: list[dict[str, Any]]) -> None:
    deployments = of_kind(rendered, "Deployment")
    assert len(deployments) == 4  # the controller, webhook, autoscaler and activator
    for deployment in deployments:
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["image"] in IMAGES.values(), deployment["metadata"]["name"]
            assert container["imagePullPolicy"] == "IfNotPresent"


def test_queue_proxy_is_the_given_image(rendered: list[dict[str, Any]]) -> None:
    (config,) = [o for o in rendered if o["metadata"]["name"] == "config-deployment"]
    assert config["data"]["queue-sidecar-image"] == IMAGES["knative-queue"]
    assert "localhost" in config["data"]["registries-skipping-tag-resolving"].split(",")


def test_the_features_asked_for_are_switched_on(rendered: list[dict[str, Any]]) -> None:
    (config,) = [o for o in rendered if o["metadata"]["name"] == "config-features"]
    assert FEATURES.items() <= config["data"].items()


def test_no_object_references_a_registry(rendered: list[dict[str, Any]]) -> None:
    for obj in rendered:
        for image in images_in(obj):
            assert image.startswith("localhost/"), (obj["kind"], obj["metadata"]["name"], image)
        if obj["kind"] != "CustomResourceDefinition":  # schema descriptions name examples
            assert not REGISTRY_HOST.search(json.dumps(obj)), obj["metadata"]["name"]


def test_knative_webhooks_are_left_to_knatives_own_certificates(
    rendered: list[dict[str, Any]],
) -> None:
    webhooks = [w for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
                for o in of_kind(rendered, kind) for w in o["webhooks"]]  # fmt: skip
    assert webhooks and all("caBundle" not in w["clientConfig"] for w in webhooks)
    assert [o for o in rendered if o["metadata"]["name"] == "webhook-certs"]


def test_the_crds_are_knatives(rendered: list[dict[str, Any]]) -> None:
    names = {o["metadata"]["name"] for o in of_kind(rendered, "CustomResourceDefinition")}
    assert names == KNATIVE_CRDS


def test_crds_come_before_their_custom_resources_and_webhooks_come_last(
    rendered: list[dict[str, Any]],
) -> None:
    kinds = [o["kind"] for o in rendered]
    last_crd = max(i for i, kind in enumerate(kinds) if kind == "CustomResourceDefinition")
    first_cr = kinds.index("Image")
    first_webhook = min(i for i, kind in enumerate(kinds) if kind.endswith("WebhookConfiguration"))
    assert kinds[0] == "Namespace" and last_crd < first_cr < first_webhook
    assert last_crd < kinds.index("Deployment")
    assert all(kind.endswith("WebhookConfiguration") for kind in kinds[first_webhook:])


@pytest.mark.parametrize("missing", ["knative-queue", "knative-controller"])
def test_a_missing_image_is_an_error(missing: str) -> None:
    images = {key: image for key, image in IMAGES.items() if key != missing}
    with pytest.raises(KnativeError, match=missing):
        knative_objects(images, features=FEATURES)
