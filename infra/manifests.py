"""What the Pulumi components put into each cluster, as plain data: no Pulumi, no I/O but reads.

Node labels and taints, Helm values, the Knative Serving resource, the operator's RBAC and
Deployment (from radixfleet/render/operator.py, the same as deploy/operator/), and the runtimes
and InferenceServices of a region. Keeping them pure lets the tests check the policies (labels
the manifests select, least privilege) without running Pulumi.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from radixfleet import labels
from radixfleet.config import Catalog, GpuPool, Region
from radixfleet.config.catalog import KNOWN_RUNTIMES
from radixfleet.config.gpus import gpu_label_value
from radixfleet.config.serving import Served, api_keys_secret, namespace_of, served
from radixfleet.controllers.failover.objects import failover_policy
from radixfleet.dataplane.signals import PREFIX as SIGNALS_PREFIX
from radixfleet.kit.rbac import CLUSTER, scoped
from radixfleet.kit.registry import catalog_objects
from radixfleet.platform import DEFAULT_DEPLOYMENT_MODE, KNATIVE_FEATURES, KSERVE_NAMESPACE
from radixfleet.render import data_plane_guard, entry, headroom, modelcache, monitoring, operator
from radixfleet.render.inferenceservices import (
    build_inference_service,
    build_model_reader,
    build_namespaces,
    build_network_policies,
    build_router_access,
)
from radixfleet.render.runtimes import build_runtime
from radixfleet.render.tenant_access import secret_access

Manifest = dict[str, Any]

NODE_ROLE = f"{labels.GROUP}/node-role"
CONTROLLERS = operator.NAME
ENTRY = entry.NAME
CONTROLLERS_NAMESPACE = operator.NAMESPACE
MONITORING_NAMESPACE = "monitoring"
DASHBOARD_FOLDER = "radixfleet"
KNATIVE_NAMESPACE = "knative-serving"
KNATIVE_OPERATOR = "knative-operator"  # the operator chart's release and its namespace
# Encrypted gp3, the default storage class of every cluster.
STORAGE_CLASS = "gp3-encrypted"
# `fleet.<region>.<domain>`: where the failover reads a region's signals (its entry).
SIGNALS_HOST = "fleet"
FLEET_TOKEN_SECRET = operator.FLEET_TOKEN_SECRET
FLEET_TOKEN_KEY = operator.FLEET_TOKEN_KEY


def gpu_node_labels(pool: GpuPool) -> dict[str, str]:
    """Labels of a GPU pool's nodes: what InferenceServices select and controllers count, and
    where KServe's model cache agent runs."""
    found = {
        labels.GPU_TYPE: gpu_label_value(pool.gpu_type),
        labels.GPU_POOL: pool.name,
        labels.CAPACITY_TYPE: pool.capacity,
        NODE_ROLE: "gpu",
        # The NVIDIA device plugin chart's default affinity looks for this label, which
        # node-feature-discovery would otherwise have to set.
        "nvidia.com/gpu.present": "true",
    }
    if pool.model_cache_gib:
        found.update(modelcache.NODE_LABELS)
    return found


SYSTEM_NODE_LABELS = {NODE_ROLE: "system"}

GPU_TOLERATION = labels.gpu_toleration()

# Add-ons that must run on GPU nodes select them by the GPU type label's presence.
GPU_NODE_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": labels.GPU_TYPE, "operator": "Exists"}]}
            ]
        }
    }
}


