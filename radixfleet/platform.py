"""What every radixfleet cluster runs with, in one place: infra installs it, validate assumes it.

Knative refuses pod-spec fields behind feature flags of its `config-features` ConfigMap unless
the flag is on (knative/serving v0.48.1 = Serving 1.21.1, `config/core/configmaps/features.yaml`
and `pkg/apis/serving/fieldmask.go: PodSpecMask`). Infra switches on exactly the flags the
rendered predictors need, no more: each one widens what any tenant's InferenceService may do.
A test renders the catalog and checks this set equals what the predictors use.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

# The Kubernetes minor the clusters run (EKS standard support until 2027-03-27); validate
# checks core objects against this version's schemas, and the example stack pins it.
KUBERNETES_VERSION = "1.35"

# The region's Prometheus as the controllers and the entry reach it: the Prometheus Operator's
# governing Service (kube-prometheus-stack, which infra installs, runs it in `monitoring`).
# `RADIXFLEET_PROMETHEUS_URL` overrides it for every one of them.
PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
PROMETHEUS_URL_ENV = "RADIXFLEET_PROMETHEUS_URL"

# The region entry as the operator reaches it (the autoscaler asks it for each model's hottest
# prompt prefixes when it pre-warms a pod); `RADIXFLEET_ENTRY_URL` overrides it.
ENTRY_URL = "http://radixfleet-entry.radixfleet-system.svc"
ENTRY_URL_ENV = "RADIXFLEET_ENTRY_URL"
# The ConfigMap, in radixfleet's namespace, where each entry replica keeps what its token buckets
# are owed, so that a replica gone does not take the debts with it
# (radixfleet/controllers/quota/carry.py).
ENTRY_LEDGER = "radixfleet-entry-ledger"
# The connections a region entry holds open to the routers, all tenants together; the quota's
# gate gives each tenant a fair share of them (radixfleet/controllers/quota/shares.py).
UPSTREAM_CONNECTIONS = 512

# Where the platform's own parts run, as the tenant namespaces' NetworkPolicies let them in:
# radixfleet's operator and region entry; the Prometheus that scrapes the models; Knative's
# activator and autoscaler (a model at zero is woken through the activator).
PLATFORM_NAMESPACE = "radixfleet-system"
# The operator's Deployment and ServiceAccount there (radixfleet/render/operator.py).
OPERATOR_NAME = "radixfleet-operator"
MONITORING_NAMESPACE = "monitoring"
KNATIVE_NAMESPACE = "knative-serving"
# Where infra installs KServe's controller (its chart's releases).
KSERVE_NAMESPACE = "kserve"

# Namespaces that belong to Kubernetes or to the platform: what infra installs into
# (infra/components/kube/addons.py: the charts' releases and the model cache's download jobs),
# and those of the networking layers and add-ons a platform team commonly runs beside it. No
# tenant may claim one: a tenant's namespace gets the tenant's roles, Secrets and network rules,
# which would then reach the platform's pods. Every `kube-` namespace is Kubernetes' too.
RESERVED_NAMESPACES = frozenset(
    {
        "default",
        PLATFORM_NAMESPACE,
        MONITORING_NAMESPACE,
        KNATIVE_NAMESPACE,
        "knative-operator",
        "knative-eventing",
        KSERVE_NAMESPACE,
        "kserve-localmodel-jobs",
        "cert-manager",
        "istio-system",
        "kourier-system",
        "amazon-cloudwatch",
    }
)
RESERVED_NAMESPACE_PREFIX = "kube-"

# KServe's mode for an InferenceService with no serving.kserve.io/deploymentMode annotation
# (the kserve-resources chart's kserve.controller.deploymentMode): Knative, so models scale to
# zero unless they say otherwise.
DEFAULT_DEPLOYMENT_MODE = "Knative"

KNATIVE_FEATURES = MappingProxyType(
    {
        # GPU predictors pick their pool by the radixfleet.io/gpu-type node label ...
        "kubernetes.podspec-nodeselector": "enabled",
        # ... and tolerate the nvidia.com/gpu taint every GPU pool carries.
        "kubernetes.podspec-tolerations": "enabled",
        # A model with LoRA adapters has several storageUris: KServe downloads them with its
        # storage initializer as an init container of the Knative Service's template (one
        # storageUri is injected at pod creation instead, where Knative does not look).
        "kubernetes.podspec-init-containers": "enabled",
    }
)

# KServe's Standard mode (raw Deployments; `RawDeployment` before 0.20): what KServe names and
# labels for an InferenceService's predictor, read in kserve v0.20.0 (pkg/constants/constants.go,
# GetRawServiceLabel; reconcilers/deployment/deployment_reconciler.go). The head (rank 0 of a
# multi-node replica, or the only pod of one) is Deployment `<isvc>-predictor`, its pods labelled
# `app: isvc.<isvc>-predictor`; a multi-node replica's workers are `<isvc>-predictor-worker`,
# labelled `app: isvc.<isvc>-predictor-worker`, so the head's selector never takes a worker.
STANDARD_MODES = ("Standard", "RawDeployment")
DEPLOYMENT_MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
KSERVE_INFERENCESERVICE_LABEL = "serving.kserve.io/inferenceservice"


def is_standard_mode(isvc: Mapping[str, Any]) -> bool:
    """Whether KServe runs the InferenceService's predictor as raw Deployments: as its status
    says once KServe has reconciled it, else as its annotation (or the default mode) asks."""
    reported = (isvc.get("status") or {}).get("deploymentMode")
    annotations = (isvc.get("metadata") or {}).get("annotations") or {}
    mode = reported or annotations.get(DEPLOYMENT_MODE_ANNOTATION, DEFAULT_DEPLOYMENT_MODE)
    return mode in STANDARD_MODES


def head_deployment(isvc: str) -> str:
    """The Deployment (and Service) of a Standard-mode predictor's head."""
    return f"{isvc}-predictor"


def head_pod_label(isvc: str) -> tuple[str, str]:
    """The label KServe gives the head's pods alone (its Deployment's selector)."""
    return "app", f"isvc.{head_deployment(isvc)}"
