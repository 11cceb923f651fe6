"""Model weights cached on the GPU nodes, on the real KServe (v0.20.0, built here): its local
model controller, node agent and webhooks take the node group and the cache radixfleet renders
for a GPU pool with `model_cache_gib` (radixfleet/render/modelcache.py, what the Pulumi program
deploys), and a cached model's predictor mounts the node's copy of its weights instead of
downloading them.

The test node carries the labels of infra/'s caching H100 nodes. What is proven: the rendered
objects are admitted (the CRDs' schemas, the cache's webhook, which also refuses a second cache
of the same weights: why radixfleet renders one cache per storage URI); the controller puts the
model on the node's LocalModelNode and the agent, running on the node, starts the model's
download there; the predictor of an InferenceService reading those weights (annotated with its
GPU type's node group, as the catalog renders it) runs with the cache's claim mounted at
`/mnt/models` and no storage-initializer; one reading weights no cache holds still gets the
storage-initializer (the control).

Not run: the download itself. It is a Job of KServe's storage-initializer image (Python with
the clouds' SDKs), not built here: the Job waits for its image and the node's folder stays
empty, which the emulated predictor does not mind (it reads no weights).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from inferenceservices.builder import NODE_GROUP, build_inference_service
from radixfleet import dataplane
from radixfleet.config import GpuPool, Region, load_catalog
from radixfleet.platform import DEFAULT_DEPLOYMENT_MODE
from radixfleet.render.modelcache import NODE_LABEL, NODE_PATH, model_cache
from testbed import addons, images, session
from testbed.cluster import Cluster
from testbed.emulated import DATA_PLANE_KEY, emulated_isvc, get
from testbed.layout import NODE_NAME
from tests.cluster.conftest import REPO

NAMESPACE = "model-cache-check"
WEIGHTS = "s3://models-check/meta-llama/Llama-3.1-8B-Instruct"
UNCACHED = "s3://models-check/meta-llama/Llama-3.1-70B-Instruct"
TIMEOUT_S = 240.0
CATALOG = load_catalog(REPO / "inferenceservices" / "catalog.yaml")
# The test node's pool (testbed/session.py's NODE_LABELS), caching as a catalog would have it.
POOL = GpuPool(name="h100", instance_type="p5.48xlarge", gpu_type="H100", gpus_per_node=8,
               max_nodes=1, model_cache_gib=100)  # fmt: skip
MODEL = CATALOG.models[0].model_copy(update={"regions": ["test"], "storage_uri": WEIGHTS})


def _rendered(host_path: str) -> list[dict[str, Any]]:
    """The node group and cache infra deploys for `POOL` and `MODEL`, the node's folder moved
    under the test bed's run directory (KServe's chart keeps it at `NODE_PATH` of the host)."""
    docs = model_cache(Region(name="test", gpu_pools=[POOL]), [MODEL])
    for doc in docs:
        if doc["kind"] == "LocalModelNodeGroup":
            volume = doc["spec"]["persistentVolumeSpec"]
            assert volume["local"] == {"path": NODE_PATH}
            volume["local"]["path"] = host_path
    return docs


@pytest.fixture(scope="module")
def local_models(kserve: Cluster) -> Iterator[Cluster]:
    """KServe's local model controller and agent, the node labelled as a caching pool's."""
    folder = kserve.layout.run_dir / "node-models"
    folder.mkdir(parents=True, exist_ok=True)
    os.chown(folder, images.NONROOT, images.NONROOT)  # the agent runs as 65532
    kserve.kubectl("label", "node", NODE_NAME, "--overwrite", f"{NODE_LABEL}=true")
    installed = session.install_local_models(
        kserve, node_selector={NODE_LABEL: "true"}, host_path=folder
    )
    kserve.kubectl("create", "namespace", NAMESPACE)
    kserve.kubectl(
        "apply", "--server-side", "--field-manager=radixfleet", "-k", str(REPO / "runtimes")
    )
    try:
        yield kserve
    finally:
        # The caches first, while their controller still runs to release its finalizer.
        kserve.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=120s",
                       check=False)  # fmt: skip
        for kind in ("localmodelcaches", "localmodelnodegroups", "localmodelnodes"):
            kserve.kubectl("delete", kind, "--all", "--wait=true", "--timeout=120s", check=False)
        session.remove(kserve, installed)
        kserve.kubectl("label", "node", NODE_NAME, f"{NODE_LABEL}-", check=False)


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


def _node_lists(cluster: Cluster, uri: str) -> bool:
    found = cluster.kubectl("get", "localmodelnodes", NODE_NAME, "-o", "json", check=False)
    models = json.loads(found.stdout)["spec"]["localModels"] if found.returncode == 0 else []
    return any(m["sourceModelUri"] == uri for m in models)


def _download_jobs(cluster: Cluster, cache: str) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = get(cluster, "jobs", "-n", addons.LOCALMODEL_JOBS,
                                     "-l", f"model={cache},node={NODE_NAME}")["items"]  # fmt: skip
    return jobs


def test_a_cached_models_predictor_mounts_the_nodes_copy_of_its_weights(
    local_models: Cluster,
) -> None:
    cluster, folder = local_models, local_models.layout.run_dir / "node-models"
    docs = _rendered(str(folder))
    (group,) = [d["metadata"]["name"] for d in docs if d["kind"] == "LocalModelNodeGroup"]
    (rendered,) = [d for d in docs if d["kind"] == "LocalModelCache"]
    cache = rendered["metadata"]["name"]
    session.apply(cluster, docs)

    twin = {**rendered, "metadata": {"name": f"{cache}-again"}}  # the same weights again
    refused = cluster.kubectl("create", "-f", "-", stdin=json.dumps(twin), check=False)
    assert refused.returncode != 0 and "same StorageURI" in refused.stderr, refused.stderr

    session.wait_for(lambda: _node_lists(cluster, WEIGHTS), timeout_s=TIMEOUT_S,
                     what="the model on the node's LocalModelNode")  # fmt: skip
    session.wait_for(lambda: bool(_download_jobs(cluster, cache)), timeout_s=TIMEOUT_S,
                     what="the agent's download job on the node")  # fmt: skip

    image = images.radixfleet()
    session.load_images(cluster, [image])
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
    claim = get(cluster, "pvc", f"{cache}-{group}", "-n", NAMESPACE)
    volume = get(cluster, "pv", claim["spec"]["volumeName"])
    assert claim["status"]["phase"] == "Bound" and volume["spec"]["local"]["path"] == str(folder)

    session.wait_for(lambda: bool(_pods(cluster, "uncached")), timeout_s=TIMEOUT_S,
                     what="the uncached model's predictor pod")  # fmt: skip
    (control,) = _pods(cluster, "uncached")
    inits = [c["name"] for c in control["spec"].get("initContainers", [])]
    assert "storage-initializer" in inits, inits