def kubeconfig(*, cluster: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that authenticates with `aws eks get-token`: no static credentials."""
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster, "--region", region],
        }
    }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": endpoint, "certificate-authority-data": ca_data},
            }
        ],
        "users": [{"name": cluster, "user": user}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
        "current-context": cluster,
    }
    return json.dumps(config)


def device_plugin_values() -> Manifest:
    return {"tolerations": [GPU_TOLERATION], "affinity": GPU_NODE_AFFINITY}


def dcgm_exporter_values() -> Manifest:
    return {
        "tolerations": [GPU_TOLERATION],
        "affinity": GPU_NODE_AFFINITY,
        # kube-prometheus-stack discovers ServiceMonitors in every namespace (see below).
        "serviceMonitor": {"enabled": True, "interval": "15s"},
    }


def system_placement() -> Manifest:
    """Values that keep an add-on on the system nodes, never on a GPU node."""
    return {"nodeSelector": SYSTEM_NODE_LABELS}


def cert_manager_values() -> Manifest:
    return {"crds": {"enabled": True}, **system_placement()}


def kserve_values(*, domain: str, model_cache: bool = False) -> Manifest:
    """KServe's controller; with `model_cache`, its webhook also mounts cached weights
    (`LocalModelCache`s, which then must exist: `kserve_localmodel_values`)."""
    values: Manifest = {
        "kserve": {
            "controller": {
                # InferenceServices without the annotation run on Knative and scale to zero
                # (validate assumes the same).
                "deploymentMode": DEFAULT_DEPLOYMENT_MODE,
                # Knative's ingress here is Kourier, not Istio: KServe must not write Istio
                # VirtualServices.
                "gateway": {"domain": domain, "disableIstioVirtualHost": True},
                **system_placement(),
            }
        }
    }
    if model_cache:
        values["kserve"]["localmodel"] = {"enabled": True, "jobNamespace": MODEL_CACHE_JOBS}
    return values


# KServe's download jobs run here, as the namespace's default service account (the agent sets
# none), which Pod Identity lets read the cached models' weights.
MODEL_CACHE_JOBS = "kserve-localmodel-jobs"
MODEL_CACHE_JOB_ACCOUNT = "default"


def kserve_localmodel_values() -> Manifest:
    """KServe's local model controller and its node agent, the agent on the GPU nodes of
    caching pools only (its chart's default selects a label of its own)."""
    return {
        "kserve": {
            "localmodelnode": {
                "controller": {
                    "nodeSelector": dict(modelcache.NODE_LABELS),
                    "tolerations": [GPU_TOLERATION],
                }
            },
        }
    }


# The Prometheus the chart runs, pinned: 3.3.1 stored garbled series (names cut out of the
# exposition) scraping the emulated SGLang replica, in prometheus_client 0.26's classic text and
# in its OpenMetrics (what SGLang's /metrics serves Prometheus); 3.5.0, the LTS release, did not.
PROMETHEUS_VERSION = "v3.5.0"


def prometheus_stack_values(*, admin_secret: str, storage_class: str) -> Manifest:
    volume = {
        "spec": {
            "storageClassName": storage_class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "100Gi"}},
        }
    }
    return {
        "grafana": {
            # The password lives in a Secret the program fills from a random value, never in
            # the chart's default ("prom-operator").
            "admin": {
                "existingSecret": admin_secret,
                "userKey": "admin-user",
                "passwordKey": "admin-password",
            },
            # Dashboards arrive as labeled ConfigMaps from any namespace (infra/ and teams).
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": "grafana_dashboard",
                    "labelValue": "1",
                    "searchNamespace": "ALL",
                    # A ConfigMap's `grafana_folder` annotation picks its Grafana folder.
                    "folderAnnotation": "grafana_folder",
                    "provider": {"foldersFromFilesStructure": True},
                }
            },
            **system_placement(),
        },
        "prometheus": {
            "prometheusSpec": {
                # Without these, Prometheus only sees monitors and rules of this Helm release.
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
                "ruleSelectorNilUsesHelmValues": False,
                "image": {"tag": PROMETHEUS_VERSION},
                "retention": "15d",
                "storageSpec": {"volumeClaimTemplate": volume},
                **system_placement(),
            }
        },
    }


def cluster_autoscaler_values(*, cluster: str, region: str, service_account: str) -> Manifest:
    return {
        "autoDiscovery": {"clusterName": cluster},
        "awsRegion": region,
        "rbac": {"serviceAccount": {"create": True, "name": service_account}},
        "extraArgs": {
            "balance-similar-node-groups": "true",
            # GPU nodes are expensive: prefer the pool that wastes the least of a new node.
            "expander": "least-waste",
            "skip-nodes-with-system-pods": "false",
        },
        **system_placement(),
    }


def knative_operator_values() -> Manifest:
    """The Knative operator chart's values: its defaults (the operator and its webhook, one
    replica each, placed by the scheduler; the GPU nodes' taints keep them off GPU nodes). All
    of Serving's settings go in the KnativeServing below."""
    return {}


