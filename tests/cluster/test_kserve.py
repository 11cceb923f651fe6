"""radixfleet's manifests on a real KServe (v0.20.0, built here, with its webhooks): what a
platform team's `kubectl apply -k` meets in its first hour (every object admitted, and stored with
every rendered field intact: nothing pruned, nothing rewritten), and an InferenceService of the
emulated SGLang image, with a HiCache host tier, that reaches Ready, streams an answer and
loads a prefix its GPU evicted back from the host.
"""

from __future__ import annotations

import functools
import json
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from testbed import images, session
from testbed.cluster import Cluster
from testbed.emulated import (
    MODE,
    data_plane_headers,
    emulated_isvc,
    get,
    model_volume,
    ready,
    stream_chat,
)
from tests.cluster import controllers
from tests.cluster.conftest import REPO

NAMESPACE = "kserve-check"
ISVC = "emulated"
READY_TIMEOUT_S = 300.0


def _kustomize(cluster: Cluster, folder: str) -> list[dict[str, Any]]:
    built = cluster.kubectl("kustomize", str(REPO / folder)).stdout
    return [doc for doc in yaml.safe_load_all(built) if doc]


def test_the_rendered_runtimes_are_admitted_by_kserves_webhook(kserve: Cluster) -> None:
    applied = kserve.kubectl(
        "apply",
        "--server-side",
        "--field-manager=radixfleet",
        "-k",
        str(REPO / "runtimes"),
        check=False,
    )
    assert applied.returncode == 0, f"KServe refused a runtime:\n{applied.stderr}"
    runtimes = _kustomize(kserve, "runtimes")
    names = kserve.kubectl("get", "clusterservingruntimes", "-o", "name").stdout.split()
    assert len(names) == len(runtimes)
    assert not _changed(kserve, runtimes)


def test_the_rendered_inferenceservices_are_admitted_by_kserves_webhooks(kserve: Cluster) -> None:
    objects = _kustomize(kserve, "inferenceservices")
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    session.apply(kserve, namespaces)
    # A server-side dry run goes through every admission webhook without creating predictors
    # that would ask this one node for hundreds of GPUs.
    dry_run = kserve.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=radixfleet",
        "-k",
        str(REPO / "inferenceservices"),
        check=False,
    )
    assert dry_run.returncode == 0, f"KServe refused an InferenceService:\n{dry_run.stderr}"
    admitted = [line for line in dry_run.stdout.splitlines() if "inferenceservice" in line]
    assert len(admitted) == sum(o["kind"] == "InferenceService" for o in objects)


def test_knative_accepts_the_knative_service_of_every_rendered_serverless_predictor(
    kserve: Cluster, tmp_path: Path
) -> None:
    """Knative judges a predictor only when KServe creates its Knative Service, after admission:
    so create them for real (their pods stay Pending: they ask this node for more GPUs than it
    has) and wait until KServe made each Knative Service or reported Knative's refusal.

    As a platform team applies them: the quota controller runs, since the quota's admission
    policy (when test_admission.py installed it) refuses a tenant's models until it has
    accounted the tenant ("retry shortly"), and the apply is retried until it goes through."""
    objects = _kustomize(kserve, "inferenceservices")
    quota = ["quota", "run", "--standalone", "--region", "test"]
    with controllers.running(quota, kserve.kubeconfig, tmp_path / "quota.log"):
        session.wait_for(
            functools.partial(_applied, kserve, objects),
            timeout_s=READY_TIMEOUT_S,
            what="the rendered inferenceservices/ applied",
        )
    assert not _changed(kserve, objects)
    serverless = [
        o for o in objects
        if o["kind"] == "InferenceService" and o["metadata"]["annotations"][MODE] == "Knative"
    ]  # fmt: skip
    try:
        assert serverless
        for isvc in serverless:
            name, namespace = isvc["metadata"]["name"], isvc["metadata"]["namespace"]
            session.wait_for(
                functools.partial(_knative_service_or_refusal, kserve, name, namespace),
                timeout_s=READY_TIMEOUT_S,
                what=f"KServe to reconcile {namespace}/{name}",
            )
            refusal = _refusal(kserve, name, namespace)
            assert refusal is None, f"{namespace}/{name}: {refusal}"
    finally:
        kserve.kubectl("delete", "-k", str(REPO / "inferenceservices"), "--wait=false")


def _changed(cluster: Cluster, objects: list[dict[str, Any]]) -> list[str]:
    """Where a stored object lacks or alters its rendered spec: the API server prunes a field
    its schema does not know without a word, and a webhook may rewrite one."""
    with_spec = [o for o in objects if "spec" in o]
    listed = {"apiVersion": "v1", "kind": "List", "items": with_spec}
    got = cluster.kubectl("get", "-f", "-", "-o", "json", stdin=json.dumps(listed)).stdout
    found = json.loads(got)["items"]
    return [
        f"{o['kind']} {o['metadata']['name']}: {difference}"
        for o, stored in zip(with_spec, found, strict=True)
        for difference in _missing(o["spec"], stored.get("spec"), "spec")
    ]


