"""The add-ons every region's cluster runs, installed by Helm at pinned versions: GPU support,
certificates, Knative Serving and KServe, monitoring, node autoscaling, and the ingress load
balancer in front of Knative.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from infra import manifests as m
from infra.settings import Chart, KnativeSettings
from radixfleet.platform import KSERVE_NAMESPACE

# Helm waits this long for a release to become ready; KServe and Prometheus need several minutes
# on a fresh cluster while images pull.
HELM_TIMEOUT_S = 900
# pulumi-kubernetes (4.18 and later) waits for what this annotation names before it reports the
# resource created, on any kind.
WAIT_FOR = "pulumi.com/waitFor"


def as_input(manifest: Any) -> Any:
    """A plain manifest dict where the SDK expects its Args types (it accepts both at runtime).

    The dicts come from `infra.manifests`, whose shape the tests check directly.
    """
    return manifest


@dataclass(frozen=True)
class AddOnsArgs:
    charts: Mapping[str, Chart]
    knative: KnativeSettings
    # Knative's domain in this region: `<region>.<fleet domain>`.
    domain: str
    storage_class: m.Manifest
    autoscaler_values: m.Manifest
    # Whether the region's GPU nodes cache model weights (KServe's local model cache).
    model_cache: bool = False
    # Resources that must exist before anything is installed (nodes, core add-ons).
    after: Sequence[pulumi.Resource] = ()


class AddOns(pulumi.ComponentResource):
    """Helm releases and the resources they need, in dependency order."""

    kserve: pulumi.Resource
    monitoring: pulumi.Resource
    # KServe's local model controller, when the region caches weights (its CRDs with it).
    model_cache: pulumi.Resource | None

    def __init__(self, name: str, args: AddOnsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("radixfleet:kube:AddOns", name, None, opts)
        self._name, self._args = name, args
        k8s.storage.v1.StorageClass(
            f"{name}-storage",
            metadata=as_input(args.storage_class["metadata"]),
            provisioner=args.storage_class["provisioner"],
            parameters=args.storage_class["parameters"],
            volume_binding_mode="WaitForFirstConsumer",
            allow_volume_expansion=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.after)),
        )
        self._release("nvidia-device-plugin", "kube-system", m.device_plugin_values())
        self._release("cluster-autoscaler", "kube-system", args.autoscaler_values)
        self.monitoring = self._monitoring()
        self._release(
            "dcgm-exporter", m.MONITORING_NAMESPACE, m.dcgm_exporter_values(), [self.monitoring]
        )
        serving = self._knative()
        self.kserve = self._kserve(serving)
        self.model_cache = self._model_cache() if args.model_cache else None
        self.register_outputs({})

    def _opts(self, after: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, depends_on=[*self._args.after, *after])

    def _namespace(self, namespace: str) -> k8s.core.v1.Namespace:
        return k8s.core.v1.Namespace(
            f"{self._name}-{namespace}",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=namespace),
            opts=self._opts(),
        )

    def _release(
        self,
        key: str,
        namespace: str,
        values: m.Manifest,
        after: Sequence[pulumi.Resource] = (),
        *,
        chart: Chart | None = None,
    ) -> k8s.helm.v3.Release:
        chart = chart or self._args.charts[key]
        published = chart.chart or key
        oci = chart.repo.startswith("oci://")
        return k8s.helm.v3.Release(
            f"{self._name}-{key}",
            name=key,
            chart=f"{chart.repo}/{published}" if oci else published,
            version=chart.version,
            repository_opts=None if oci else k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
            namespace=namespace,
            create_namespace=True,
            values=values,
            # A failed install rolls back instead of leaving half a release behind.
            atomic=True,
            cleanup_on_fail=True,
            timeout=HELM_TIMEOUT_S,
            opts=self._opts(after),
        )

    def _monitoring(self) -> k8s.helm.v3.Release:
        namespace = self._namespace(m.MONITORING_NAMESPACE)
        password = random.RandomPassword(
            f"{self._name}-grafana-admin", length=32, special=False, opts=self._opts()
        )
        k8s.core.v1.Secret(
            f"{self._name}-grafana-admin",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name="grafana-admin", namespace=m.MONITORING_NAMESPACE
            ),
            string_data={"admin-user": "admin", "admin-password": password.result},
            opts=self._opts([namespace]),
        )
        values = m.prometheus_stack_values(
            admin_secret="grafana-admin", storage_class=m.STORAGE_CLASS
        )
        return self._release("kube-prometheus-stack", m.MONITORING_NAMESPACE, values, [namespace])

    def _knative(self) -> k8s.apiextensions.CustomResource:
        namespace = self._namespace(m.KNATIVE_NAMESPACE)
        operator = self._release(
            m.KNATIVE_OPERATOR, m.KNATIVE_OPERATOR, m.knative_operator_values()
        )
        knative = self._args.knative
        serving = m.knative_serving(
            version=knative.serving_version,
            domain=self._args.domain,
            scale_to_zero=knative.scale_to_zero,
            stable_window=knative.stable_window,
            grace_period=knative.scale_to_zero_grace_period,
        )
        # Ready only once the operator has installed Serving, its CRDs among it: KServe, next,
        # looks for Knative's Service CRD when it starts and never watches Knative Services if
        # it is not there yet. pulumi-kubernetes awaits any resource this annotation names.
        metadata = {**serving["metadata"], "annotations": {WAIT_FOR: "condition=Ready"}}
        return k8s.apiextensions.CustomResource(
            f"{self._name}-knative-serving",
            api_version=serving["apiVersion"],
            kind=serving["kind"],
            metadata=as_input(metadata),
            spec=serving["spec"],
            opts=self._opts([namespace, operator]),
        )

    def _kserve(self, serving: pulumi.Resource) -> k8s.helm.v3.Release:
        cert_manager = self._release("cert-manager", "cert-manager", m.cert_manager_values())
        crds = self._release("kserve-crd", KSERVE_NAMESPACE, {})
        values = m.kserve_values(domain=self._args.domain, model_cache=self._args.model_cache)
        return self._release(
            "kserve-resources", KSERVE_NAMESPACE, values, [cert_manager, crds, serving]
        )

    def _model_cache(self) -> k8s.helm.v3.Release:
        """KServe's local model charts, from where and at the version KServe's own come: they
        are released together, and the controller reads kserve-resources' ConfigMap."""
        kserve = self._args.charts["kserve-resources"]
        jobs = self._namespace(m.MODEL_CACHE_JOBS)
        crd_chart = kserve.model_copy(update={"chart": "kserve-localmodel-crd"})
        crds = self._release("kserve-localmodel-crd", KSERVE_NAMESPACE, {}, chart=crd_chart)
        return self._release(
            "kserve-localmodel-resources", KSERVE_NAMESPACE, m.kserve_localmodel_values(),
            [self.kserve, crds, jobs],
            chart=kserve.model_copy(update={"chart": "kserve-localmodel-resources"}),
        )  # fmt: skip
