"""KServe as the test cluster installs it: KServe's own charts (rendered by Helm here) with the
values infra passes, changed only where this machine differs, and the certificates the charts
ask cert-manager for, issued by the test bed's stand-in and trusted by every webhook."""

from __future__ import annotations

import base64
import copy
import datetime
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from infra import manifests
from radixfleet.render import modelcache
from testbed import certificates, charts, helm_post_render, kserve
from testbed.webhook_tls import make_tls

pytestmark = pytest.mark.helm

NOW = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)
IMAGES = {
    kserve.MANAGER: "localhost/radixfleet/kserve-manager:abc",
    kserve.RBAC_PROXY: "localhost/radixfleet/kube-rbac-proxy:def",
    kserve.STORAGE_INITIALIZER: "localhost/radixfleet/storage-initializer:123",
    **{key: f"localhost/radixfleet/{key}:456" for key in kserve.LOCALMODEL_IMAGES},
}
# The only value keys the test bed may set over infra's: where images come from.
IMAGE_KEYS = {"image", "tag", "imagePullPolicy", "rbacProxyImage", "defaultJobImage",
              "defaultJobTag", "defaultVersion"}  # fmt: skip
KUBE_VERSION = "1.35"


def render(release: kserve.Release) -> list[dict[str, Any]]:
    return charts.render(release.chart, release.values, release=release.name,
                         namespace=kserve.NAMESPACE, kube_version=KUBE_VERSION)  # fmt: skip


@pytest.fixture(scope="module")
def controller() -> list[dict[str, Any]]:
    """What the kserve-resources release creates."""
    (release,) = [r for r in kserve.releases(IMAGES) if r.name == "kserve-resources"]
    return render(release)


@pytest.fixture(scope="module")
def local_models() -> list[dict[str, Any]]:
    return render(kserve.local_model_release(IMAGES))