def knative_serving(
    *, version: str, domain: str, scale_to_zero: bool, stable_window: str, grace_period: str
) -> Manifest:
    """The KnativeServing resource the Knative operator turns into a Serving installation."""
    return {
        "apiVersion": "operator.knative.dev/v1beta1",
        "kind": "KnativeServing",
        "metadata": {"name": "knative-serving", "namespace": KNATIVE_NAMESPACE},
        "spec": {
            "version": version,
            "ingress": {"kourier": {"enabled": True, "service-type": "ClusterIP"}},
            "config": {
                "network": {"ingress-class": "kourier.ingress.networking.knative.dev"},
                "domain": {domain: ""},
                "autoscaler": {
                    "enable-scale-to-zero": "true" if scale_to_zero else "false",
                    "stable-window": stable_window,
                    "scale-to-zero-grace-period": grace_period,
                },
                # Large models need Knative's whole 600 s request budget (REQUEST_TIMEOUT_S).
                "defaults": {"max-revision-timeout-seconds": "600"},
                # The pod-spec features the predictors use (GPU node selection and taints), the
                # same set `radixfleet validate` judges them under; nothing more.
                "features": dict(KNATIVE_FEATURES),
            },
        },
    }


INGRESS_SERVICE = "radixfleet-ingress"


def ingress_spec() -> Manifest:
    """The region's load balancer Service, in front of the region entry (which authenticates,
    charges and routes every request; Kourier stays cluster-internal, where the entry wakes
    revisions from zero). TLS ends at the load balancer, whose annotations (certificate,
    security group) the cloud's region component supplies.
    """
    return {
        "type": "LoadBalancer",
        "selector": dict(entry.SELECTOR),
        "ports": [{"name": "https", "port": 443, "targetPort": "http"}],
    }


# --- the radixfleet controllers -------------------------------------------------------------


# Fields of what this program declares that a controller owns once it exists: `pulumi up`
# ignores their later changes (the way the failover owns the record weights), so it never
# resets a rollout in progress. The canary steps `canaryTrafficPercent` from the rendered 0.
OWNED_BY_CONTROLLERS: dict[str, list[str]] = {
    "InferenceService": ["spec.predictor.canaryTrafficPercent"],
}


def owned_by_controllers(manifest: Manifest) -> list[str]:
    """The fields of `manifest` that `pulumi up` leaves to radixfleet's controllers."""
    return list(OWNED_BY_CONTROLLERS.get(str(manifest.get("kind")), []))


# What `pulumi up` waits for on a created object before it counts as ready (pulumi-kubernetes'
# `pulumi.com/waitFor`, the syntax of `kubectl wait --for`). A Tenant: the quota controller's
# first accounting, since until then the GPU-budget admission policy refuses the tenant's
# models ("retry shortly") and pulumi-kubernetes does not retry a refusal.
AWAITED: dict[str, str] = {"Tenant": "jsonpath={.status.observedGeneration}"}
WAIT_FOR = "pulumi.com/waitFor"


def awaited(manifest: Manifest) -> Manifest:
    """`manifest` as `pulumi up` creates it: with what to wait for, if its kind has anything."""
    condition = AWAITED.get(str(manifest.get("kind")))
    if condition is None:
        return manifest
    metadata = manifest["metadata"]
    annotations = {**metadata.get("annotations", {}), WAIT_FOR: condition}
    return {**manifest, "metadata": {**metadata, "annotations": annotations}}


