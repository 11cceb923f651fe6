"""A multi-node model served through the region entry, on the test cluster: KServe's Standard
mode (raw Deployments) runs the rendered `sglang-multinode` runtime with radixfleet's image, a
head (rank 0) and one worker (rank 1) that joins it at `$(HEAD_SVC):5757` as SGLang's ranks do
(radixfleet/emulator/multinode.py); the operator's routers controller gives the model one smg
router for its head, and the entry routes the tenant's model name to it.

What is real: KServe v0.20.0 (its webhooks, its raw Deployments, the head's headless Service and
HEAD_SVC), the rendered runtime, the operator and the entry from radixfleet's kustomize bases,
smg 1.13.0 with Kubernetes discovery, DNS. What stands in: the replica is the emulator (no GPU),
and the node advertises the two GPUs.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from radixfleet import dataplane
from testbed import session
from testbed.cluster import Cluster
from testbed.deploy import entry_url, platform
from testbed.emulated import (
    DATA_PLANE_KEY,
    MODE,
    ROUTER_TOKENIZER,
    TOKENIZER,
    get,
    keep_multinode_parts,
    model_volume,
)
from testbed.tenants import TenantSpec, onboarded

TENANT = TenantSpec("deep", namespace="mn-deep", key="sk-deep-40b5")
NAMESPACE, KEY = TENANT.namespace, TENANT.key
MODEL = "big"
HEAD = f"{MODEL}-predictor"  # KServe's head Deployment; the worker's is `big-predictor-worker`
ROUTER = f"{HEAD}-router"
TIMEOUT_S = 300.0
# The rendered probes wait 10 s between checks (sized for minutes of loading weights); an
# emulated head is up in a second, so the test asks every second and saves about 20 s of CI.
QUICK_PROBES = {
    "startupProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 1,
                     "failureThreshold": 600},
    "readinessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 1},
}  # fmt: skip


def _rank(image: str) -> dict[str, Any]:
    """A rank's container over the rendered runtime's: radixfleet's image, one GPU, warm."""
    return {
        "image": image,
        "imagePullPolicy": "Never",
        "env": [{"name": "RADIXFLEET_EMULATOR_WARM", "value": "1"}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
    }


def _model(image: str) -> dict[str, Any]:
    """The catalog's multi-node shape (radixfleet/render/inferenceservices.py), on two pods of
    one GPU each: KServe computes two nodes from pipelineParallelSize x tensorParallelSize over
    the worker's one GPU."""
    head = {
        **_rank(image),
        "modelFormat": {"name": "sglang"},
        "runtime": "sglang-multinode",
        "storageUri": f"pvc://models/{MODEL}",
        **QUICK_PROBES,
    }
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": MODEL, "namespace": NAMESPACE,
                     "labels": {"radixfleet.io/tenant": TENANT.name},
                     "annotations": {MODE: "Standard", TOKENIZER: ROUTER_TOKENIZER,
                                     "serving.kserve.io/autoscalerClass": "none",
                                     "radixfleet.io/gpu-type": "H100",
                                     "radixfleet.io/gpus-per-replica": "2"}},
        "spec": {"predictor": {
            "minReplicas": 1, "maxReplicas": 1, "model": head,
            "workerSpec": {"pipelineParallelSize": 2, "tensorParallelSize": 1,
                           "containers": [{"name": "worker-container", **_rank(image)}]},
        }},
    }  # fmt: skip


@pytest.fixture(scope="module")
def served(
    kserve: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, str, float]]:
    """The operator, the entry and the tenant's multi-node model applied; the entry's URL and
    when the model was applied."""
    with (
        platform(kserve, tmp_path_factory.mktemp("overlays")) as image,
        _multinode_parts_kept(kserve),
        onboarded(kserve, [TENANT]),
    ):
        applied = time.monotonic()
        session.apply(kserve, [*model_volume(kserve, namespace=NAMESPACE, model=MODEL),
                               _model(image.pinned)])  # fmt: skip
        yield kserve, entry_url(kserve), applied


@contextlib.contextmanager
def _multinode_parts_kept(cluster: Cluster) -> Iterator[None]:
    """KServe v0.20.0's bug #6113 worked around for the block (keep_multinode_parts' docstring)."""
    session.apply(cluster, keep_multinode_parts())
    try:
        yield
    finally:
        for obj in keep_multinode_parts():
            cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--wait=false",
                            check=False)  # fmt: skip


def _chat(url: str) -> tuple[int, dict[str, str], str]:
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi."}]}
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {KEY}"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()
    except OSError as error:  # the entry's Service before its pods are ready
        return 0, {}, str(error)


def _router_workers(cluster: Cluster) -> list[str]:
    ip = get(cluster, "service", ROUTER, "-n", NAMESPACE)["spec"]["clusterIP"]
    request = urllib.request.Request(f"http://{ip}:{dataplane.ROUTER_PORT}/workers",
                                     headers=dataplane.bearer(DATA_PLANE_KEY))  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        return [w["url"] for w in json.loads(response.read())["workers"] if w.get("is_healthy")]


def _pods(cluster: Cluster, app: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = get(cluster, "pods", "-n", NAMESPACE, "-l", f"app={app}")["items"]
    return [p for p in found if not p["metadata"].get("deletionTimestamp")]


def test_a_two_pod_multinode_model_answers_a_tenant_through_the_entry(
    served: tuple[Cluster, str, float],
) -> None:
    cluster, url, applied = served
    refusals: list[tuple[int, str]] = []

    def answered() -> bool:
        status, headers, body = _chat(url)
        if status == 200:
            answered.found = (headers, body)  # type: ignore[attr-defined]
            return True
        if status == 404:  # the entry has not read the new model yet (it polls the cluster)
            assert json.loads(body)["error"]["code"] == "model_not_found", body
            assert not refusals, "the model was known, then lost"
        elif status:  # known, while the head is not ready: 503, OpenAI's shape, Retry-After
            refusals.append((status, headers.get("Retry-After", "")))
            assert status == 503 and int(headers["Retry-After"]) > 0, (status, body)
            assert json.loads(body)["error"]["message"], body
        return False

    session.wait_for(answered, timeout_s=TIMEOUT_S, what=f"{NAMESPACE}/{MODEL} through the entry")
    served_s = time.monotonic() - applied
    headers, body = answered.found  # type: ignore[attr-defined]
    assert headers["x-radixfleet-path"] == "router"
    assert headers["x-radixfleet-revision"] == f"{NAMESPACE}/{HEAD}"
    assert json.loads(body)["choices"][0]["message"]["content"]
    print(f"\nmulti-node model answered through the entry {served_s:.1f} s after it was "
          f"applied ({len(refusals)} answers of 503 before)")  # fmt: skip

    # The router is the head's: owned by its Deployment, sending to rank 0's pod alone.
    router = get(cluster, "deployment", ROUTER, "-n", NAMESPACE)
    head = get(cluster, "deployment", HEAD, "-n", NAMESPACE)
    (owner,) = router["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Deployment", HEAD, head["metadata"]["uid"])  # fmt: skip
    (head_pod,) = _pods(cluster, f"isvc.{HEAD}")
    assert _router_workers(cluster) == [f"http://{head_pod['status']['podIP']}:8080"]

    # Rank 1 joined rank 0 at the head's Service KServe named in HEAD_SVC.
    (worker_pod,) = _pods(cluster, f"isvc.{HEAD}-worker")
    worker_env = {e["name"]: e.get("value") for e in worker_pod["spec"]["containers"][0]["env"]}
    assert worker_env["HEAD_SVC"].startswith(f"{MODEL}-head-")
    logs = cluster.kubectl("logs", "-n", NAMESPACE, worker_pod["metadata"]["name"]).stdout
    assert "rank 1 of 2: every rank joined" in logs, logs