def leaf_paths(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        paths |= leaf_paths(value, f"{path}.") if isinstance(value, Mapping) else {path: value}
    return paths


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_the_releases_are_infras_in_infras_order() -> None:
    names = [release.name for release in kserve.releases(IMAGES)]
    assert names == ["kserve-crd", "kserve-localmodel-crd", "kserve-resources"]
    assert kserve.local_model_release(IMAGES).name == "kserve-localmodel-resources"


@pytest.mark.parametrize(
    ("release", "infra_values"),
    [
        (kserve.releases(IMAGES)[2],
         manifests.kserve_values(domain=kserve.DOMAIN, model_cache=True)),
        (kserve.local_model_release(IMAGES), manifests.kserve_localmodel_values()),
    ],
    ids=["kserve-resources", "kserve-localmodel-resources"],
)  # fmt: skip
def test_the_values_are_infras_but_for_where_images_come_from(
    release: kserve.Release, infra_values: dict[str, Any]
) -> None:
    ours, theirs = leaf_paths(release.values), leaf_paths(infra_values)
    changed = {path for path in ours if theirs.get(path, object()) != ours[path]}
    assert changed, "the test bed's images are set"
    assert {path.rpartition(".")[2] for path in changed} <= IMAGE_KEYS, changed
    assert theirs.keys() <= ours.keys(), "no value of infra's is dropped"


def test_the_controller_runs_our_images_where_infra_places_it(
    controller: list[dict[str, Any]],
) -> None:
    (deployment,) = of_kind(controller, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    images = {c["name"]: (c["image"], c.get("imagePullPolicy")) for c in pod["containers"]}
    assert images == {"manager": (IMAGES[kserve.MANAGER], "IfNotPresent"),
                      "kube-rbac-proxy": (IMAGES[kserve.RBAC_PROXY], None)}  # fmt: skip
    assert pod["nodeSelector"] == manifests.SYSTEM_NODE_LABELS


def test_no_pod_of_the_releases_names_a_registry(
    controller: list[dict[str, Any]], local_models: list[dict[str, Any]]
) -> None:
    for obj in [*controller, *local_models]:
        if obj["kind"] in ("Deployment", "DaemonSet"):
            for container in obj["spec"]["template"]["spec"]["containers"]:
                assert container["image"].startswith("localhost/"), obj["metadata"]["name"]
        if obj["kind"] == "ClusterStorageContainer":
            assert obj["spec"]["container"]["image"].startswith("localhost/")


def test_the_node_agent_keeps_kserves_own_selector(local_models: list[dict[str, Any]]) -> None:
    (agent,) = of_kind(local_models, "DaemonSet")
    assert agent["spec"]["template"]["spec"]["nodeSelector"] == modelcache.NODE_LABELS


def test_the_post_renderer_moves_the_agents_folder(local_models: list[dict[str, Any]]) -> None:
    argv = kserve.post_render_argv(Path("/run/x/models"))
    done = subprocess.run(argv, input=yaml.safe_dump_all(local_models), capture_output=True,
                          text=True, check=True)  # fmt: skip
    after = [o for o in yaml.safe_load_all(done.stdout) if o]
    (agent,) = of_kind(after, "DaemonSet")
    (volume,) = agent["spec"]["template"]["spec"]["volumes"]
    assert volume["hostPath"]["path"] == "/run/x/models"
    assert len(after) == len(local_models)


@pytest.mark.parametrize(
    ("argv", "code"),
    [(["host-path", "no-such-daemonset", "models", "/x"], 1), (["host-path", "a"], 2)],
    ids=["missing-daemonset", "usage"],
)
def test_the_post_renderer_refuses_what_it_cannot_change(argv: list[str], code: int) -> None:
    script = helm_post_render.__file__
    done = subprocess.run([sys.executable, script, *argv], input="kind: ConfigMap\n",
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == code, done.stderr
    assert not done.stdout


def _issued(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The Secret the stand-in writes for the chart's one Certificate, and the chart's objects
    with the CA injected as the stand-in patches them."""
    (certificate,) = of_kind(objects, "Certificate")
    certificate["metadata"].setdefault("namespace", kserve.NAMESPACE)
    tls = make_tls(certificates.dns_names(certificate), ca_name="test", now=NOW)
    source = f"{kserve.NAMESPACE}/{certificate['metadata']['name']}"
    patched = {(kind, name): ops for kind, name, ops in
               certificates.ca_bundle_patches(objects, {source: tls.ca_pem})}  # fmt: skip
    assert patched, "some object asks for the CA"
    for obj in objects:
        for op in patched.get((obj["kind"], obj["metadata"]["name"]), []):
            _, *steps, _ = op["path"].split("/")
            target: Any = obj
            for step in steps:
                target = target[int(step)] if isinstance(target, list) else target[step]
            target["caBundle"] = op["value"]
    return certificates.certificate_secret(certificate, tls), objects


@pytest.mark.parametrize("which", ["controller", "local_models"])
def test_every_webhook_trusts_the_certificate_issued_for_its_server(
    which: str, request: pytest.FixtureRequest
) -> None:
    objects: list[dict[str, Any]] = request.getfixturevalue(which)
    secret, objects = _issued(copy.deepcopy(objects))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    webhooks = [w for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
                for o in of_kind(objects, kind) for w in o["webhooks"]]  # fmt: skip
    assert webhooks
    for webhook in webhooks:
        service = webhook["clientConfig"]["service"]
        ca = x509.load_pem_x509_certificate(base64.b64decode(webhook["clientConfig"]["caBundle"]))
        name = x509.DNSName(f"{service['name']}.{service['namespace']}.svc")
        PolicyBuilder().store(Store([ca])).time(NOW).build_server_verifier(name).verify(cert, [])


def test_the_issued_secret_is_the_one_the_server_mounts(controller: list[dict[str, Any]]) -> None:
    secret, _ = _issued(copy.deepcopy(controller))
    (deployment,) = of_kind(controller, "Deployment")
    mounted = {v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"]
               if "secret" in v}  # fmt: skip
    assert secret["metadata"]["name"] in mounted
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}


def test_objects_that_name_another_certificate_are_left_alone() -> None:
    webhook = {"kind": "ValidatingWebhookConfiguration",
               "metadata": {"name": "w", "annotations": {certificates.INJECT_CA_FROM: "a/b"}},
               "webhooks": [{"clientConfig": {}}]}  # fmt: skip
    assert certificates.ca_bundle_patches([webhook], {"a/c": b"ca"}) == []
    assert certificates.ca_bundle_patches([webhook], {"a/b": b"ca"})[0][2] == [
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle",
         "value": base64.b64encode(b"ca").decode()}]  # fmt: skip


def test_a_certificate_without_names_is_refused() -> None:
    with pytest.raises(ValueError, match="DNS name"):
        make_tls([], ca_name="test", now=NOW)


def test_an_image_reference_by_digest_is_refused() -> None:
    with pytest.raises(ValueError, match="repository:tag"):
        kserve.split("localhost/radixfleet/x@sha256:" + "0" * 64)
