"""InferenceServices rendered from the catalog: one per model and tenant, in the tenant's namespace.

Each tenant gets its own replicas of a model it uses (its GPUs count against its own budget);
LoRA adapters ride on a shared base model instead. Everything a controller needs to know about a
model (GPUs per replica, SLOs, regions) travels as `radixfleet.io/*` labels and annotations.
"""

from __future__ import annotations

import math
from typing import Any

from radixfleet import dataplane, labels
from radixfleet.config.catalog import Catalog, Model, Tenant
from radixfleet.config.gpus import gpu_label_value
from radixfleet.config.modelcache import cacheable, node_group_name
from radixfleet.config.serving import model_metadata, model_name, pd_role
from radixfleet.config.sizing import hicache_gb_per_rank, pod_memory_gib, weight_gib
from radixfleet.platform import KNATIVE_NAMESPACE, MONITORING_NAMESPACE, PLATFORM_NAMESPACE
from radixfleet.profile import resolve_profile
from radixfleet.render.isolation import (
    deny_ingress,
    from_namespace,
    network_policy,
    pod_security_labels,
)
from radixfleet.render.runtimes import PD_BOOTSTRAP_PORT
from radixfleet.render.scaling import concurrency_target
from radixfleet.render.yamlout import Notes

ADAPTER_DIR = "/mnt/adapters"
DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
# Which of a cache's node groups the predictor runs on: KServe mounts that group's claim.
NODE_GROUP = "serving.kserve.io/nodegroup"
AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"
KNATIVE = "Knative"
STANDARD = "Standard"
# Knative caps a request's timeout at 600 s (max-revision-timeout-seconds); long generations of
# a streaming response need all of it.
REQUEST_TIMEOUT_S = 600
# Cold start budget on a fresh GPU node: the node (80-120 s), SGLang start-up and CUDA graphs
# (45-90 s), plus the download at the model store's speed (CALIBRATION.md).
NODE_JOIN_S = 120
STARTUP_S = 90
DOWNLOAD_MIB_S = 250


def progress_deadline_s(model: Model) -> int:
    """Knative's progress deadline for a revision of `model`, in whole minutes, at least 10.

    Knative's default (600 s) fails revisions of large models before their weights are even
    down (knative/serving#15316); twice the expected cold start leaves room for a slow node.
    """
    cold_start = NODE_JOIN_S + STARTUP_S + weight_gib(model) * 1024 / DOWNLOAD_MIB_S
    return max(600, 60 * math.ceil(2 * cold_start / 60))


def _model_args(model: Model) -> list[str]:
    args = ["--context-length", str(model.context_length)]
    if model.tensor_parallel > 1:
        args += ["--tp-size", str(model.tensor_parallel)]
    if model.pipeline_parallel > 1:
        args += ["--pp-size", str(model.pipeline_parallel)]
    if model.expert_parallel > 1:
        args += ["--ep-size", str(model.expert_parallel)]
    if model.lora_adapters:
        paths = [f"{a.name}={ADAPTER_DIR}/{a.name}" for a in model.lora_adapters]
        args += ["--lora-paths", *paths, "--max-loras-per-batch", str(model.max_loras_per_batch)]
    return args + _hicache_args(model) + _pd_args(model)


def _pd_args(model: Model) -> list[str]:
    """A prefill/decode role's flags beyond its runtime's: the pair's name, which both roles
    answer to (smg sends them the request as the tenant named it), and the KV transfer engine."""
    if model.disaggregation is None:
        return []
    backend = model.disaggregation.transfer_backend
    return ["--served-model-name", model_name(model), "--disaggregation-transfer-backend", backend]


def _hicache_args(model: Model) -> list[str]:
    """SGLang's HiCache flags of the model's host KV tier, sized per rank: `--hicache-size` is
    each rank's own pool (crosscheck.py holds it at least 1 GB)."""
    tier = model.kv_cache
    if tier is None:
        return []
    args = ["--enable-hierarchical-cache", "--hicache-size", str(hicache_gb_per_rank(model))]
    args += ["--hicache-write-policy", tier.write_policy]
    if tier.storage_backend is not None:
        args += ["--hicache-storage-backend", tier.storage_backend]
    return args


def _resources(model: Model) -> dict[str, Any]:
    gpus = model.gpus_per_replica // model.nodes
    memory_gi = pod_memory_gib(model)
    cpu = max(4, 8 * gpus)
    return {
        "requests": {labels.GPU_RESOURCE: str(gpus), "cpu": str(cpu), "memory": f"{memory_gi}Gi"},
        "limits": {labels.GPU_RESOURCE: str(gpus), "memory": f"{memory_gi}Gi"},
    }


