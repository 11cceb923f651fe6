"""InferenceServices of the emulated SGLang image for the cluster tests and the cluster demo, and
a streamed chat call.

The predictor uses the rendered `sglang` runtime as rendered; only the image is radixfleet's (a
model's container fields merge over its runtime's), and the weights are an empty folder on the
node behind a claim: with no storageUri at all KServe treats a predictor as multi-model and adds
its agent (an image not built here), and an s3:// one runs the storage initializer, which needs
a model store to download from; pvc:// mounts the claim. KServe mounts it when it creates the
pod (its pod mutator), so Knative never sees the volume and needs no persistent-volume-claim
feature for it.
"""

from __future__ import annotations

import json
import secrets
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from radixfleet import dataplane, labels
from testbed.cluster import Cluster, is_ready

MODE = "serving.kserve.io/deploymentMode"
# The emulated replica's tokenizer, in the test bed's router image
# (testbed/containerfiles/tokenizers/README.md): every emulated model names it, so its routers
# count prompts as its replicas do.
ROUTER_TOKENIZER = "/opt/smg/tokenizers/emulator"
TOKENIZER = labels.TOKENIZER  # (`emulated_isvc`'s argument `labels` hides the module)
FIT_TO_THE_NODE = "radixfleet-test-bed-fit-to-the-node"


# The data plane's key in every test namespace this process makes (radixfleet.dataplane): the
# rendered runtimes start SGLang with `--api-key` from it, so a test calling a predictor sends it.
DATA_PLANE_KEY = secrets.token_urlsafe(24)


def fit_to_the_node() -> list[dict[str, Any]]:
    """TEST BED ONLY: a MutatingAdmissionPolicy (beta in 1.35; the test bed's API server enables
    it) that brings a predictor container's CPU and memory requests in tenant namespaces down to
    what this 2-core node has, so manifests apply as written (sized for a p5 node: 8 CPUs and
    32 GiB and up). Its GPU request, its limits and everything else stay as declared."""
    small = {"cpu": "100m", "memory": "128Mi"}
    containers = (
        "object.spec.containers.filter(c, c.name == 'kserve-container').map(c, "
        "Object.spec.containers{name: c.name, resources: Object.spec.containers.resources{"
        f"requests: {json.dumps(small)}}}}})"
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1beta1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": FIT_TO_THE_NODE},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["pods"],
            }]},
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": f"Object{{spec: Object.spec{{containers: {containers}}}}}",
            }}],
        },
    }  # fmt: skip
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1beta1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": FIT_TO_THE_NODE},
        "spec": {"policyName": FIT_TO_THE_NODE, "matchResources": {"namespaceSelector": {
            "matchExpressions": [{"key": labels.TENANT, "operator": "Exists"}]}}},
    }  # fmt: skip
    return [policy, binding]


KEEP_MULTINODE_PARTS = "radixfleet-test-bed-keep-multinode-parts"


def keep_multinode_parts() -> list[dict[str, Any]]:
    """TEST BED ONLY, around a KServe v0.20.0 bug (kserve/kserve#6113, fixed upstream after
    it): in Standard mode, the predictor's new canary clean-up deletes, in every reconcile,
    each Deployment and Service labelled with the InferenceService and `component: predictor`
    that is not the head's, so a multi-node predictor's worker Deployment and its head and
    worker Services live for under a second, and no worker ever joins its head. This
    MutatingAdmissionPolicy takes the `component` label off exactly those objects (the worker
    Deployment `<isvc>-predictor-worker`, the Services KServe labels `multinode/role`), so the
    clean-up's selector misses them; their own selectors, and everything else, are untouched.
    A cluster on KServe v0.20.0 needs the same (or a KServe with the fix): infra/README.md."""
    part = ("has(object.metadata.labels) && 'component' in object.metadata.labels && "
            "(object.metadata.name.endsWith('-predictor-worker') || "
            "'multinode/role' in object.metadata.labels)")  # fmt: skip
    rules = [
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
         "resources": ["deployments"]},
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
         "resources": ["services"]},
    ]  # fmt: skip
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1beta1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": KEEP_MULTINODE_PARTS},
        "spec": {
            "matchConstraints": {"resourceRules": rules},
            "matchConditions": [{"name": "a-multinode-part", "expression": part}],
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {
                "expression": "[JSONPatch{op: 'remove', path: '/metadata/labels/component'}]"}}],
        },
    }  # fmt: skip
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1beta1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": KEEP_MULTINODE_PARTS},
        "spec": {"policyName": KEEP_MULTINODE_PARTS, "matchResources": {"namespaceSelector": {
            "matchExpressions": [{"key": labels.TENANT, "operator": "Exists"}]}}},
    }  # fmt: skip
    return [policy, binding]


