"""The add-on objects the test cluster applies: our images only, our webhook CA, upstream's CRDs."""

from __future__ import annotations

import base64
import datetime
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from radixfleet.render import modelcache
from testbed.addons import (
    KNATIVE_COMMANDS,
    KSERVE_NAMESPACE,
    KSERVE_WEBHOOK_SECRET,
    LOCALMODEL_AGENT,
    LOCALMODEL_CONTROLLER,
    LOCALMODEL_JOBS,
    LOCALMODEL_WEBHOOK_SECRET,
    AddonsError,
    Mode,
    local_model_objects,
    render_addons,
    required_images,
)

NOW = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.UTC)
DIGEST = "@sha256:" + "0" * 64
IMAGES = {
    "kserve-manager": f"localhost/radixfleet/kserve-manager{DIGEST}",
    **{f"knative-{c}": f"localhost/radixfleet/knative-{c}{DIGEST}" for c in KNATIVE_COMMANDS},
}
BOTH: tuple[Mode, ...] = ("Standard", "Knative")
# KServe v0.20.0's config/crd/full without the LLMInferenceService CRDs, which belong to a
# program the test bed does not run; the local model cache's come with KServe (its manager's
# webhook lists the caches), its programs apart (`local_model_objects`).
KSERVE_CRDS = {
    f"{plural}.serving.kserve.io"
    for plural in (
        "inferenceservices", "trainedmodels", "clusterservingruntimes", "servingruntimes",
        "inferencegraphs", "clusterstoragecontainers", "localmodelcaches",
        "localmodelnamespacecaches", "localmodelnodegroups", "localmodelnodes",
    )
}  # fmt: skip
KNATIVE_CRDS = {
    "configurations.serving.knative.dev", "domainmappings.serving.knative.dev",
    "revisions.serving.knative.dev", "routes.serving.knative.dev", "services.serving.knative.dev",
    "metrics.autoscaling.internal.knative.dev", "podautoscalers.autoscaling.internal.knative.dev",
    "certificates.networking.internal.knative.dev", "ingresses.networking.internal.knative.dev",
    "serverlessservices.networking.internal.knative.dev",
    "clusterdomainclaims.networking.internal.knative.dev", "images.caching.internal.knative.dev",
}  # fmt: skip
# A registry host in an image reference: a first path part with a dot or a port, or docker.io's
# short forms (kserve/agent:latest), or ko's build references.
REGISTRY_HOST = re.compile(r"\b(docker\.io|quay\.io|gcr\.io|ghcr\.io|registry\.k8s\.io|ko://)")


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return render_addons(IMAGES, modes=BOTH, now=NOW)


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def images_in(value: Any) -> Iterator[str]:
    """Every image reference in an object, the JSON documents of ConfigMaps included."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("image", "queue-sidecar-image", "defaultJobImage") and isinstance(item, str):
                yield item
            else:
                yield from images_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from images_in(item)
    elif isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            yield from images_in(json.loads(value))
        except json.JSONDecodeError:
            return


def test_every_deployment_runs_only_the_given_images(rendered: list[dict[str, Any]]) -> None:
    deployments = of_kind(rendered, "Deployment")
    assert len(deployments) == 5  # KServe's manager and Knative's four servers
    for deployment in deployments:
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["image"] in IMAGES.values(), deployment["metadata"]["name"]
            assert container["imagePullPolicy"] in ("IfNotPresent", "Never")


def test_queue_proxy_is_the_given_image(rendered: list[dict[str, Any]]) -> None:
    (config,) = [o for o in rendered if o["metadata"]["name"] == "config-deployment"]
    assert config["data"]["queue-sidecar-image"] == IMAGES["knative-queue"]
    assert "localhost" in config["data"]["registries-skipping-tag-resolving"].split(",")


def test_no_object_references_a_registry(rendered: list[dict[str, Any]]) -> None:
    for obj in rendered:
        for image in images_in(obj):
            assert image.startswith("localhost/"), (obj["kind"], obj["metadata"]["name"], image)
        if obj["kind"] != "CustomResourceDefinition":  # schema descriptions name examples
            text = json.dumps(obj)
            assert not REGISTRY_HOST.search(text), (obj["kind"], obj["metadata"]["name"])


def webhook_clients(objects: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for obj in objects:
        if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for webhook in obj["webhooks"]:
                yield webhook["clientConfig"]
        conversion = obj.get("spec", {}).get("conversion") or {}
        if obj["kind"] == "CustomResourceDefinition" and conversion.get("strategy") == "Webhook":
            yield conversion["webhook"]["clientConfig"]


def test_kserve_webhooks_trust_the_ca_that_signed_the_managers_certificate(
    rendered: list[dict[str, Any]],
) -> None:
    (secret,) = [o for o in rendered if o["metadata"]["name"] == KSERVE_WEBHOOK_SECRET]
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    kserve = [c for c in webhook_clients(rendered) if c["service"]["namespace"] == KSERVE_NAMESPACE]
    assert len(kserve) == 7  # one mutating configuration with two webhooks, five validating
    for client in kserve:
        service = client["service"]
        ca = x509.load_pem_x509_certificate(base64.b64decode(client["caBundle"]))
        verifier = (
            PolicyBuilder()
            .store(Store([ca]))
            .time(NOW)
            .build_server_verifier(x509.DNSName(f"{service['name']}.{service['namespace']}.svc"))
        )
        verifier.verify(cert, [])  # raises when the CA did not sign it for that name


def test_knative_webhooks_are_left_to_knatives_own_certificates(
    rendered: list[dict[str, Any]],
) -> None:
    knative = [
        c for c in webhook_clients(rendered) if c["service"]["namespace"] == "knative-serving"
    ]
    assert knative and all("caBundle" not in client for client in knative)
    assert [o for o in rendered if o["metadata"]["name"] == "webhook-certs"]


def test_no_cert_manager_objects_or_annotations(rendered: list[dict[str, Any]]) -> None:
    for obj in rendered:
        assert not obj["apiVersion"].startswith("cert-manager.io/")
        assert "cert-manager.io/inject-ca-from" not in (obj["metadata"].get("annotations") or {})


def test_crds_are_kserves_and_knatives(rendered: list[dict[str, Any]]) -> None:
    names = {o["metadata"]["name"] for o in of_kind(rendered, "CustomResourceDefinition")}
    assert names == KSERVE_CRDS | KNATIVE_CRDS


def test_crds_come_before_their_custom_resources_and_webhooks_come_last(
    rendered: list[dict[str, Any]],
) -> None:
    kinds = [o["kind"] for o in rendered]
    last_crd = max(i for i, kind in enumerate(kinds) if kind == "CustomResourceDefinition")
    first_cr = kinds.index("ClusterStorageContainer")
    first_webhook = min(i for i, kind in enumerate(kinds) if kind.endswith("WebhookConfiguration"))
    assert kinds[0] == "Namespace" and last_crd < first_cr < first_webhook
    # KServe's manager looks for Knative's Service CRD once, at start: it must exist by then.
    assert last_crd < kinds.index("Deployment")
    assert all(kind.endswith("WebhookConfiguration") for kind in kinds[first_webhook:])


def inferenceservice_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (config,) = [o for o in objects if o["metadata"]["name"] == "inferenceservice-config"]
    return {key: json.loads(value) for key, value in config["data"].items() if key != "_example"}


@pytest.mark.parametrize("modes", [("Standard",), ("Standard", "Knative"), ("Knative", "Standard")])
def test_kserve_defaults_to_the_first_mode_and_needs_no_istio(modes: tuple[Mode, ...]) -> None:
    config = inferenceservice_config(render_addons(IMAGES, modes=modes, now=NOW))
    assert config["deploy"]["defaultDeploymentMode"] == modes[0]
    assert config["ingress"]["disableIngressCreation"] is True
    assert config["ingress"]["disableIstioVirtualHost"] is True


def test_standard_mode_alone_installs_no_knative() -> None:
    objects = render_addons({"kserve-manager": IMAGES["kserve-manager"]}, now=NOW)
    assert not [o for o in objects if o["metadata"].get("namespace") == "knative-serving"]
    assert len(of_kind(objects, "CustomResourceDefinition")) == len(KSERVE_CRDS)


def test_the_manager_serves_metrics_itself_without_the_proxy_sidecar(
    rendered: list[dict[str, Any]],
) -> None:
    (manager,) = [
        o for o in of_kind(rendered, "Deployment") if o["metadata"]["name"].startswith("kserve")
    ]
    (container,) = manager["spec"]["template"]["spec"]["containers"]
    assert "--metrics-addr=:8080" in container["args"]
    volumes = manager["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "cert",
        "secret": {"defaultMode": 420, "secretName": KSERVE_WEBHOOK_SECRET},
    } in volumes


@pytest.mark.parametrize(
    ("modes", "missing"),
    [(("Standard",), "kserve-manager"), (("Knative",), "knative-queue")],
    ids=["standard-without-manager", "knative-without-queue"],
)
def test_a_missing_image_is_an_error(modes: tuple[Mode, ...], missing: str) -> None:
    images = {key: IMAGES[key] for key in required_images(modes) if key != missing}
    with pytest.raises(AddonsError, match=missing):
        render_addons(images, modes=modes, now=NOW)


def test_an_unknown_mode_is_an_error() -> None:
    with pytest.raises(AddonsError, match="modes"):
        render_addons(IMAGES, modes=("Serverless",), now=NOW)  # type: ignore[arg-type]


LOCAL_IMAGES = {key: f"localhost/radixfleet/{key}{DIGEST}"
                for key in (LOCALMODEL_CONTROLLER, LOCALMODEL_AGENT)}  # fmt: skip


def test_kserve_mounts_cached_models_and_downloads_in_its_jobs_namespace() -> None:
    config = inferenceservice_config(render_addons(IMAGES, modes=BOTH, now=NOW))
    assert config["localModel"]["enabled"] is True
    assert config["localModel"]["jobNamespace"] == LOCALMODEL_JOBS


def test_the_local_model_programs_run_our_images_on_the_caching_nodes() -> None:
    objects = local_model_objects(LOCAL_IMAGES, host_path="/run/m", now=NOW)
    (controller,) = of_kind(objects, "Deployment")
    (agent,) = of_kind(objects, "DaemonSet")
    assert controller["spec"]["template"]["spec"]["containers"][0]["image"] == LOCAL_IMAGES[
        LOCALMODEL_CONTROLLER]  # fmt: skip
    pod = agent["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == LOCAL_IMAGES[LOCALMODEL_AGENT]
    # KServe's own selector, which infra gives the GPU nodes of caching pools
    assert pod["nodeSelector"] == modelcache.NODE_LABELS
    assert pod["volumes"][0]["hostPath"]["path"] == "/run/m"
    assert not of_kind(objects, "CustomResourceDefinition") and not of_kind(objects, "Certificate")
    assert [o["metadata"]["name"] for o in of_kind(objects, "Namespace")] == [LOCALMODEL_JOBS]
    assert {i for o in objects for i in images_in(o)} == set(LOCAL_IMAGES.values())
    assert objects[-1]["kind"] == "ValidatingWebhookConfiguration"


def test_the_cache_webhook_trusts_the_ca_that_signed_its_servers_certificate() -> None:
    objects = local_model_objects(LOCAL_IMAGES, host_path="/run/m", now=NOW)
    (secret,) = [o for o in of_kind(objects, "Secret")
                 if o["metadata"]["name"] == LOCALMODEL_WEBHOOK_SECRET]  # fmt: skip
    (webhook,) = of_kind(objects, "ValidatingWebhookConfiguration")
    bundles = {w["clientConfig"]["caBundle"] for w in webhook["webhooks"]}
    assert bundles == {secret["data"]["ca.crt"]}
    certificate = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"localmodel-webhook-server-service.{KSERVE_NAMESPACE}.svc" in names.get_values_for_type(
        x509.DNSName)  # fmt: skip
