"""Model weights cached on the GPU nodes, on the real KServe (v0.20.0, built here): its local
model controller and node agent, installed from KServe's `kserve-localmodel-resources` chart with
infra's values as infra installs them, its storage-initializer and webhooks take the node group
and the cache radixfleet renders for a GPU pool with `model_cache_gib`
(radixfleet/render/modelcache.py, what the Pulumi program deploys), download the weights onto
the node once, and a cached model's predictor reads the node's copy instead of downloading them.

The test node carries the labels of infra/'s caching H100 nodes; the model store is moto's S3
server (real HTTP, boto3 in KServe's storage-initializer unchanged) on the host, reached from the
node's network. The node's folder is the kubelet's, root's (as on EKS), until radixfleet's
folder keeper hands it to KServe's agent: without it the agent fails (`mkdir /mnt/models/models:
permission denied`, seen here). What is proven: the rendered objects are admitted (the CRDs'
schemas, the cache's webhook, which also refuses a second cache of the same weights: why
radixfleet renders one cache per storage URI); the agent on the node runs the download and the
files land in the node's folder; the predictor of an InferenceService reading those weights
(annotated with its GPU type's node group, as the catalog renders it) runs with the cache's
claim mounted at `/mnt/models`, reads the same bytes there, and has no storage-initializer of
its own; one reading weights no cache holds still gets the storage-initializer (the control).

One stand-in: the download job reaches S3 with keys from a Secret (moto takes any), named by the
cache's `serviceAccountName`; in AWS the rendered cache names none and the job's default
ServiceAccount reads the bucket through Pod Identity, which cannot run here.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from radixfleet import dataplane
from radixfleet.config import GpuPool, Region, load_catalog
from radixfleet.platform import DEFAULT_DEPLOYMENT_MODE
from radixfleet.render.inferenceservices import NODE_GROUP, build_inference_service
from radixfleet.render.modelcache import (
    FOLDER_KEEPER,
    NODE_LABELS,
    NODE_PATH,
    folder_keeper,
    model_cache,
)
from testbed import images, session
from testbed.cluster import Cluster
from testbed.emulated import DATA_PLANE_KEY, emulated_isvc, get
from testbed.kserve import LOCALMODEL_JOBS
from testbed.kserve import NAMESPACE as KSERVE_NAMESPACE
from testbed.layout import NODE_NAME
from tests.cluster.conftest import REPO

NAMESPACE = "model-cache-check"
BUCKET = "models-check"
FOLDER = "meta-llama/Llama-3.1-8B-Instruct"
WEIGHTS = f"s3://{BUCKET}/{FOLDER}"
UNCACHED = f"s3://{BUCKET}/meta-llama/Llama-3.1-70B-Instruct"
# What the model store holds for the cached model: a config and a (small) weights file.
FILES = {"config.json": b'{"architectures": ["LlamaForCausalLM"]}',
         "model.safetensors": secrets.token_bytes(1 << 20)}  # fmt: skip
STORE_ACCOUNT = "model-store-reader"  # in the download jobs' namespace (the module docstring)
TIMEOUT_S = 240.0
CATALOG = load_catalog(REPO / "inferenceservices" / "catalog.yaml")
# The test node's pool (testbed/session.py's NODE_LABELS), caching as a catalog would have it.
POOL = GpuPool(name="h100", instance_type="p5.48xlarge", gpu_type="H100", gpus_per_node=8,
               max_nodes=1, model_cache_gib=100)  # fmt: skip
MODEL = CATALOG.models[0].model_copy(update={"regions": ["test"], "storage_uri": WEIGHTS})


@dataclass(frozen=True)
class Bed:
    cluster: Cluster
    folder: Path  # the node's folder KServe's agent keeps the weights in


def _rendered(host_path: str) -> list[dict[str, Any]]:
    """The node group and cache infra deploys for `POOL` and `MODEL`, the node's folder moved
    under the test bed's run directory (KServe's chart keeps it at `NODE_PATH` of the host),
    and the cache naming the ServiceAccount with the model store's keys (the docstring)."""
    docs = model_cache(Region(name="test", gpu_pools=[POOL]), [MODEL])
    for doc in docs:
        if doc["kind"] == "LocalModelNodeGroup":
            volume = doc["spec"]["persistentVolumeSpec"]
            assert volume["local"] == {"path": NODE_PATH}
            volume["local"]["path"] = host_path
        if doc["kind"] == "LocalModelCache":
            assert "serviceAccountName" not in doc["spec"]
            doc["spec"]["serviceAccountName"] = STORE_ACCOUNT
    return docs