def model_volume(
    cluster: Cluster, *, namespace: str, model: str, data_plane_key: bool = True
) -> list[dict[str, Any]]:
    """A PersistentVolume on a node-local folder and its claim `models` in `namespace`, and the
    namespace's data-plane key Secret as radixfleet's operator would create it (unless
    `data_plane_key` is False: the test of the operator creating it)."""
    folder = cluster.layout.run_dir / "models" / namespace
    (folder / model).mkdir(parents=True, exist_ok=True)
    key = [dataplane.secret(namespace, key=DATA_PLANE_KEY)] if data_plane_key else []
    return [
        *key,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"models-{namespace}"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "hostPath": {"path": str(folder)},
                "claimRef": {"namespace": namespace, "name": "models"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "models", "namespace": namespace},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": f"models-{namespace}",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]


def emulated_isvc(
    image: str,
    *,
    name: str,
    namespace: str,
    mode: str,
    min_replicas: int = 1,
    max_replicas: int = 1,
    annotations: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    storage_uri: str | None = None,
    args: Sequence[str] = (),
) -> dict[str, Any]:
    """An InferenceService of the emulated SGLang replica on one advertised GPU per replica;
    `env` adds to the container's environment (a change of it makes a new revision) and `args`
    to the runtime's sglang arguments, as a catalog model's do. Its weights are claim `models`'
    folder of its name (`model_volume`) unless `storage_uri` says otherwise."""
    environment = {"RADIXFLEET_EMULATOR_WARM": "1", **(env or {})}
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": {MODE: mode, TOKENIZER: ROUTER_TOKENIZER, **(annotations or {})},
        },
        "spec": {
            "predictor": {
                "minReplicas": min_replicas,
                "maxReplicas": max_replicas,
                "model": {
                    "modelFormat": {"name": "sglang"},
                    "runtime": "sglang",
                    "storageUri": storage_uri or f"pvc://models/{name}",
                    "image": image,
                    "imagePullPolicy": "Never",
                    **({"args": list(args)} if args else {}),
                    "env": [{"name": k, "value": v} for k, v in environment.items()],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1"},
                        "requests": {"nvidia.com/gpu": "1"},
                    },
                },
            }
        },
    }


def ready(cluster: Cluster, kind: str, name: str, namespace: str) -> bool:
    """Whether the object's Ready condition is True."""
    found = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    if found.returncode != 0:
        return False
    return is_ready(json.loads(found.stdout))


def get(cluster: Cluster, *args: str) -> dict[str, Any]:
    """`kubectl get ARGS -o json`, parsed."""
    found: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return found


def stream_chat(
    url: str, model: str, *, headers: Mapping[str, str] | None = None, timeout_s: float = 120.0
) -> list[str]:
    """POST a streamed /v1/chat/completions; the content pieces of the answer's chunks (the
    stream must end with `data: [DONE]`)."""
    body = {
        "model": model,
        "stream": True,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "Say hello."}],
    }
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **data_plane_headers(), **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        events = [
            line for line in response.read().decode().splitlines() if line.startswith("data: ")
        ]
    assert events and events[-1] == "data: [DONE]", events
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    return [c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]]


def data_plane_headers() -> dict[str, str]:
    """What a call straight to a predictor or a router must carry (the entry adds it itself)."""
    return dataplane.bearer(DATA_PLANE_KEY)


def traffic_split(predictor: Mapping[str, Any]) -> dict[str, int]:
    """KServe's traffic status of a predictor as revision -> percent (0% entries left out)."""
    split: dict[str, int] = {}
    for target in predictor.get("traffic", []):
        if target.get("percent"):
            name = target["revisionName"]
            split[name] = split.get(name, 0) + target["percent"]
    return split


def predictor_status(cluster: Cluster, name: str, namespace: str) -> dict[str, Any]:
    """KServe's `status.components.predictor` of an InferenceService ({} before it has one)."""
    isvc = get(cluster, "isvc", name, "-n", namespace)
    found: dict[str, Any] = isvc.get("status", {}).get("components", {}).get("predictor", {})
    return found


def revision_serving(cluster: Cluster, name: str, namespace: str, revision: str) -> bool:
    """Whether `revision` is the latest created and ready one and the InferenceService Ready."""
    predictor = predictor_status(cluster, name, namespace)
    return (
        predictor.get("latestCreatedRevision") == revision
        and predictor.get("latestReadyRevision") == revision
        and ready(cluster, "isvc", name, namespace)
    )