def load_crds(directory: Path) -> list[Manifest]:
    """The radixfleet CustomResourceDefinitions shipped in `directory` (none is fine)."""
    if not directory.is_dir():
        return []
    return [
        doc
        for path in sorted(directory.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
    ]


def controller_cluster_rules() -> list[Manifest]:
    """The operator's ClusterRole rules: exactly what the registered controllers' adapters
    declare plus what kopf needs, derived in one place (radixfleet/render/operator.py) for both
    this program and the kustomize base deploy/operator/.
    """
    return [r.to_manifest() for r in scoped(operator.operator_rules(), CLUSTER)]


def controller_deployment(
    *,
    image: str,
    replicas: int,
    region: str,
    router_image: str,
    with_failover: bool = False,
    node_selector: Mapping[str, str] = SYSTEM_NODE_LABELS,
) -> Manifest:
    """The operator's Deployment (`radixfleet operator run`), on the system nodes (by default
    the label infra's system node group carries): non-root, read-only, AWS access only via pod
    identity; its routers controller runs `router_image`; in one region of the fleet it also
    runs the failover."""
    args = ["--region", region, *(["--with-failover"] if with_failover else [])]
    return operator.deployment(
        image=image, replicas=replicas, args=args, env={"AWS_REGION": region},
        node_selector=dict(node_selector) or None, router_image=router_image,
    )  # fmt: skip


def entry_cluster_rules() -> list[Manifest]:
    """The region entry's ClusterRole rules (radixfleet/render/entry.py, as deploy/entry/)."""
    return [r.to_manifest() for r in scoped(entry.entry_rules(), CLUSTER)]


def entry_ledger() -> list[Manifest]:
    """The ConfigMap the entry's replicas keep their debts in, and the Role and RoleBinding that
    let the entry get and patch that one ConfigMap (radixfleet/render/entry.py)."""
    return [entry.ledger(), entry.platform_role(), entry.platform_role_binding()]


def entry_deployment(
    *, image: str, replicas: int, region: str, node_selector: Mapping[str, str] = SYSTEM_NODE_LABELS
) -> Manifest:
    """The region entry's Deployment, on the system nodes (as deploy/entry/)."""
    return entry.deployment(image=image, replicas=replicas, region=region,
                            node_selector=dict(node_selector) or None)  # fmt: skip


def entry_disruption_budget() -> Manifest:
    return entry.disruption_budget()


def entry_service() -> Manifest:
    """The entry's ClusterIP Service, which the operator's pre-warmer calls (as deploy/entry/)."""
    return entry.service()


def pod_monitors() -> list[Manifest]:
    """What the region's Prometheus scrapes: SGLang predictors and the operator, labelled as the
    controllers and dashboards query (radixfleet/render/monitoring.py, as deploy/monitoring/)."""
    return monitoring.pod_monitors()


def peering() -> Manifest:
    """The ClusterKopfPeering the operator's replicas elect their leader in."""
    return operator.peering()


def platform_namespace() -> Manifest:
    """radixfleet's namespace, enforcing Pod Security `restricted` (as deploy/operator/)."""
    return operator.namespace()


def platform_network_policies() -> list[Manifest]:
    """Who may reach the pods of radixfleet's namespace: clients the entry's HTTP port,
    Prometheus the metrics ports, nobody anything else (as deploy/operator/ and deploy/entry/)."""
    return [*operator.network_policies(), entry.network_policy()]


# --- what the catalog puts into a region ----------------------------------------------------


def gpu_headroom(region: Region, *, image: str) -> list[Manifest]:
    """The placeholders holding each pool's `headroom_gpus` free, and their PriorityClass once
    (radixfleet/render/headroom.py); nothing when no pool asks for headroom."""
    return headroom.headroom(region.gpu_pools, image=image)


def model_cache(
    catalog: Catalog, region: Region, *, bucket_from: str, bucket_to: str, image: str
) -> list[Manifest]:
    """The node groups and caches of the weights `region`'s GPU nodes keep
    (radixfleet/render/modelcache.py), read from the region's bucket like its
    InferenceServices (KServe matches a cache to a predictor by the storage URI), and the
    DaemonSet that hands the nodes' cache folder to KServe's agent (`image`: the
    controllers'); nothing when the region caches nothing."""
    docs = modelcache.model_cache(region, catalog.models)
    if not docs:
        return []
    # Beside KServe's own node agent: it needs a host folder and root, which radixfleet's
    # namespace (Pod Security `restricted`) refuses.
    keeper = modelcache.folder_keeper(image=image, namespace=KSERVE_NAMESPACE)
    return [keeper, *(rewrite_bucket(doc, bucket_from, bucket_to) for doc in docs)]


def runtimes(*, image: str) -> list[Manifest]:
    """Every SGLang ClusterServingRuntime, running `image` (a pinned reference): cluster-wide
    and cheap, so every region has them all."""
    return [build_runtime(name, image=image)[0] for name in KNOWN_RUNTIMES]


def _region_models(catalog: Catalog, region: Region) -> Iterator[Served]:
    """(model, tenant) of every InferenceService that runs in `region`."""
    return ((model, tenant) for model, tenant in served(catalog) if region.name in model.regions)


def region_inference_services(
    catalog: Catalog, region: Region, *, bucket_from: str, bucket_to: str
) -> list[Manifest]:
    """The InferenceServices of the models that run in `region`, reading the region's bucket."""
    return [
        rewrite_bucket(build_inference_service(model, tenant)[0], bucket_from, bucket_to)
        for model, tenant in _region_models(catalog, region)
    ]


def region_policies(catalog: Catalog, region: Region) -> list[Manifest]:
    """The controllers' objects beside the region's InferenceServices, as `radixfleet render`
    writes them into inferenceservices/ and by the same rule (each controller's `objects`,
    `radixfleet.kit.registry.catalog_objects`): every Tenant (the quota's budgets, the entry's
    keys), and the CanaryPolicies and AutoscalePolicies of the region's models."""
    return catalog_objects(catalog, _region_models(catalog, region))


def model_prefixes(inference_services: Sequence[Manifest], *, bucket: str) -> dict[str, list[str]]:
    """Per namespace, the prefixes of `bucket` its InferenceServices read (weights, adapters)."""
    found: dict[str, set[str]] = {}
    for isvc in inference_services:
        uris = _strings(isvc["spec"])
        prefixes = {
            u.removeprefix(f"s3://{bucket}/") for u in uris if u.startswith(f"s3://{bucket}/")
        }
        found.setdefault(isvc["metadata"]["namespace"], set()).update(prefixes)
    return {ns: sorted(prefixes) for ns, prefixes in sorted(found.items()) if prefixes}


def cached_prefixes(model_cache: Sequence[Manifest], *, bucket: str) -> list[str]:
    """The prefixes of `bucket` the region's `LocalModelCache`s download."""
    uris = [d["spec"]["sourceModelUri"] for d in model_cache if d["kind"] == "LocalModelCache"]
    return sorted(
        u.removeprefix(f"s3://{bucket}/") for u in uris if u.startswith(f"s3://{bucket}/")
    )


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def region_model_readers(catalog: Catalog, region: Region) -> list[Manifest]:
    """The service account serving pods run as in each of the region's tenant namespaces."""
    namespaces = sorted({namespace_of(t) for _, t in _region_models(catalog, region)})
    return [build_model_reader(namespace) for namespace in namespaces]


def region_router_access(catalog: Catalog, region: Region) -> list[Manifest]:
    """The routers' ServiceAccount, Role and RoleBinding in each of the region's namespaces."""
    namespaces = sorted({namespace_of(t) for _, t in _region_models(catalog, region)})
    return [obj for namespace in namespaces for obj in build_router_access(namespace)]


@dataclass(frozen=True)
class TenantKeys:
    """A tenant's key Secret in one region: where it goes and the values of its keys (secret:
    the Pulumi component marks them so)."""

    namespace: str
    secret: str
    values: Mapping[str, str]


def region_tenant_keys(
    catalog: Catalog, region: Region, values: Mapping[str, Mapping[str, str]]
) -> list[TenantKeys]:
    """The key Secret of each tenant served in `region` whose keys `values` holds (the stack's
    `tenantKeys`): the same values in every region, so a key works wherever its tenant is."""
    served = {tenant.name: tenant for _, tenant in _region_models(catalog, region)}
    return [
        TenantKeys(namespace_of(tenant), api_keys_secret(tenant), dict(values[name]))
        for name, tenant in sorted(served.items())
        if values.get(name)
    ]


def region_secret_access(catalog: Catalog, region: Region) -> list[Manifest]:
    """The operator's and the entry's Secrets access in each of the region's namespaces: the
    data plane's key and the API keys of the tenants there (radixfleet/render/tenant_access.py)."""
    return secret_access(tenant for _, tenant in _region_models(catalog, region))


def admission_policies() -> list[Manifest]:
    """The policies that keep the data plane's key and labels on its own pods in every tenant
    namespace (radixfleet/render/data_plane_guard.py) and the operator's controllers' (the
    quota's GPU budgets), and their bindings: deploy/operator/ and inferenceservices/ hold the
    same."""
    return [*data_plane_guard.manifests(), *operator.admission_policies()]


def region_network_policies(catalog: Catalog, region: Region) -> list[Manifest]:
    """The NetworkPolicies of each of the region's tenant namespaces."""
    namespaces = sorted({namespace_of(t) for _, t in _region_models(catalog, region)})
    return [obj for namespace in namespaces for obj in build_network_policies(namespace)]


def signals_name(region: str, domain: str) -> str:
    """The region's own name for the fleet's failover: its entry, behind its load balancer."""
    return f"{SIGNALS_HOST}.{region}.{domain}"


def failover_policies(
    catalog: Catalog, regions: Sequence[str], *, zone_id: str, domain: str,
    weights: Mapping[str, int],
) -> list[Manifest]:  # fmt: skip
    """A FailoverPolicy per model served in two or more of `regions`, for the operator that
    runs the failover: it reads each region's Prometheus through that region's entry."""
    policies = []
    for model in catalog.models:
        served = [r for r in regions if r in model.regions]
        if len(served) < 2:
            continue  # one region has nowhere to fail over to
        urls = {r: f"https://{signals_name(r, domain)}{SIGNALS_PREFIX}" for r in served}
        policies.append(failover_policy(
            catalog, model, namespace=CONTROLLERS_NAMESPACE, hosted_zone_id=zone_id,
            record_name=f"{model.name}.{domain}", signals_urls=urls, weights=weights,
        ))  # fmt: skip
    return policies


def region_namespaces(catalog: Catalog, isvcs: list[Manifest]) -> list[Manifest]:
    """Tenant namespaces that hold at least one of the region's InferenceServices."""
    used = {isvc["metadata"]["namespace"] for isvc in isvcs}
    return [ns for ns in build_namespaces(catalog) if ns["metadata"]["name"] in used]


def tenant_namespaces(catalog: Catalog) -> list[str]:
    return [namespace_of(t) for t in catalog.tenants]


def rewrite_bucket(value: Any, bucket_from: str, bucket_to: str) -> Any:
    """`value` with every `s3://<bucket_from>/...` string pointing at `bucket_to` instead."""
    old, new = f"s3://{bucket_from}/", f"s3://{bucket_to}/"
    if isinstance(value, str):
        return new + value[len(old) :] if value.startswith(old) else value
    if isinstance(value, dict):
        return {k: rewrite_bucket(v, bucket_from, bucket_to) for k, v in value.items()}
    if isinstance(value, list):
        return [rewrite_bucket(v, bucket_from, bucket_to) for v in value]
    return value


# --- dashboards and rules -------------------------------------------------------------------


def dashboard_files(directory: Path) -> list[Path]:
    """Grafana dashboard JSON files, in a stable order (none is fine)."""
    return sorted(directory.glob("**/*.json")) if directory.is_dir() else []


def prometheus_rules(directory: Path) -> list[Manifest]:
    """PrometheusRule objects for the rule files in `directory` (none is fine).

    PrometheusRule objects are taken as they are; bare rule files (`groups:` only, the form
    promtool reads) are wrapped, but only when the directory has no PrometheusRule objects, since
    generators may write both forms of the same rules.
    """
    objects, bare = [], []
    for path, index, doc in _yaml_documents(directory):
        if doc.get("kind") == "PrometheusRule":
            objects.append(_in_monitoring(doc))
        elif doc.get("groups") and "kind" not in doc:
            bare.append(_wrap_rules(k8s_name(path.stem, index), doc["groups"]))
    return objects or bare


def _yaml_documents(directory: Path) -> Iterator[tuple[Path, int, Manifest]]:
    if not directory.is_dir():
        return
    for path in sorted([*directory.glob("**/*.yaml"), *directory.glob("**/*.yml")]):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if isinstance(doc, dict):
                yield path, index, doc


def _in_monitoring(rule: Manifest) -> Manifest:
    metadata = {**rule["metadata"], "namespace": MONITORING_NAMESPACE}
    return {**rule, "metadata": metadata}


def _wrap_rules(name: str, groups: list[Manifest]) -> Manifest:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": name, "namespace": MONITORING_NAMESPACE},
        "spec": {"groups": groups},
    }


def k8s_name(stem: str, index: int = 0) -> str:
    """A DNS-1123 object name from a file name (plus an index for the n-th document)."""
    base = "".join(c if c.isalnum() else "-" for c in stem.lower()).strip("-")[:50]
    return f"{base}-{index}" if index else base