def _storage(model: Model) -> dict[str, Any]:
    if not model.lora_adapters:
        return {"storageUri": model.storage_uri}
    # Several URIs: the base weights where the runtime expects them, each adapter beside them.
    uris = [{"uri": model.storage_uri, "mountPath": "/mnt/models"}]
    uris += [
        {"uri": a.storage_uri, "mountPath": f"{ADAPTER_DIR}/{a.name}"} for a in model.lora_adapters
    ]
    return {"storageUris": uris}


# The service account of serving pods in tenant namespaces (build_model_reader).
MODEL_READER = "radixfleet-model-reader"


def _predictor(model: Model) -> dict[str, Any]:
    storage = _storage(model)
    predictor: dict[str, Any] = {
        "minReplicas": model.min_replicas,
        "maxReplicas": model.max_replicas,
        "scaleMetric": "concurrency",
        "scaleTarget": concurrency_target(model, resolve_profile(model.profile)),
        "timeout": REQUEST_TIMEOUT_S,
        "serviceAccountName": MODEL_READER,
        "nodeSelector": {labels.GPU_TYPE: gpu_label_value(model.gpu_type)},
        "tolerations": [labels.gpu_toleration()],
        "model": {
            "modelFormat": {"name": "sglang"},
            "runtime": model.runtime,
            **({"storageUri": storage["storageUri"]} if "storageUri" in storage else {}),
            "args": _model_args(model),
            **({"env": hub_token_env(model)} if model.hf_token_secret else {}),
            "resources": _resources(model),
        },
    }
    if "storageUris" in storage:
        predictor["storageUris"] = storage["storageUris"]
    if model.canary_policy:
        # KServe pins every new predictor revision at 0 % until the canary controller steps it;
        # without the field a new revision takes all traffic as soon as it is ready.
        predictor["canaryTrafficPercent"] = 0
    if model.nodes == 1:
        # Knative's pods, each behind its revision's router, which sends only to `serving`
        # ones: a new pod pre-warming is taken out meanwhile (radixfleet/labels.py).
        predictor["labels"] = {labels.POOL: labels.SERVING_POOL}
    predictor |= _pd_pod_metadata(model)
    if model.nodes > 1:
        predictor["workerSpec"] = {
            "pipelineParallelSize": model.nodes,
            "tensorParallelSize": model.gpus_per_replica // model.nodes,
            "containers": [
                {
                    "name": "worker-container",
                    "args": _model_args(model),
                    "resources": _resources(model),
                }
            ],
        }
    return predictor


def hub_token_env(model: Model) -> list[dict[str, Any]]:
    """HF_TOKEN from the Secret the catalog names (the hub's client and KServe's storage
    initializer read it for a gated repository); by reference: the value is in no manifest."""
    ref = model.hf_token_secret
    if ref is None:
        return []
    return [{"name": "HF_TOKEN",
             "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}]  # fmt: skip


def _pd_pod_metadata(model: Model) -> dict[str, Any]:
    """A prefill/decode role's pods carry the pair's name and their role (for the platform team's
    `kubectl get pods -l`, and Prometheus's scrape); a prefill's also its bootstrap port, where
    smg's discovery reads it."""
    role = pd_role(model)
    if role is None:
        return {}
    pod_labels = {labels.POOL: labels.SERVING_POOL, labels.MODEL: model_name(model),
                  labels.PD_ROLE: role}  # fmt: skip
    if role == "decode":
        return {"labels": pod_labels}
    return {"labels": pod_labels,
            "annotations": {labels.BOOTSTRAP_PORT_ANNOTATION: str(PD_BOOTSTRAP_PORT)}}  # fmt: skip


def _annotations(model: Model) -> dict[str, str]:
    multinode = model.nodes > 1
    annotations = {
        # Multi-node replicas only run in Standard (raw Deployment) mode; everything else runs
        # on Knative and scales to zero. KServe 0.20 renamed the modes (RawDeployment and
        # Serverless still parse, as deprecated aliases).
        DEPLOYMENT_MODE: STANDARD if multinode else KNATIVE,
        labels.GPU_TYPE: model.gpu_type,
        labels.GPUS_PER_REPLICA: str(model.gpus_per_replica),
        labels.SLO_TTFT_P95_MS: str(model.slo.ttft_p95_ms),
        labels.SLO_ITL_P95_MS: str(model.slo.itl_p95_ms),
        labels.REGIONS: ",".join(model.regions),
    }
    if multinode:
        # KServe's webhook refuses a workerSpec unless autoscaling is off: a multi-node replica
        # is one head and its workers, and no autoscaler knows how to add half of one
        # (kserve v0.20.0 pkg/apis/serving/v1beta1/inference_service_validation.go,
        # validateMultiNodeVariables).
        annotations[AUTOSCALER_CLASS] = "none"
    else:
        annotations["serving.knative.dev/progress-deadline"] = f"{progress_deadline_s(model)}s"
    if cacheable(model) and not multinode:
        # Where the region keeps these weights on its nodes, the predictor mounts the cache of
        # its own GPU type's nodes (radixfleet/render/modelcache.py); elsewhere KServe ignores it.
        annotations[NODE_GROUP] = node_group_name(model.gpu_type)
    if model.canary_policy:
        annotations[labels.CANARY_POLICY] = model.canary_policy
    if model.tokenizer_source:
        annotations[labels.TOKENIZER] = model.tokenizer_source
    if model.hf_token_secret and (model.tokenizer_source or "").startswith("hf://"):
        # The router fetches the tokenizer from the same gated repository: it reads this key.
        ref = model.hf_token_secret
        annotations[labels.HF_TOKEN_SECRET] = f"{ref.name}/{ref.key}"
    return annotations


def build_inference_service(model: Model, tenant: Tenant) -> tuple[dict[str, Any], Notes]:
    """The InferenceService serving `model` to `tenant`, and comments for its choices."""
    model = model.for_tenant(tenant.name)
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": model_metadata(model, tenant) | {"annotations": _annotations(model)},
        "spec": {"predictor": _predictor(model)},
    }
    notes = {
        "spec.predictor.scaleTarget": "In-flight requests per replica: the largest batch that "
        "keeps inter-token latency within\nthe SLO and fits the KV cache "
        "(radixfleet/render/scaling.py explains the derivation).",
        "spec.predictor.minReplicas": "0 lets Knative scale the model to zero when idle "
        "(KServe's default is 1)."
        if model.min_replicas == 0
        else "Kept warm: this model never scales to zero.",
    }
    return isvc, notes


def build_namespaces(catalog: Catalog) -> list[dict[str, Any]]:
    """Namespaces of every tenant that runs a model, labeled with their tenant and their Pod
    Security levels (radixfleet/labels.py says which and why)."""
    used = {t for m in catalog.models for t in m.tenants}
    owned = {labels.MANAGED_BY: labels.MANAGER}
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": ns,
                "labels": {labels.TENANT: tenant.name, **owned, **pod_security_labels()},
            },
        }
        for tenant in catalog.tenants
        if tenant.name in used
        for ns in tenant.namespaces
    ]


