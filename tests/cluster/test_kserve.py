"""radixfleet's manifests on a real KServe (v0.20.0, built here, with its webhooks): what a
platform team's `kubectl apply -k` meets in its first hour, and an InferenceService of the emulated
SGLang image that reaches Ready and streams an answer.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import yaml

from testbed import images, session
from testbed.cluster import Cluster
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
    names = kserve.kubectl("get", "clusterservingruntimes", "-o", "name").stdout.split()
    assert len(names) == len(_kustomize(kserve, "runtimes"))


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


def _model_volume(cluster: Cluster) -> list[dict[str, Any]]:
    """A claim on a node-local folder, standing in for the weights: with no storageUri at all
    KServe treats a predictor as multi-model and adds its agent (an image not built here), and
    an s3:// one needs the storage initializer (also not built); pvc:// mounts the claim."""
    folder = cluster.layout.run_dir / "models"
    (folder / ISVC).mkdir(parents=True, exist_ok=True)
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "models"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "hostPath": {"path": str(folder)},
                "claimRef": {"namespace": NAMESPACE, "name": "models"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "models", "namespace": NAMESPACE},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": "models",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]


def _emulated_isvc(image: str) -> dict[str, Any]:
    # The rendered `sglang` runtime, as rendered; only the image is the emulator's (a model's
    # container fields merge over its runtime's), and the weights are an empty folder.
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": ISVC,
            "namespace": NAMESPACE,
            "annotations": {"serving.kserve.io/deploymentMode": "Standard"},
        },
        "spec": {
            "predictor": {
                "minReplicas": 1,
                "maxReplicas": 1,
                "model": {
                    "modelFormat": {"name": "sglang"},
                    "runtime": "sglang",
                    "storageUri": f"pvc://models/{ISVC}",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "env": [{"name": "RADIXFLEET_EMULATOR_WARM", "value": "1"}],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1"},
                        "requests": {"nvidia.com/gpu": "1"},
                    },
                },
            }
        },
    }


def _ready(cluster: Cluster) -> bool:
    found = cluster.kubectl("get", "isvc", ISVC, "-n", NAMESPACE, "-o", "json", check=False)
    if found.returncode != 0:
        return False
    conditions = json.loads(found.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_a_standard_mode_inferenceservice_of_the_emulated_image_streams_tokens(
    kserve: Cluster,
) -> None:
    image = images.radixfleet()
    session.load_images(kserve, [image])
    kserve.kubectl("create", "namespace", NAMESPACE)
    session.apply(kserve, [*_model_volume(kserve), _emulated_isvc(image.pinned)])
    session.wait_for(
        lambda: _ready(kserve),
        timeout_s=READY_TIMEOUT_S,
        what=f"InferenceService {NAMESPACE}/{ISVC} Ready",
    )
    pods = json.loads(
        kserve.kubectl(
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            f"serving.kserve.io/inferenceservice={ISVC}",
            "-o",
            "json",
        ).stdout
    )["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running"]
    service = json.loads(
        kserve.kubectl("get", "service", f"{ISVC}-predictor", "-n", NAMESPACE, "-o", "json").stdout
    )
    port = service["spec"]["ports"][0]["port"]
    body = {
        "model": ISVC,
        "stream": True,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "Say hello."}],
    }
    request = urllib.request.Request(
        f"http://{service['spec']['clusterIP']}:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        events = [
            line for line in response.read().decode().splitlines() if line.startswith("data: ")
        ]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    tokens = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert sum(1 for t in tokens if t) >= 1