def _folder_keeper(image: str, host_path: str) -> dict[str, Any]:
    """The DaemonSet infra deploys to hand the node's cache folder to KServe's agent, the
    folder moved as in `_rendered`."""
    keeper = folder_keeper(image=image, namespace=KSERVE_NAMESPACE)
    (volume,) = keeper["spec"]["template"]["spec"]["volumes"]
    assert volume["hostPath"]["path"] == NODE_PATH
    volume["hostPath"]["path"] = host_path
    return keeper


def _keeper_ready(cluster: Cluster) -> bool:
    found = get(cluster, "daemonset", FOLDER_KEEPER, "-n", KSERVE_NAMESPACE)
    return int(found.get("status", {}).get("numberReady", 0)) >= 1


def _store_access(endpoint: str) -> list[dict[str, Any]]:
    """The download jobs' keys to moto's S3, as KServe's credential builder reads them."""
    secret = {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": STORE_ACCOUNT, "namespace": LOCALMODEL_JOBS, "annotations": {
            "serving.kserve.io/s3-endpoint": endpoint, "serving.kserve.io/s3-usehttps": "0",
            "serving.kserve.io/s3-region": "us-east-1"}},
        "stringData": {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"},
    }  # fmt: skip
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": STORE_ACCOUNT, "namespace": LOCALMODEL_JOBS},
               "secrets": [{"name": STORE_ACCOUNT}]}  # fmt: skip
    return [secret, account]


@pytest.fixture(scope="module")
def local_models(kserve: Cluster) -> Iterator[Bed]:
    """KServe's local model controller and agent, the node labelled as a caching pool's, and
    moto's S3 on the host holding the cached model's files."""
    folder = kserve.layout.run_dir / "node-models"  # made by the kubelet, root's, as on EKS
    image = images.radixfleet()
    session.load_images(kserve, [image])
    store = ThreadedMotoServer(ip_address=kserve.network.host_ip, port=0, verbose=False)
    store.start()
    host, port = store.get_host_and_port()
    s3 = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    s3.create_bucket(Bucket=BUCKET)
    for name, data in FILES.items():
        s3.put_object(Bucket=BUCKET, Key=f"{FOLDER}/{name}", Body=data)
    # The label infra gives a caching pool's nodes, and nothing else: KServe's agent must find
    # them by it as its chart deploys it.
    caching = [f"{key}={value}" for key, value in NODE_LABELS.items()]
    kserve.kubectl("label", "node", NODE_NAME, "--overwrite", *caching)
    keeper = _folder_keeper(image.pinned, str(folder))
    session.apply(kserve, [keeper])
    session.wait_for(lambda: _keeper_ready(kserve), timeout_s=TIMEOUT_S,
                     what="the cache folder handed to KServe's agent")  # fmt: skip
    session.install_local_models(kserve, host_path=folder)
    session.apply(kserve, _store_access(f"{host}:{port}"))
    kserve.kubectl("create", "namespace", NAMESPACE)
    kserve.kubectl(
        "apply", "--server-side", "--field-manager=radixfleet", "-k", str(REPO / "runtimes")
    )
    try:
        yield Bed(kserve, folder)
    finally:
        # The caches first, while their controller still runs to release its finalizer.
        kserve.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=120s",
                       check=False)  # fmt: skip
        for kind in ("localmodelcaches", "localmodelnodegroups", "localmodelnodes"):
            kserve.kubectl("delete", kind, "--all", "--wait=true", "--timeout=120s", check=False)
        session.uninstall_local_models(kserve)
        session.remove(kserve, [keeper])
        kserve.kubectl("label", "node", NODE_NAME, *(f"{key}-" for key in NODE_LABELS),
                       check=False)  # fmt: skip
        store.stop()


def _isvc(image: str, name: str, storage_uri: str) -> dict[str, Any]:
    """The emulated predictor reading `storage_uri`, with the node group annotation the
    catalog renders for `MODEL`'s InferenceServices."""
    rendered, _ = build_inference_service(MODEL, CATALOG.tenant(MODEL.tenants[0]))
    group = rendered["metadata"]["annotations"][NODE_GROUP]
    return emulated_isvc(image, name=name, namespace=NAMESPACE, mode=DEFAULT_DEPLOYMENT_MODE,
                         storage_uri=storage_uri, annotations={NODE_GROUP: group})  # fmt: skip