def build_model_reader(namespace: str) -> dict[str, Any]:
    """The service account a tenant namespace's serving pods run as: KServe's storage
    initializer reads the weights and adapters as it, and infra gives it a cloud role that
    reads only that tenant's models (not the `default` account, which every pod there gets).

    Its Kubernetes token stays mounted: it is bound to no Role, and EKS Pod Identity's
    credentials have been reported to fail with automountServiceAccountToken false."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": MODEL_READER, "namespace": namespace,
                     "labels": {labels.MANAGED_BY: labels.MANAGER}},
    }  # fmt: skip


# KServe's label on every predictor pod (Knative or raw Deployment), naming its InferenceService.
PREDICTOR_POD_LABEL = "serving.kserve.io/inferenceservice"


def build_network_policies(namespace: str) -> list[dict[str, Any]]:
    """Who may open a connection to a pod of a tenant namespace: nobody, but

    - a router (smg, port 8000): the region entry, and Prometheus for its metrics;
    - a predictor: its namespace's routers, other predictors there (the ranks of a multi-node
      model; a prefill/decode pair's decode fetching KV from the prefill's bootstrap port), the
      entry (on Knative's path to a model at zero, and when
      Knative routes a revision's Service straight to its pods), Knative's activator and
      autoscaler, and Prometheus.

    So a tenant's own pods, and every other namespace's, reach a model only through the entry,
    which authenticates and charges them. Egress stays open: weights come from an object store
    NetworkPolicy cannot name (it has no host names)."""
    return [
        deny_ingress(namespace),
        network_policy(namespace, "radixfleet-routers", _routers(), [
            {"from": [from_namespace(PLATFORM_NAMESPACE)],
             "ports": [{"port": dataplane.ROUTER_PORT}]},
            {"from": [from_namespace(MONITORING_NAMESPACE)],
             "ports": [{"port": dataplane.ROUTER_METRICS_PORT}]},
        ]),
        network_policy(namespace, "radixfleet-predictors", _predictors(), [{"from": [
            {"podSelector": _routers()}, {"podSelector": _predictors()},
            from_namespace(PLATFORM_NAMESPACE), from_namespace(KNATIVE_NAMESPACE),
            from_namespace(MONITORING_NAMESPACE),
        ]}]),
    ]  # fmt: skip


def _routers() -> dict[str, Any]:
    return {"matchLabels": {labels.COMPONENT: labels.ROUTER_COMPONENT}}


def _predictors() -> dict[str, Any]:
    return {"matchExpressions": [{"key": PREDICTOR_POD_LABEL, "operator": "Exists"}]}
