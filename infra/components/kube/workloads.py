"""What radixfleet itself puts into a region's cluster: its CRDs and controllers, the region
entry behind the region's load balancer, the SGLang runtimes, the tenant namespaces and
InferenceServices of the region, and the dashboards and alerting rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra import manifests as m
from infra.components.kube.addons import as_input
from infra.settings import Fleet
from radixfleet import labels
from radixfleet.config import Region

# Kinds `_core` makes as typed resources (every other manifest is a custom resource).
CORE_KINDS = frozenset({"ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "ConfigMap"})


def provider(
    name: str, kubeconfig: pulumi.Input[str], opts: pulumi.ResourceOptions, *,
    context: str | None = None,
) -> k8s.Provider:  # fmt: skip
    """The Kubernetes provider of a region. Secrets are updated in place: by default the provider
    replaces a Secret whose data changed, and with a fixed name it deletes the old one first, so
    during every `up` that rotated a tenant's key the Secret was missing for a moment (the
    entry's next read found no key at all)."""
    return k8s.Provider(name, kubeconfig=kubeconfig, context=context,
                        enable_secret_mutable=True, opts=opts)  # fmt: skip


@dataclass(frozen=True)
class WorkloadsArgs:
    region: str
    controller_image: str
    controller_replicas: int
    router_image: str
    entry_replicas: int
    # The load balancer's (certificate, security group), from the cloud's region component;
    # None: no load balancer (on an existing cluster the team exposes the entry its own way).
    ingress_annotations: Mapping[str, pulumi.Input[str]] | None
    crds: Sequence[m.Manifest]
    runtimes: Sequence[m.Manifest]
    namespaces: Sequence[m.Manifest]
    inference_services: Sequence[m.Manifest]
    # The controllers' objects (radixfleet.kit.registry.catalog_objects): Tenants, Canary- and
    # AutoscalePolicies, the routers' ServiceAccount, Role and RoleBinding per tenant namespace,
    # and (in the failover's region) FailoverPolicies.
    policies: Sequence[m.Manifest]
    # The operator's and the entry's Roles (Secrets, by name) per tenant namespace.
    secret_access: Sequence[m.Manifest]
    # The serving pods' ServiceAccount per tenant namespace (infra gives each a cloud role).
    model_readers: Sequence[m.Manifest]
    # Who may reach each tenant namespace's pods (radixfleet/render/inferenceservices.py).
    network_policies: Sequence[m.Manifest]
    # ValidatingAdmissionPolicies and their bindings: who may make the data plane's pods.
    admission_policies: Sequence[m.Manifest]
    # Placeholder pods holding GPU pools' headroom free, and their PriorityClass (may be empty).
    headroom: Sequence[m.Manifest]
    # The node groups and caches of the weights the GPU nodes keep (empty: none), and KServe's
    # local model controller they need (None when empty).
    model_cache: Sequence[m.Manifest]
    model_cache_controller: pulumi.Resource | None
    # This region's operator runs the fleet's failover (one region per fleet).
    with_failover: bool
    fleet_token: pulumi.Input[str]
    # The key Secrets of the region's tenants, from the stack's `tenantKeys` (empty: the team's).
    tenant_keys: Sequence[m.TenantKeys]
    dashboards_dir: Path
    # KServe must be up (CRDs, webhooks) before runtimes and InferenceServices (None: it was
    # installed before this program ran).
    kserve: pulumi.Resource | None
    # kube-prometheus-stack brings the PrometheusRule CRD and Grafana's dashboard sidecar (None:
    # installed before, or, with `with_monitoring` False, not at all).
    monitoring: pulumi.Resource | None
    # False: no dashboards, alerting rules or PodMonitors (the cluster has no prometheus-operator).
    with_monitoring: bool = True
    # Where the operator and the entry run: the cloud's system nodes ({}: any untainted node).
    system_node_selector: Mapping[str, str] = field(default_factory=lambda: m.SYSTEM_NODE_LABELS)


