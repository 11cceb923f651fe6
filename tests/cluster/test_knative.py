"""KServe's Serverless mode on real Knative Serving 1.21.1 (built here): an InferenceService of the
emulated SGLang image becomes a Knative Service, a Ready Revision and a running pod (the model's
container beside Knative's queue-proxy), answers a streamed chat completion, scales to zero, and
is woken from zero by a request through Knative's real activator.

Knative's networking layer is the test helper `testbed.fake_kingress` (no real one can be built
here, testbed/NETWORKING.md): it marks KIngresses ready and routes nothing. So requests go where
radixfleet's region entry sends them in a cluster: to the revision's own Service, with the
`Knative-Serving-Revision` and `Knative-Serving-Namespace` headers that an ingress would add and
that the activator reads to find the revision it must wake.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from testbed import images, session
from testbed.cluster import Cluster
from testbed.emulated import emulated_isvc, get, model_volume, ready, stream_chat
from tests.cluster.conftest import REPO

NAMESPACE = "knative-check"
ISVC = "serverless"
PREDICTOR = f"{ISVC}-predictor"
READY_TIMEOUT_S = 300.0
# Knative's shortest stable window: the revision scales to zero about 6 s + the 30 s grace
# period after its last request, instead of a minute later.
FAST_SCALE_DOWN = {"autoscaling.knative.dev/window": "6s"}


@pytest.fixture(scope="module")
def serverless(kserve: Cluster) -> dict[str, Any]:
    """A Ready serverless InferenceService allowed to scale to zero; its predictor's status."""
    image = images.radixfleet()
    session.load_images(kserve, [image])
    kserve.kubectl(
        "apply", "--server-side", "--field-manager=radixfleet", "-k", str(REPO / "runtimes")
    )
    kserve.kubectl("create", "namespace", NAMESPACE)
    isvc = emulated_isvc(
        image.pinned, name=ISVC, namespace=NAMESPACE, mode="Knative", min_replicas=0,
        annotations=FAST_SCALE_DOWN,
    )  # fmt: skip
    session.apply(kserve, [*model_volume(kserve, namespace=NAMESPACE, model=ISVC), isvc])
    session.wait_for(
        lambda: ready(kserve, "isvc", ISVC, NAMESPACE),
        timeout_s=READY_TIMEOUT_S,
        what=f"InferenceService {NAMESPACE}/{ISVC} Ready",
    )
    predictor: dict[str, Any] = get(kserve, "isvc", ISVC, "-n", NAMESPACE)["status"]["components"][
        "predictor"
    ]
    return predictor


def _pods(cluster: Cluster, revision: str) -> list[dict[str, Any]]:
    selector = f"serving.knative.dev/revision={revision}"
    items: list[dict[str, Any]] = get(cluster, "pods", "-n", NAMESPACE, "-l", selector)["items"]
    return [p for p in items if p["metadata"].get("deletionTimestamp") is None]


def _through_revision_service(cluster: Cluster, revision: str) -> list[str]:
    """A streamed chat to the revision's public Service, as the region entry sends it."""
    service = get(cluster, "service", revision, "-n", NAMESPACE)
    headers = {"Knative-Serving-Revision": revision, "Knative-Serving-Namespace": NAMESPACE}
    return stream_chat(f"http://{service['spec']['clusterIP']}", ISVC, headers=headers)


def test_a_serverless_inferenceservice_runs_as_a_knative_service_revision_and_pod(
    kserve: Cluster, serverless: dict[str, Any]
) -> None:
    revision = serverless["latestReadyRevision"]
    assert ready(kserve, "ksvc", PREDICTOR, NAMESPACE)
    assert ready(kserve, "revision", revision, NAMESPACE)
    assert serverless["traffic"] == [
        {"latestRevision": True, "percent": 100, "revisionName": revision}
    ]
    tokens = _through_revision_service(kserve, revision)
    assert sum(1 for t in tokens if t) >= 1
    (pod,) = _pods(kserve, revision)
    assert pod["status"]["phase"] == "Running"
    names = {c["name"] for c in pod["spec"]["containers"]}
    assert names == {"kserve-container", "queue-proxy"}


def test_a_revision_at_zero_is_woken_by_a_request_through_the_activator(
    kserve: Cluster, serverless: dict[str, Any]
) -> None:
    revision = serverless["latestReadyRevision"]
    session.wait_for(
        lambda: not _pods(kserve, revision),
        timeout_s=READY_TIMEOUT_S,
        what=f"revision {revision} scaled to zero",
    )
    activators = {
        p["status"]["podIP"]
        for p in get(kserve, "pods", "-n", "knative-serving", "-l", "app=activator")["items"]
    }
    endpoints = get(kserve, "endpointslices", "-n", NAMESPACE, "-l",
                    f"kubernetes.io/service-name={revision}")["items"]  # fmt: skip
    serving = {a for s in endpoints for e in s.get("endpoints") or [] for a in e["addresses"]}
    assert serving and serving <= activators, "at zero the revision's Service is the activator"
    started = time.monotonic()
    tokens = _through_revision_service(kserve, revision)
    woke_s = time.monotonic() - started
    assert sum(1 for t in tokens if t) >= 1, "the request held at zero was answered, not lost"
    assert [p["status"]["phase"] for p in _pods(kserve, revision)] == ["Running"]
    print(f"woken from zero and answered in {woke_s:.1f} s")
