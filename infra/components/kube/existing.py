"""One region on the `kubernetes` cloud: a cluster the team already runs, reached through the
kubeconfig the stack names. `pulumi up` creates no cloud resource there; it deploys the same
Kubernetes half as the AWS stack (CRDs, operator, entry, runtimes, tenants, models, monitoring)
onto the KServe and Knative the cluster already has.

What the AWS region adds and this one does not: the cluster and its nodes, the add-on charts, a
model store of ours (models read the catalog's URIs as written, so the cluster's serving pods
need read access to them: infra/README.md), the load balancer in front of the entry (the entry
is a ClusterIP Service; expose it as the cluster exposes its services) and the weights cache on
the nodes (KServe's local model cache needs its add-on).
"""

from __future__ import annotations

import pulumi

from infra import manifests as m
from infra.components.interface import RegionalFleetArgs
from infra.components.kube.workloads import Workloads, region_workloads_args
from infra.components.kube.workloads import provider as kube_provider


class ExistingRegionalFleet(pulumi.ComponentResource):
    """radixfleet on an existing cluster; `ingress_hostname` is empty (no load balancer)."""

    cluster_name: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    ingress_hostname: pulumi.Output[str]

    def __init__(
        self, name: str, args: RegionalFleetArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("radixfleet:kube:ExistingRegionalFleet", name, None, opts)
        fleet, region = args.fleet, args.region
        clusters = fleet.settings.clusters or {}
        cluster = clusters[region.name]  # parse_fleet has refused a region without one
        # The provider reads the file itself: the cluster's credentials stay out of the state.
        path = str(fleet.path(cluster.kubeconfig))
        provider = kube_provider(f"{name}-k8s", path, pulumi.ResourceOptions(parent=self),
                                 context=cluster.context)  # fmt: skip
        catalog_bucket = ""  # no bucket is rewritten: the catalog's URIs are read as written
        isvcs = m.region_inference_services(
            fleet.catalog, region, bucket_from=catalog_bucket, bucket_to=catalog_bucket
        )
        workloads_args = region_workloads_args(
            fleet, region, isvcs, fleet_token=args.fleet_token, ingress_annotations=None,
            kserve=None, monitoring=None, with_monitoring=cluster.monitoring,
            system_node_selector=cluster.system_node_selector,
        )  # fmt: skip
        kube = pulumi.ResourceOptions(parent=self, providers=[provider])
        workloads = Workloads(f"{name}-workloads", workloads_args, kube)
        self.cluster_name = pulumi.Output.from_input(cluster.context or region.name)
        self.kubeconfig = pulumi.Output.from_input(path)
        self.ingress_hostname = workloads.ingress_hostname
        self.register_outputs({"clusterName": self.cluster_name})