def region_workloads_args(
    fleet: Fleet,
    region: Region,
    inference_services: list[m.Manifest],
    *,
    fleet_token: pulumi.Input[str],
    ingress_annotations: Mapping[str, pulumi.Input[str]] | None,
    kserve: pulumi.Resource | None,
    monitoring: pulumi.Resource | None,
    with_monitoring: bool = True,
    system_node_selector: Mapping[str, str] = m.SYSTEM_NODE_LABELS,
    headroom: Sequence[m.Manifest] = (),
    model_cache: Sequence[m.Manifest] = (),
    model_cache_controller: pulumi.Resource | None = None,
    failover_policies: Sequence[m.Manifest] = (),
) -> WorkloadsArgs:
    """What every cloud deploys into a region's cluster, from the catalog and the stack; the
    keywords are what the cloud's region component adds (its load balancer, its add-ons)."""
    controllers, catalog = fleet.settings.controllers, fleet.catalog
    return WorkloadsArgs(
        region=region.name,
        controller_image=controllers.reference,
        controller_replicas=controllers.replicas,
        router_image=controllers.router.reference,
        entry_replicas=controllers.entry_replicas,
        ingress_annotations=ingress_annotations,
        crds=m.load_crds(fleet.path(fleet.settings.crds_dir)),
        runtimes=m.runtimes(image=fleet.settings.runtime.reference),
        namespaces=m.region_namespaces(catalog, inference_services),
        inference_services=inference_services,
        policies=[*m.region_policies(catalog, region), *failover_policies],
        secret_access=m.region_secret_access(catalog, region),
        model_readers=m.region_model_readers(catalog, region),
        network_policies=m.region_network_policies(catalog, region),
        admission_policies=m.admission_policies(),
        headroom=headroom,
        model_cache=model_cache,
        model_cache_controller=model_cache_controller,
        with_failover=region.name == fleet.failover_region,
        fleet_token=fleet_token,
        tenant_keys=m.region_tenant_keys(catalog, region, fleet.tenant_key_values()),
        dashboards_dir=fleet.path(fleet.settings.dashboards_dir),
        kserve=kserve,
        monitoring=monitoring,
        with_monitoring=with_monitoring,
        system_node_selector=system_node_selector,
    )


def _meta(name: str, namespace: str | None = None) -> k8s.meta.v1.ObjectMetaArgs:
    return k8s.meta.v1.ObjectMetaArgs(
        name=name, namespace=namespace, labels={labels.MANAGED_BY: labels.MANAGER}
    )