def _missing(expected: Any, actual: Any, path: str) -> list[str]:
    """Paths where ``actual`` lacks or changes what ``expected`` has (extra fields are fine)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [path]
        return [p for k, v in expected.items() for p in _missing(v, actual.get(k), f"{path}.{k}")]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [path]
        pairs = zip(expected, actual, strict=True)
        return [p for i, (e, a) in enumerate(pairs) for p in _missing(e, a, f"{path}[{i}]")]
    return [] if expected == actual else [f"{path}: {expected!r} != {actual!r}"]


# The API server's words when KServe's webhook did not answer within its 10 s: on a busy machine
# (a cold CI run: the test bed's first minutes beside the other worker's tests) it has, once.
# Temporary, like the quota's "retry shortly": a later apply goes through.
WEBHOOK_TIMEOUT = "context deadline exceeded"


def _applied(cluster: Cluster, objects: list[dict[str, Any]]) -> bool:
    documents = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    applied = cluster.kubectl(
        "apply", "--server-side", "--field-manager=radixfleet", "-f", "-", stdin=documents,
        check=False,
    )  # fmt: skip
    passing = ("retry shortly", WEBHOOK_TIMEOUT)
    assert applied.returncode == 0 or any(w in applied.stderr for w in passing), applied.stderr
    return applied.returncode == 0


def _refusal(cluster: Cluster, name: str, namespace: str) -> str | None:
    status = get(cluster, "isvc", name, "-n", namespace).get("status", {})
    for condition in status.get("conditions", []):
        if condition.get("reason") == "ReconcileFailed":
            return str(condition.get("message"))
    return None


def _knative_service_or_refusal(cluster: Cluster, name: str, namespace: str) -> bool:
    found = cluster.kubectl("get", "ksvc", f"{name}-predictor", "-n", namespace, check=False)
    return found.returncode == 0 or _refusal(cluster, name, namespace) is not None


# SGLang HiCache as the catalog renders it, on a GPU pool of 4,096 tokens: three of the test's
# 1,010-token prompts fill it, and the first is evicted to the host tier (1 GB: 7,629 tokens of
# the emulated 8B's 128 KiB, which holds all five).
HICACHE_ARGS = (
    "--enable-hierarchical-cache", "--hicache-size", "1", "--hicache-write-policy",
    "write_through", "--max-total-tokens", "4096",
)  # fmt: skip
HOST_TIER_TOKENS = 10**9 // 131_072


def test_a_standard_mode_inferenceservice_of_the_emulated_image_streams_tokens_with_hicache(
    kserve: Cluster,
) -> None:
    image = images.radixfleet()
    session.load_images(kserve, [image])
    kserve.kubectl("create", "namespace", NAMESPACE)
    isvc = emulated_isvc(
        image.pinned, name=ISVC, namespace=NAMESPACE, mode="Standard", args=HICACHE_ARGS
    )
    session.apply(kserve, [*model_volume(kserve, namespace=NAMESPACE, model=ISVC), isvc])
    session.wait_for(
        lambda: ready(kserve, "isvc", ISVC, NAMESPACE),
        timeout_s=READY_TIMEOUT_S,
        what=f"InferenceService {NAMESPACE}/{ISVC} Ready",
    )
    selector = f"serving.kserve.io/inferenceservice={ISVC}"
    pods = get(kserve, "pods", "-n", NAMESPACE, "-l", selector)["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running"]
    service = get(kserve, "service", f"{ISVC}-predictor", "-n", NAMESPACE)
    port = service["spec"]["ports"][0]["port"]
    url = f"http://{service['spec']['clusterIP']}:{port}"
    tokens = stream_chat(url, ISVC)
    assert sum(1 for t in tokens if t) >= 1
    assert _metric(url, "sglang:hicache_host_total_tokens") == HOST_TIER_TOKENS
    for document in (0, 1, 2, 3, 4, 0):  # the last asks again for the first, evicted
        cached = _generate(url, " ".join(f"doc{document}-word{i}" for i in range(150)))
    assert cached["host"] > 0, cached
    assert _metric(url, "sglang:cached_tokens_total", cache_source="host") >= cached["host"]


def _generate(url: str, text: str) -> dict[str, int]:
    """POST SGLang's native /generate; its answer's `cached_tokens_details`."""
    body = {"text": text, "sampling_params": {"max_new_tokens": 1}}
    request = urllib.request.Request(
        f"{url}/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **data_plane_headers()},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        details: dict[str, int] = json.load(response)["meta_info"]["cached_tokens_details"]
    return details


def _metric(url: str, name: str, **labels: str) -> float:
    """The sum of the replica's samples of `name` with `labels`."""
    request = urllib.request.Request(f"{url}/metrics", headers=data_plane_headers())
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )
