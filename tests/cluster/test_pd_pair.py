"""A prefill/decode model served through the region entry, on the test cluster: two Knative
InferenceServices of the emulated image on the rendered `sglang-prefill` and `sglang-decode`
runtimes (`--disaggregation-mode prefill|decode`, the prefill's bootstrap server on 8998),
labelled as the catalog labels a pair's roles; the operator's routers controller gives the
model one smg router in PD mode, and the entry routes the tenant's one model name to it. Then
both roles scale to zero, and requests sent at once through the entry wake both and are all
answered.

What is real: KServe v0.20.0 and Knative (revisions, the activator, scale to zero), the rendered
runtimes, the operator and the entry from radixfleet's kustomize bases, smg 1.13.0 in PD mode
with Kubernetes discovery (each role's pods by selector, the prefill's bootstrap port from its
pod annotation), the decode fetching each request's KV from the prefill pod's bootstrap server.
What stands in: the replicas are the emulator (no GPU), and the node advertises the GPUs.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from radixfleet import dataplane, labels
from radixfleet.render.runtimes import PD_BOOTSTRAP_PORT
from testbed import session
from testbed.cluster import Cluster
from testbed.deploy import entry_url, platform
from testbed.emulated import DATA_PLANE_KEY, emulated_isvc, get, model_volume
from testbed.tenants import TenantSpec, onboarded

TENANT = TenantSpec("disagg", namespace="pd-disagg", key="sk-disagg-6e21")
NAMESPACE, KEY = TENANT.namespace, TENANT.key
MODEL = "pair"
ROLES = ("prefill", "decode")
ROUTER = f"{MODEL}-router"
TIMEOUT_S = 300.0
# Each role scales to zero about 6 s + Knative's 30 s grace period after its last request.
WAKE_CLIENTS = 4  # requests sent to the pair at zero, at once
FAST_SCALE_DOWN = {"autoscaling.knative.dev/window": "6s"}


def _role(image: str, role: str) -> dict[str, Any]:
    """One role's InferenceService as the catalog renders it (radixfleet/render/
    inferenceservices.py: the pair's and the role's labels on it and its pods, the prefill's
    bootstrap port annotated on its pods, both answering to the pair's name), of the emulator."""
    isvc = emulated_isvc(
        image, name=f"{MODEL}-{role}", namespace=NAMESPACE, mode="Knative", min_replicas=0,
        labels={labels.TENANT: TENANT.name, labels.MODEL: MODEL, labels.PD_ROLE: role},
        annotations={"radixfleet.io/gpu-type": "H100", "radixfleet.io/gpus-per-replica": "1",
                     **FAST_SCALE_DOWN},
        storage_uri=f"pvc://models/{MODEL}",
        args=["--served-model-name", MODEL, "--disaggregation-transfer-backend", "mooncake"],
    )  # fmt: skip
    predictor = isvc["spec"]["predictor"]
    predictor["model"]["runtime"] = f"sglang-{role}"
    predictor["labels"] = {labels.POOL: labels.SERVING_POOL, labels.MODEL: MODEL,
                           labels.PD_ROLE: role}  # fmt: skip
    if role == "prefill":
        predictor["annotations"] = {labels.BOOTSTRAP_PORT_ANNOTATION: str(PD_BOOTSTRAP_PORT)}
    return isvc


@pytest.fixture(scope="module")
def served(
    kserve: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, str]]:
    """The operator, the entry and the tenant's prefill/decode pair applied; the entry's URL."""
    with (
        platform(kserve, tmp_path_factory.mktemp("overlays")) as image,
        onboarded(kserve, [TENANT]),
    ):
        session.apply(kserve, [*model_volume(kserve, namespace=NAMESPACE, model=MODEL),
                               *(_role(image.pinned, role) for role in ROLES)])  # fmt: skip
        yield kserve, entry_url(kserve)


def _chat(url: str, model: str = MODEL) -> tuple[int, dict[str, str], str]:
    body = {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi."}]}
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {KEY}"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()
    except OSError as error:  # the entry's Service before its pods are ready
        return 0, {}, str(error)


def _router_workers(cluster: Cluster) -> dict[str, str]:
    """The router's healthy workers: URL -> worker_type."""
    ip = get(cluster, "service", ROUTER, "-n", NAMESPACE)["spec"]["clusterIP"]
    request = urllib.request.Request(f"http://{ip}:{dataplane.ROUTER_PORT}/workers",
                                     headers=dataplane.bearer(DATA_PLANE_KEY))  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        workers = json.loads(response.read())["workers"]
    return {w["url"]: w.get("worker_type", "") for w in workers if w.get("is_healthy")}


def _role_pods(cluster: Cluster, role: str, *, terminating: bool = False) -> list[dict[str, Any]]:
    selector = f"{labels.MODEL}={MODEL},{labels.PD_ROLE}={role}"
    found: list[dict[str, Any]] = get(cluster, "pods", "-n", NAMESPACE, "-l", selector)["items"]
    return [p for p in found if terminating or not p["metadata"].get("deletionTimestamp")]


def _answered(url: str) -> tuple[dict[str, str], str]:
    """The first 200 of the tenant's model through the entry (503s with Retry-After before)."""
    found: list[tuple[dict[str, str], str]] = []
    refusals: list[int] = []

    def answered() -> bool:
        status, headers, body = _chat(url)
        if status == 200:
            found.append((headers, body))
            return True
        if status == 404:  # the entry has not read the new model yet (it polls the cluster)
            assert json.loads(body)["error"]["code"] == "model_not_found", body
            assert not refusals, "the model was known, then lost"
        elif status:  # known, while a role has no revision yet: 503 with Retry-After
            refusals.append(status)
            assert status == 503 and int(headers["Retry-After"]) > 0, (status, body)
        return False

    session.wait_for(answered, timeout_s=TIMEOUT_S, what=f"{NAMESPACE}/{MODEL} through the entry")
    return found[0]


def test_a_prefill_decode_pair_answers_a_tenant_through_its_pd_router(
    served: tuple[Cluster, str],
) -> None:
    cluster, url = served
    headers, body = _answered(url)
    assert headers["x-radixfleet-path"] == "router"
    assert headers["x-radixfleet-revision"] == f"{NAMESPACE}/{MODEL}"
    assert json.loads(body)["choices"][0]["message"]["content"]

    # One router for the pair, owned by the decode InferenceService, over both roles' pods.
    router = get(cluster, "deployment", ROUTER, "-n", NAMESPACE)
    decode = get(cluster, "isvc", f"{MODEL}-decode", "-n", NAMESPACE)
    (owner,) = router["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("InferenceService", decode["metadata"]["uid"])
    assert "--pd-disaggregation" in router["spec"]["template"]["spec"]["containers"][0]["args"]
    workers = sorted(_router_workers(cluster).values())
    assert workers == ["decode", "prefill"], workers
    (prefill_pod,) = _role_pods(cluster, "prefill")
    annotations = prefill_pod["metadata"].get("annotations") or {}
    assert annotations[labels.BOOTSTRAP_PORT_ANNOTATION] == str(PD_BOOTSTRAP_PORT)

    # The halves are no models of the tenant's.
    assert _chat(url, f"{MODEL}-prefill")[0] == 404


def test_a_pair_at_zero_is_woken_whole_by_a_request_through_the_entry(
    served: tuple[Cluster, str],
) -> None:
    cluster, url = served
    _answered(url)  # served once (whichever test runs first)

    def at_zero() -> bool:
        pods = [p for role in ROLES for p in _role_pods(cluster, role, terminating=True)]
        return not pods and not _router_workers(cluster)

    session.wait_for(at_zero, timeout_s=TIMEOUT_S, what=f"{NAMESPACE}/{MODEL} at zero")
    # Several clients at once while both roles wake: each is held, then answered; none lost.
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=WAKE_CLIENTS) as clients:
        answers = list(clients.map(lambda _: _chat(url), range(WAKE_CLIENTS)))
    woke_s = time.monotonic() - started
    assert [status for status, _, _ in answers] == [200] * WAKE_CLIENTS, answers
    for _, headers, body in answers:
        assert headers["x-radixfleet-path"] == "router"
        assert json.loads(body)["choices"][0]["message"]["content"]
    for role in ROLES:
        assert [p["status"]["phase"] for p in _role_pods(cluster, role)] == ["Running"], role
    print(
        f"\nprefill/decode pair woken from zero through the entry: {WAKE_CLIENTS} requests"
        f" answered in {woke_s:.1f} s"
    )