def _pods(cluster: Cluster, isvc: str) -> list[dict[str, Any]]:
    selector = f"serving.kserve.io/inferenceservice={isvc}"
    items: list[dict[str, Any]] = get(cluster, "pods", "-n", NAMESPACE, "-l", selector)["items"]
    return items


def _downloaded(cluster: Cluster, cache: str) -> bool:
    """Whether the agent reports the model downloaded on the node (a failed download fails)."""
    found = cluster.kubectl("get", "localmodelnodes", NODE_NAME, "-o", "json", check=False)
    if found.returncode != 0:
        return False
    state = json.loads(found.stdout).get("status", {}).get("modelStatus", {}).get(cache)
    assert state != "ModelDownloadError", _job_logs(cluster, cache)
    return state == "ModelDownloaded"


def _job_logs(cluster: Cluster, cache: str) -> str:
    selector = f"model={cache},node={NODE_NAME}"
    return cluster.kubectl("logs", "-n", LOCALMODEL_JOBS, "-l", selector, "--tail=40",
                           check=False).stdout  # fmt: skip


def _storage_key(uri: str) -> str:
    """Where KServe keeps a URI's files under the node's folder (v1alpha1.GetStorageKey)."""
    return hashlib.sha256(uri.encode()).hexdigest()[:16]


def test_a_cached_models_predictor_reads_the_nodes_copy_of_its_weights(
    local_models: Bed,
) -> None:
    cluster, folder = local_models.cluster, local_models.folder
    docs = _rendered(str(folder))
    (group,) = [d["metadata"]["name"] for d in docs if d["kind"] == "LocalModelNodeGroup"]
    (rendered,) = [d for d in docs if d["kind"] == "LocalModelCache"]
    cache = rendered["metadata"]["name"]
    session.apply(cluster, docs)

    twin = {**rendered, "metadata": {"name": f"{cache}-again"}}  # the same weights again
    refused = cluster.kubectl("create", "-f", "-", stdin=json.dumps(twin), check=False)
    assert refused.returncode != 0 and "same StorageURI" in refused.stderr, refused.stderr

    session.wait_for(lambda: _downloaded(cluster, cache), timeout_s=TIMEOUT_S,
                     what="the model downloaded onto the node")  # fmt: skip
    on_node = folder / "models" / _storage_key(WEIGHTS)
    assert {name: (on_node / name).read_bytes() for name in FILES} == FILES

    image = images.radixfleet()  # loaded by the fixture
    key = dataplane.secret(NAMESPACE, key=DATA_PLANE_KEY)
    session.apply(cluster, [key, _isvc(image.pinned, "cached", WEIGHTS),
                            _isvc(image.pinned, "uncached", UNCACHED)])  # fmt: skip

    def running() -> bool:
        return [p["status"].get("phase") for p in _pods(cluster, "cached")] == ["Running"]

    session.wait_for(running, timeout_s=TIMEOUT_S, what="the cached model's predictor running")
    (pod,) = _pods(cluster, "cached")
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v}  # fmt: skip
    assert list(claims.values()) == [f"{cache}-{group}"]
    (server,) = [c for c in pod["spec"]["containers"] if c["name"] == "kserve-container"]
    (mount,) = [m for m in server["volumeMounts"] if m["name"] in claims]
    assert mount["mountPath"] == "/mnt/models" and mount["readOnly"] is True
    assert not [c for c in pod["spec"].get("initContainers", []) if "storage" in c["name"]]
    read = cluster.kubectl("exec", "-n", NAMESPACE, pod["metadata"]["name"], "-c",
                           "kserve-container", "--", "cat", "/mnt/models/config.json")  # fmt: skip
    assert read.stdout.encode() == FILES["config.json"]

    session.wait_for(lambda: bool(_pods(cluster, "uncached")), timeout_s=TIMEOUT_S,
                     what="the uncached model's predictor pod")  # fmt: skip
    (control,) = _pods(cluster, "uncached")
    inits = [c["name"] for c in control["spec"].get("initContainers", [])]
    assert "storage-initializer" in inits, inits
