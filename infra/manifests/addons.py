"""The add-ons every region installs, as their Helm values and resources: the GPU device plugin
and exporter, cert-manager, KServe (and its model cache), kube-prometheus-stack, the cluster
autoscaler, the Knative operator and its `KnativeServing`, and the ingress in front of the entry.
"""

from __future__ import annotations

from infra.manifests.base import Manifest
from infra.manifests.nodes import GPU_NODE_AFFINITY, GPU_TOLERATION, system_placement
from radixfleet.platform import DEFAULT_DEPLOYMENT_MODE, KNATIVE_FEATURES
from radixfleet.render import entry, modelcache

MONITORING_NAMESPACE = "monitoring"
KNATIVE_NAMESPACE = "knative-serving"
KNATIVE_OPERATOR = "knative-operator"  # the operator chart's release and its namespace


def device_plugin_values() -> Manifest:
    return {"tolerations": [GPU_TOLERATION], "affinity": GPU_NODE_AFFINITY}


def dcgm_exporter_values() -> Manifest:
    return {
        "tolerations": [GPU_TOLERATION],
        "affinity": GPU_NODE_AFFINITY,
        # kube-prometheus-stack discovers ServiceMonitors in every namespace (see below).
        "serviceMonitor": {"enabled": True, "interval": "15s"},
    }


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
