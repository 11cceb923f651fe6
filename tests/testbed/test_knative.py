"""Knative Serving as the test cluster installs it: the operator's own chart with infra's values,
then infra's KnativeServing, changed only where this machine differs (images, tag resolution,
no Kourier, whose Envoy cannot be built here, the features a test audits). Read against the release
manifests the operator installs from, so an image left to a registry fails here first."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from infra import manifests
from infra.testing import example_config
from radixfleet.platform import KNATIVE_FEATURES
from testbed import charts, knative, kserve

DIGEST = "@sha256:" + "0" * 64
PINNED = {key: f"localhost/radixfleet/{key}{DIGEST}" for key in knative.image_keys()}
TAGGED = {key: f"localhost/radixfleet/{key}:abc" for key in knative.image_keys()}
FEATURES = {"kubernetes.podspec-init-containers": "enabled"}
# What the test bed may set over infra's KnativeServing (the module docstring says why).
MACHINE_KEYS = {"registry"}
# A registry host in an image reference.
REGISTRY_HOST = re.compile(r"\b(docker\.io|quay\.io|gcr\.io|ghcr\.io|registry\.k8s\.io)")


@pytest.fixture(scope="module")
def serving() -> dict[str, Any]:
    return knative.knative_serving(PINNED, features=FEATURES)


@pytest.fixture(scope="module")
def release_manifests() -> list[dict[str, Any]]:
    """What the operator installs for this KnativeServing: Serving's release (no ingress)."""
    version = knative.release(knative.module_version())
    paths = sorted((knative.kodata().path() / "knative-serving" / version).glob("*.yaml"))
    return [doc for path in paths for doc in yaml.load_all(path.read_text(), Loader=knative.LOADER)
            if doc]  # fmt: skip


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def images_in(value: Any) -> Iterator[str]:
    """Every image reference in an object."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "image" and isinstance(item, str):
                yield item
            else:
                yield from images_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from images_in(item)


def test_the_knative_serving_is_infras_but_for_what_this_machine_changes(
    serving: dict[str, Any],
) -> None:
    settings = example_config()["radixfleet:knative"]
    infra = manifests.knative_serving(
        version=settings["servingVersion"], domain=kserve.DOMAIN,
        scale_to_zero=settings["scaleToZero"], stable_window=settings["stableWindow"],
        grace_period=settings["scaleToZeroGracePeriod"],
    )  # fmt: skip
    ours = json.loads(json.dumps(serving))
    assert ours["spec"].keys() >= MACHINE_KEYS
    for key in MACHINE_KEYS:
        del ours["spec"][key]
    del ours["spec"]["config"]["deployment"]
    ours["spec"]["ingress"]["kourier"]["enabled"] = True
    ours["spec"]["config"]["features"] = infra["spec"]["config"]["features"]
    assert ours == infra


def test_the_platforms_features_are_infras() -> None:
    serving = knative.knative_serving(PINNED, features=KNATIVE_FEATURES)
    assert serving["spec"]["config"]["features"] == dict(KNATIVE_FEATURES)


def test_the_features_asked_for_are_the_ones_set(serving: dict[str, Any]) -> None:
    assert serving["spec"]["config"]["features"] == FEATURES


def test_every_container_serving_runs_is_overridden_with_an_image_built_here(
    serving: dict[str, Any], release_manifests: list[dict[str, Any]]
) -> None:
    override = serving["spec"]["registry"]["override"]
    assert set(override.values()) <= set(PINNED.values())
    for obj in of_kind(release_manifests, "Deployment") + of_kind(release_manifests, "Job"):
        name = obj["metadata"].get("name") or obj["metadata"]["generateName"]
        for container in obj["spec"]["template"]["spec"]["containers"]:
            assert f"{name}/{container['name']}" in override or container["name"] in override, (
                f"{obj['kind']} {name}'s container {container['name']} would pull "
                f"{container['image']}"
            )
    for image in of_kind(release_manifests, "Image"):  # the queue-proxy's cache entry
        assert image["metadata"]["name"] in override


def test_every_image_the_releases_config_names_is_set_to_one_built_here(
    serving: dict[str, Any], release_manifests: list[dict[str, Any]]
) -> None:
    # Knative adds the queue-proxy sidecar from config-deployment: the operator's registry
    # override does not reach a ConfigMap, so the KnativeServing's config must.
    config = serving["spec"]["config"]
    named = [(cm["metadata"]["name"].removeprefix("config-"), key)
             for cm in of_kind(release_manifests, "ConfigMap")
             for key, value in (cm.get("data") or {}).items()
             if key != "_example" and "@sha256:" in value]  # fmt: skip
    assert named
    for section, key in named:
        assert config.get(section, {}).get(key) in PINNED.values(), (section, key)


def test_kourier_is_left_out_but_its_ingress_class_kept(serving: dict[str, Any]) -> None:
    kourier = serving["spec"]["ingress"]["kourier"]
    assert kourier == {"enabled": False, "service-type": "ClusterIP"}
    network = serving["spec"]["config"]["network"]
    assert network["ingress-class"] == "kourier.ingress.networking.knative.dev"


def test_tags_are_not_resolved_for_images_built_here(serving: dict[str, Any]) -> None:
    skipped = serving["spec"]["config"]["deployment"]["registries-skipping-tag-resolving"]
    assert "localhost" in skipped.split(",")


def test_the_release_config_is_read_from_the_release() -> None:
    queue = knative.release_config("config-deployment")["queue-sidecar-image"]
    assert "/serving/cmd/queue" in queue
    assert "_example" not in knative.default_features()
    with pytest.raises(knative.KnativeError, match="no ConfigMap config-nothing"):
        knative.release_config("config-nothing")


@pytest.mark.helm
def test_the_operator_chart_is_the_release_infra_pins_with_our_images_only() -> None:
    values = knative.operator_values(TAGGED)
    rendered = charts.render(knative.operator_chart(), values, release=knative.OPERATOR_RELEASE,
                             namespace=knative.OPERATOR_NAMESPACE, kube_version="1.35")  # fmt: skip
    deployments = of_kind(rendered, "Deployment")
    assert {d["metadata"]["name"] for d in deployments} == set(knative.OPERATOR_DEPLOYMENTS)
    version = knative.release(knative.module_version())
    for deployment in deployments:
        assert deployment["metadata"]["labels"]["app.kubernetes.io/version"] == version
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["image"] in TAGGED.values(), deployment["metadata"]["name"]
    for obj in rendered:
        assert all(image.startswith("localhost/") for image in images_in(obj))
        if obj["kind"] != "CustomResourceDefinition":  # schema descriptions name examples
            assert not REGISTRY_HOST.search(json.dumps(obj)), obj["metadata"]["name"]


def test_the_operator_values_are_infras_but_for_images() -> None:
    values = knative.operator_values(TAGGED)
    assert manifests.knative_operator_values() == {}  # so every value set is an image's
    assert values == {"knative_operator": {
        key: {"image": f"localhost/radixfleet/knative-operator-{command}", "tag": "abc"}
        for key, command in (("knative_operator", "operator"), ("operator_webhook", "webhook"))
    }}  # fmt: skip


@pytest.mark.parametrize("missing", ["knative-queue", "knative-operator-migrate"])
def test_a_missing_image_is_an_error(missing: str) -> None:
    images = {key: image for key, image in PINNED.items() if key != missing}
    with pytest.raises(knative.KnativeError, match=missing):
        knative.knative_serving(images, features=FEATURES)


@pytest.mark.parametrize(
    ("version", "release"),
    [("v0.48.1", "1.21.1"), ("v0.47.0", "1.20.0")],
    ids=["serving-1.21.1", "serving-1.20.0"],
)
def test_module_versions_name_their_release(version: str, release: str) -> None:
    assert knative.release(version) == release


def test_a_version_that_is_no_knative_release_is_refused() -> None:
    with pytest.raises(knative.KnativeError, match=r"v1\.2\.3"):
        knative.release("v1.2.3")