class Workloads(pulumi.ComponentResource):
    """radixfleet's own resources in one cluster; `ingress_hostname` is the load balancer's."""

    ingress_hostname: pulumi.Output[str]

    def __init__(self, name: str, args: WorkloadsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("radixfleet:kube:Workloads", name, None, opts)
        self._name, self._args = name, args
        crds = [self._crd(crd) for crd in args.crds]
        namespaces = {
            ns["metadata"]["name"]: k8s.core.v1.Namespace(
                f"{name}-ns-{ns['metadata']['name']}",
                metadata=as_input(ns["metadata"]),
                opts=self._opts(),
            )
            for ns in args.namespaces
        }
        admission = self._admission(crds)
        controllers_namespace, operator = self._controllers(crds)
        self._fleet_token(controllers_namespace)
        self.ingress_hostname = self._entry(controllers_namespace)
        # After the operator: the controllers' finalizers on these are the operator's to
        # remove, so `pulumi destroy` deletes them while it still runs.
        tenants = self._policies([*crds, operator], list(namespaces.values()),
                                 controllers_namespace)  # fmt: skip
        self._tenant_keys(namespaces)
        self._serving(list(namespaces.values()), [*admission, *tenants])
        if args.with_monitoring:
            self._dashboards(controllers_namespace)
        self._headroom(controllers_namespace)
        self.register_outputs({"ingressHostname": self.ingress_hostname})

    def _admission(self, crds: Sequence[pulumi.Resource]) -> list[pulumi.Resource]:
        """The admission policies and their bindings, after the CRDs (a policy whose parameter
        kind, the quota's Tenant, is not served refuses every InferenceService). They bind by
        the namespaces' labels, not by name; the models wait for them."""
        made: list[pulumi.Resource] = []
        for obj in self._args.admission_policies:
            name = f"{self._name}-{obj['kind'].lower()}-{obj['metadata']['name']}"
            meta, spec = as_input(obj["metadata"]), as_input(obj["spec"])
            kind = (k8s.admissionregistration.v1.ValidatingAdmissionPolicy
                    if obj["kind"] == "ValidatingAdmissionPolicy"
                    else k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding)  # fmt: skip
            made.append(kind(name, metadata=meta, spec=spec, opts=self._opts(crds)))
        return made

    def _headroom(self, namespace: k8s.core.v1.Namespace) -> None:
        """The GPU pools' placeholders: their PriorityClass first, then a Deployment per pool."""
        after: list[pulumi.Resource] = [namespace]
        for obj in self._args.headroom:
            if obj["kind"] == "PriorityClass":
                after.append(self._priority_class(obj))
        for obj in self._args.headroom:
            if obj["kind"] == "Deployment":
                name = f"{self._name}-deployment-{obj['metadata']['name']}"
                meta, spec = as_input(obj["metadata"]), as_input(obj["spec"])
                k8s.apps.v1.Deployment(name, metadata=meta, spec=spec, opts=self._opts(after))

    def _priority_class(self, obj: m.Manifest) -> k8s.scheduling.v1.PriorityClass:
        return k8s.scheduling.v1.PriorityClass(
            f"{self._name}-priorityclass-{obj['metadata']['name']}",
            metadata=as_input(obj["metadata"]),
            value=obj["value"],
            global_default=obj["globalDefault"],
            preemption_policy=obj["preemptionPolicy"],
            description=obj["description"],
            opts=self._opts(),
        )

    def _opts(self, after: Sequence[pulumi.Resource | None] = ()) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, depends_on=[a for a in after if a is not None])

    def _crd(self, crd: m.Manifest) -> k8s.apiextensions.v1.CustomResourceDefinition:
        return k8s.apiextensions.v1.CustomResourceDefinition(
            f"{self._name}-crd-{crd['metadata']['name']}",
            metadata=as_input(crd["metadata"]),
            spec=as_input(crd["spec"]),
            opts=self._opts(),
        )

    def _controllers(
        self, crds: list[k8s.apiextensions.v1.CustomResourceDefinition]
    ) -> tuple[k8s.core.v1.Namespace, k8s.apps.v1.Deployment]:
        """radixfleet's namespace (Pod Security `restricted`) and its NetworkPolicies, then the
        operator: one ServiceAccount, one ClusterRole (the controllers' declared rules), its
        peering object and its Deployment."""
        args, name = self._args, f"{self._name}-controllers"
        namespace = k8s.core.v1.Namespace(
            name, metadata=as_input(m.platform_namespace()["metadata"]), opts=self._opts()
        )
        for policy in m.platform_network_policies():
            self._core(policy, [namespace])
        after = self._opts([namespace])
        account = k8s.core.v1.ServiceAccount(
            name, metadata=_meta(m.CONTROLLERS, m.CONTROLLERS_NAMESPACE), opts=after
        )
        self._bind(name, m.CONTROLLERS, m.controller_cluster_rules(), after=[namespace])
        peering = self._custom(m.peering(), crds)
        deployment = m.controller_deployment(
            image=args.controller_image, replicas=args.controller_replicas, region=args.region,
            router_image=args.router_image, with_failover=args.with_failover,
            node_selector=args.system_node_selector,
        )  # fmt: skip
        operator = k8s.apps.v1.Deployment(
            name,
            metadata=as_input(deployment["metadata"]),
            spec=as_input(deployment["spec"]),
            opts=self._opts([account, peering, *crds]),
        )
        return namespace, operator

    def _entry(self, namespace: k8s.core.v1.Namespace) -> pulumi.Output[str]:
        """The region entry (as deploy/entry/): its account and ClusterRole, an HA Deployment
        with a PodDisruptionBudget and a ClusterIP Service, and the region's load balancer in
        front of it."""
        args, name = self._args, f"{self._name}-entry"
        after = self._opts([namespace])
        account = k8s.core.v1.ServiceAccount(
            name, metadata=_meta(m.ENTRY, m.CONTROLLERS_NAMESPACE), opts=after
        )
        self._bind(name, m.ENTRY, m.entry_cluster_rules(), after=[namespace])
        deployment = m.entry_deployment(
            image=args.controller_image, replicas=args.entry_replicas, region=args.region,
            node_selector=args.system_node_selector,
        )  # fmt: skip
        k8s.apps.v1.Deployment(
            name, metadata=as_input(deployment["metadata"]), spec=as_input(deployment["spec"]),
            opts=self._opts([account]),
        )  # fmt: skip
        budget = m.entry_disruption_budget()
        k8s.policy.v1.PodDisruptionBudget(name, metadata=as_input(budget["metadata"]),
                                          spec=as_input(budget["spec"]), opts=after)  # fmt: skip
        for obj in m.entry_ledger():  # where the replicas keep their debts
            self._core(obj, [namespace])
        inside = m.entry_service()  # what the operator's pre-warmer calls
        k8s.core.v1.Service(name, metadata=as_input(inside["metadata"]),
                            spec=as_input(inside["spec"]), opts=after)  # fmt: skip
        if args.ingress_annotations is None:
            return pulumi.Output.from_input("")
        service = k8s.core.v1.Service(
            f"{self._name}-ingress",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=m.INGRESS_SERVICE, namespace=m.CONTROLLERS_NAMESPACE,
                annotations=dict(args.ingress_annotations),
            ),
            spec=as_input(m.ingress_spec()),
            opts=after,
        )  # fmt: skip
        return service.status.apply(_hostname)

    def _fleet_token(self, namespace: k8s.core.v1.Namespace) -> None:
        """The fleet token, for the entry (to check) and the failover's operator (to show)."""
        k8s.core.v1.Secret(
            f"{self._name}-fleet-token",
            metadata=_meta(m.FLEET_TOKEN_SECRET, m.CONTROLLERS_NAMESPACE),
            string_data={m.FLEET_TOKEN_KEY: self._args.fleet_token},
            opts=self._opts([namespace]),
        )

    def _tenant_keys(self, namespaces: Mapping[str, k8s.core.v1.Namespace]) -> None:
        """Each tenant's key Secret, its values secret in the state and the preview. Removing a
        key from the stack removes it here, and the entry refuses it at its next read."""
        for keys in self._args.tenant_keys:
            k8s.core.v1.Secret(
                f"{self._name}-secret-{keys.namespace}-{keys.secret}",
                metadata=_meta(keys.secret, keys.namespace),
                string_data={n: pulumi.Output.secret(v) for n, v in keys.values.items()},
                opts=self._opts([namespaces[keys.namespace]]),
            )

    def _policies(
        self,
        first: Sequence[pulumi.Resource],
        namespaces: list[k8s.core.v1.Namespace],
        controllers_namespace: k8s.core.v1.Namespace,
    ) -> list[pulumi.Resource]:
        """The controllers' objects (the routers' access among them), the serving pods' account and
        the NetworkPolicies of each tenant namespace (after `first`: the CRDs and the operator).
        Returns the Tenants, each created once the quota controller has counted it."""
        after = [*first, *namespaces, controllers_namespace]
        tenants: list[pulumi.Resource] = []
        for obj in self._args.policies:
            if obj["kind"] in CORE_KINDS:  # the routers' service account and its rights
                self._core(obj, namespaces)
                continue
            created = self._custom(m.awaited(obj), after)
            if obj["kind"] == "Tenant":
                tenants.append(created)
        for obj in [*self._args.secret_access, *self._args.model_readers,
                    *self._args.network_policies]:  # fmt: skip
            self._core(obj, namespaces)
        return tenants

    def _core(self, obj: m.Manifest, after: Sequence[pulumi.Resource]) -> None:
        """A ServiceAccount, Role, RoleBinding, NetworkPolicy or (data-less) ConfigMap from its
        manifest."""
        metadata = obj["metadata"]
        name = f"{self._name}-{obj['kind'].lower()}-{metadata['namespace']}-{metadata['name']}"
        meta, opts = as_input(metadata), self._opts(after)
        if obj["kind"] == "ServiceAccount":
            automount = obj.get("automountServiceAccountToken")
            k8s.core.v1.ServiceAccount(name, metadata=meta, opts=opts,
                                       automount_service_account_token=automount)  # fmt: skip
        elif obj["kind"] == "Role":
            k8s.rbac.v1.Role(name, metadata=meta, rules=as_input(obj["rules"]), opts=opts)
        elif obj["kind"] == "NetworkPolicy":
            k8s.networking.v1.NetworkPolicy(name, metadata=meta, spec=as_input(obj["spec"]),
                                            opts=opts)  # fmt: skip
        elif obj["kind"] == "ConfigMap" and "data" not in obj:
            k8s.core.v1.ConfigMap(name, metadata=meta, opts=opts)
        elif obj["kind"] == "RoleBinding":
            k8s.rbac.v1.RoleBinding(name, metadata=meta, role_ref=as_input(obj["roleRef"]),
                                    subjects=as_input(obj["subjects"]), opts=opts)  # fmt: skip
        else:  # a new kind of manifest must be taught here, not deployed as something else
            raise ValueError(f"{name}: no Pulumi resource for kind {obj['kind']!r}")

    def _bind(
        self,
        name: str,
        account: str,
        rules: list[m.Manifest],
        *,
        after: Sequence[pulumi.Resource],
    ) -> None:
        """A ClusterRole with `rules`, bound to `account` in radixfleet's namespace."""
        subject = k8s.rbac.v1.SubjectArgs(
            kind="ServiceAccount", name=account, namespace=m.CONTROLLERS_NAMESPACE
        )
        role = k8s.rbac.v1.ClusterRole(
            name, metadata=_meta(account), rules=as_input(rules), opts=self._opts(after)
        )
        k8s.rbac.v1.ClusterRoleBinding(
            name,
            metadata=_meta(account),
            role_ref=k8s.rbac.v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=account
            ),
            subjects=[subject],
            opts=self._opts([role]),
        )

    def _serving(
        self, namespaces: list[k8s.core.v1.Namespace], first: Sequence[pulumi.Resource]
    ) -> None:
        runtimes = [self._custom(r, [self._args.kserve]) for r in self._args.runtimes]
        caches = self._model_cache()
        for isvc in self._args.inference_services:
            # After the caches: KServe's webhook mounts a cache only if it exists when it
            # admits the InferenceService. After `first`, the admission policies and the
            # tenants: the GPU-budget policy admits a model once its tenant is counted.
            self._custom(isvc, [self._args.kserve, *runtimes, *namespaces, *caches, *first])

    def _model_cache(self) -> list[pulumi.Resource]:
        """The nodes' cache folder handed to KServe's agent, the node groups, then the caches
        on them (KServe reads a cache's groups)."""
        args = self._args
        if args.model_cache_controller is None:
            return []
        for obj in (o for o in args.model_cache if o["kind"] == "DaemonSet"):
            k8s.apps.v1.DaemonSet(
                f"{self._name}-daemonset-{obj['metadata']['name']}",
                metadata=as_input(obj["metadata"]), spec=as_input(obj["spec"]),
                opts=self._opts([args.model_cache_controller]),  # in KServe's namespace
            )  # fmt: skip
        after: list[pulumi.Resource | None] = [args.kserve, args.model_cache_controller]
        groups = [self._custom(g, after) for g in args.model_cache
                  if g["kind"] == "LocalModelNodeGroup"]  # fmt: skip
        return [self._custom(c, [*after, *groups]) for c in args.model_cache
                if c["kind"] == "LocalModelCache"]  # fmt: skip

    def _custom(
        self, manifest: m.Manifest, after: Sequence[pulumi.Resource | None]
    ) -> k8s.apiextensions.CustomResource:
        meta = manifest["metadata"]
        ident = "-".join(p for p in (meta.get("namespace"), meta["name"]) if p)
        return k8s.apiextensions.CustomResource(
            f"{self._name}-{manifest['kind'].lower()}-{ident}",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=as_input(meta),
            # A peering object has no spec: kopf writes only its status.
            **({"spec": manifest["spec"]} if "spec" in manifest else {}),
            opts=pulumi.ResourceOptions.merge(
                self._opts(after),
                pulumi.ResourceOptions(ignore_changes=m.owned_by_controllers(manifest)),
            ),
        )

    def _dashboards(self, controllers_namespace: k8s.core.v1.Namespace) -> None:
        directory, after = self._args.dashboards_dir, [self._args.monitoring]
        for path in m.dashboard_files(directory):
            name = m.k8s_name(f"radixfleet-dashboard-{path.stem}")
            k8s.core.v1.ConfigMap(
                f"{self._name}-{name}",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=name,
                    namespace=m.MONITORING_NAMESPACE,
                    # kube-prometheus-stack's Grafana sidecar loads ConfigMaps with this label.
                    labels={"grafana_dashboard": "1", labels.MANAGED_BY: labels.MANAGER},
                    annotations={"grafana_folder": m.DASHBOARD_FOLDER},
                ),
                data={path.name: path.read_text(encoding="utf-8")},
                opts=self._opts(after),
            )
        for rule in m.prometheus_rules(directory):
            self._custom(rule, after)
        # What Prometheus scrapes (the same PodMonitors as deploy/monitoring/); they live in the
        # operator's namespace.
        for monitor in m.pod_monitors():
            self._custom(monitor, [*after, controllers_namespace])


def _hostname(status: Any) -> str:
    ingress = status.load_balancer.ingress if status and status.load_balancer else None
    return str(ingress[0].hostname) if ingress else ""
