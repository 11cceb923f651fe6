"""One region of the fleet on AWS: network, EKS, GPU node groups, workload identities, TLS,
the add-ons and radixfleet's workloads. Implements `RegionalFleet`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pulumi
import pulumi_aws as aws

from infra import manifests as m
from infra.components.aws.cluster import EksCluster, EksClusterArgs
from infra.components.aws.identity import PodRole, PodRoleArgs, model_reader_statements
from infra.components.aws.network import Network, NetworkArgs
from infra.components.aws.nodes import Efa, ManagedNodes, gpu_nodes_args, multinode_gpu_types
from infra.components.interface import ModelStoreRef, RegionalFleetArgs
from infra.components.kube.addons import AddOns, AddOnsArgs
from infra.components.kube.workloads import Workloads, region_workloads_args
from infra.components.kube.workloads import provider as kube_provider

AUTOSCALER_ACCOUNT = "cluster-autoscaler"
LB_ROLE_TAG = "radixfleet.io/role"
LB_ROLE = "load-balancer"
# Waking a model from zero takes minutes before its first token; the load balancer must keep
# the idle connection open as long as Knative's longest request (600 s).
LB_IDLE_TIMEOUT_S = 600


def cluster_name(region: str) -> str:
    return f"{pulumi.get_project()}-{pulumi.get_stack()}-{region}"


def knative_domain(region: str, domain: str) -> str:
    return f"{region}.{domain}"


def ebs_storage_class() -> m.Manifest:
    """Encrypted gp3 volumes, the cluster's default class (Prometheus keeps its data there)."""
    return {
        "metadata": {
            "name": m.STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "ebs.csi.aws.com",
        "parameters": {"type": "gp3", "encrypted": "true"},
    }


def autoscaler_statements(cluster: str) -> list[dict[str, Any]]:
    """The cluster autoscaler may read everything, but resize only this cluster's groups."""
    read = [
        "autoscaling:DescribeAutoScalingGroups",
        "autoscaling:DescribeAutoScalingInstances",
        "autoscaling:DescribeLaunchConfigurations",
        "autoscaling:DescribeScalingActivities",
        "autoscaling:DescribeTags",
        "ec2:DescribeImages",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeLaunchTemplateVersions",
        "ec2:GetInstanceTypesFromInstanceRequirements",
        # Labels and taints of a group scaled to zero come from the node group itself.
        "eks:DescribeNodegroup",
    ]
    owned = {"StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster}": "owned"}}
    return [
        {"Effect": "Allow", "Action": read, "Resource": "*"},
        {
            "Effect": "Allow",
            "Action": [
                "autoscaling:SetDesiredCapacity",
                "autoscaling:TerminateInstanceInAutoScalingGroup",
            ],
            "Resource": "*",
            "Condition": owned,
        },
    ]


def route53_statements(zone_id: str) -> list[dict[str, Any]]:
    """The failover controller shifts weights in one zone and reads health checks."""
    return [
        {
            "Effect": "Allow",
            "Action": ["route53:ChangeResourceRecordSets", "route53:ListResourceRecordSets"],
            "Resource": f"arn:aws:route53:::hostedzone/{zone_id}",
        },
        {
            "Effect": "Allow",
            "Action": [
                "route53:GetHealthCheck",
                "route53:GetHealthCheckStatus",
                "route53:ListHealthChecks",
                "route53:GetChange",
            ],
            "Resource": "*",
        },
    ]


def _validation(
    options: list[aws.acm.outputs.CertificateDomainValidationOption], *, domain: str
) -> aws.acm.outputs.CertificateDomainValidationOption:
    return next(o for o in options if o.domain_name == domain)


class AwsRegionalFleet(pulumi.ComponentResource):
    """Everything radixfleet runs in one AWS region."""

    cluster_name: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    ingress_hostname: pulumi.Output[str]

    def __init__(
        self, name: str, args: RegionalFleetArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("radixfleet:aws:RegionalFleet", name, None, opts)
        self._name, self._args = name, args
        self._cluster_name = cluster_name(args.region.name)
        child = pulumi.ResourceOptions(parent=self)
        network = self._network(child)
        cluster = self._cluster(network, child)
        # Nothing of ours waits for a GPU pool: a pool that cannot launch (no quota, no capacity)
        # leaves its models pending, not the region without its entry and operator.
        self._gpu_nodes(cluster, network, child)
        provider = kube_provider(f"{name}-k8s", cluster.kubeconfig, child)
        kube = pulumi.ResourceOptions(parent=self, providers=[provider])
        addons = self._addons(cluster, cluster.ready, kube)
        workloads = self._workloads(cluster, network, addons, kube)
        self.cluster_name = cluster.name
        self.kubeconfig = cluster.kubeconfig
        self.ingress_hostname = workloads.ingress_hostname
        self.register_outputs(
            {"clusterName": cluster.name, "ingressHostname": workloads.ingress_hostname}
        )

    @property
    def _store(self) -> ModelStoreRef:
        if self._args.model_store is None:
            raise ValueError(f"{self._name}: an AWS region reads its models from its model store")
        return self._args.model_store

    def _network(self, child: pulumi.ResourceOptions) -> Network:
        settings = self._args.fleet.aws.network
        region = self._args.region.name
        return Network(
            f"{self._name}-net",
            NetworkArgs(
                region=region,
                cidr=settings.vpc_cidrs[region],
                zones=settings.availability_zones,
                nat_per_zone=settings.nat_gateways == "per-az",
                cluster_name=self._cluster_name,
            ),
            child,
        )

    def _cluster(self, network: Network, child: pulumi.ResourceOptions) -> EksCluster:
        settings = self._args.fleet.aws
        region = self._args.region.name
        return EksCluster(
            f"{self._name}-eks",
            EksClusterArgs(
                cluster_name=self._cluster_name,
                region=region,
                settings=settings.cluster,
                vpc_id=network.vpc_id,
                vpc_cidr=settings.network.vpc_cidrs[region],
                subnet_ids=network.private_subnet_ids,
            ),
            child,
        )

    def _gpu_nodes(
        self, cluster: EksCluster, network: Network, child: pulumi.ResourceOptions
    ) -> list[pulumi.Resource]:
        ami = self._args.fleet.aws.cluster.gpu_ami_type
        groups: list[pulumi.Resource] = []
        multinode = multinode_gpu_types(self._args.fleet.catalog, self._args.region)
        efa = Efa(vpc_id=network.vpc_id, cluster_security_group_id=cluster.security_group_id)
        for pool in self._args.region.gpu_pools:
            nodes = ManagedNodes(
                f"{self._name}-{pool.name}",
                gpu_nodes_args(
                    pool,
                    cluster_name=cluster.name,
                    node_role_arn=cluster.node_role_arn,
                    subnet_ids=network.private_subnet_ids,
                    ami_type=ami,
                    node_labels=m.gpu_node_labels(pool),
                    efa=efa if pool.gpu_type in multinode else None,
                ),
                pulumi.ResourceOptions.merge(
                    child, pulumi.ResourceOptions(depends_on=cluster.node_prerequisites)
                ),
            )
            groups.append(nodes.node_group)
        return groups

    def _identities(self, cluster: EksCluster, isvcs: list[m.Manifest]) -> None:
        settings, child = self._args.fleet.aws, pulumi.ResourceOptions(parent=self)
        store = self._store
        reader = settings.model_store.service_account
        prefixes = m.model_prefixes(isvcs, bucket=store.bucket)
        for namespace in prefixes:  # a role per tenant namespace: its own models only
            PodRole(
                f"{self._name}-model-reader-{namespace}",
                PodRoleArgs(
                    cluster_name=cluster.name,
                    service_accounts=[(namespace, reader)],
                    statements=model_reader_statements(
                        store.bucket_arn, store.key_arn, prefixes[namespace]
                    ),
                ),
                child,
            )
        cached = m.cached_prefixes(self._model_cache(), bucket=store.bucket)
        if cached:  # KServe's download jobs, which fill the nodes' caches: those weights only
            PodRole(
                f"{self._name}-model-cache",
                PodRoleArgs(
                    cluster_name=cluster.name,
                    service_accounts=[(m.MODEL_CACHE_JOBS, m.MODEL_CACHE_JOB_ACCOUNT)],
                    statements=model_reader_statements(store.bucket_arn, store.key_arn, cached),
                ),
                child,
            )
        PodRole(
            f"{self._name}-controllers",
            PodRoleArgs(
                cluster_name=cluster.name,
                service_accounts=[(m.CONTROLLERS_NAMESPACE, m.CONTROLLERS)],
                statements=route53_statements(settings.dns.zone_id),
            ),
            child,
        )
        PodRole(
            f"{self._name}-autoscaler",
            PodRoleArgs(
                cluster_name=cluster.name,
                service_accounts=[("kube-system", AUTOSCALER_ACCOUNT)],
                statements=autoscaler_statements(self._cluster_name),
            ),
            child,
        )

    def _certificate(self) -> pulumi.Output[str]:
        """A DNS-validated certificate for the regional and global model names."""
        child = pulumi.ResourceOptions(parent=self)
        dns = self._args.fleet.aws.dns
        names = [f"*.{knative_domain(self._args.region.name, dns.domain)}", f"*.{dns.domain}"]
        cert = aws.acm.Certificate(
            f"{self._name}-tls",
            domain_name=names[0],
            subject_alternative_names=names[1:],
            validation_method="DNS",
            opts=child,
        )
        fqdns = []
        for i, wanted in enumerate(names):
            option = cert.domain_validation_options.apply(partial(_validation, domain=wanted))
            record = aws.route53.Record(
                f"{self._name}-tls-{i}",
                zone_id=dns.zone_id,
                name=option.apply(lambda o: o.resource_record_name or ""),
                type=option.apply(lambda o: o.resource_record_type or "CNAME"),
                records=[option.apply(lambda o: o.resource_record_value or "")],
                ttl=300,
                # The `*.<domain>` validation record is the same in every region of the account.
                allow_overwrite=True,
                opts=child,
            )
            fqdns.append(record.fqdn)
        validation = aws.acm.CertificateValidation(
            f"{self._name}-tls", certificate_arn=cert.arn, validation_record_fqdns=fqdns, opts=child
        )
        return validation.certificate_arn

    def _lb_security_group(self, network: Network) -> pulumi.Output[str]:
        """The only security group open to the internet: HTTPS into the ingress load balancer."""
        child = pulumi.ResourceOptions(parent=self)
        vpc_cidr = self._args.fleet.aws.network.vpc_cidrs[self._args.region.name]
        sg = aws.ec2.SecurityGroup(
            f"{self._name}-lb",
            vpc_id=network.vpc_id,
            description="HTTPS from clients to the model ingress load balancer",
            tags={LB_ROLE_TAG: LB_ROLE},
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{self._name}-lb-https",
            security_group_id=sg.id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            opts=child,
        )
        # Onwards only to the nodes' Kubernetes node ports, inside the VPC.
        aws.vpc.SecurityGroupEgressRule(
            f"{self._name}-lb-nodes",
            security_group_id=sg.id,
            cidr_ipv4=vpc_cidr,
            ip_protocol="tcp",
            from_port=30000,
            to_port=32767,
            opts=child,
        )
        return sg.id

    def _lb_annotations(self, network: Network) -> dict[str, pulumi.Input[str]]:
        """The region load balancer's: TLS with the region's certificate, our security group."""
        prefix = "service.beta.kubernetes.io/aws-load-balancer"
        return {
            f"{prefix}-security-groups": self._lb_security_group(network),
            f"{prefix}-ssl-cert": self._certificate(),
            f"{prefix}-ssl-ports": "443",
            f"{prefix}-backend-protocol": "http",
            f"{prefix}-connection-idle-timeout": str(LB_IDLE_TIMEOUT_S),
        }

    def _addons(
        self,
        cluster: EksCluster,
        after: list[pulumi.Resource],
        kube: pulumi.ResourceOptions,
    ) -> AddOns:
        settings = self._args.fleet.aws
        region = self._args.region.name
        return AddOns(
            f"{self._name}-addons",
            AddOnsArgs(
                charts=settings.charts,
                knative=settings.knative,
                domain=knative_domain(region, settings.dns.domain),
                storage_class=ebs_storage_class(),
                autoscaler_values=m.cluster_autoscaler_values(
                    cluster=self._cluster_name, region=region, service_account=AUTOSCALER_ACCOUNT
                ),
                model_cache=bool(self._model_cache()),
                after=after,
            ),
            kube,
        )

    def _model_cache(self) -> list[m.Manifest]:
        store = self._store
        fleet = self._args.fleet
        return m.model_cache(
            fleet.catalog, self._args.region, bucket_from=store.catalog_bucket,
            bucket_to=store.bucket, image=fleet.settings.controllers.reference,
        )  # fmt: skip

    def _headroom(self) -> list[m.Manifest]:
        pause = self._args.fleet.settings.pause
        # check_stack refuses a pool with headroom and no pause image before this runs.
        return [] if pause is None else m.gpu_headroom(self._args.region, image=pause.reference)

    def _failover_policies(self) -> list[m.Manifest]:
        """The fleet's FailoverPolicies, in the one region whose operator runs the failover."""
        fleet, dns = self._args.fleet, self._args.fleet.aws.dns
        if self._args.region.name != fleet.failover_region:
            return []
        return m.failover_policies(
            fleet.catalog, [r.name for r in fleet.regions], zone_id=dns.zone_id,
            domain=dns.domain, weights=dns.weights,
        )  # fmt: skip

    def _workloads(
        self,
        cluster: EksCluster,
        network: Network,
        addons: AddOns,
        kube: pulumi.ResourceOptions,
    ) -> Workloads:
        fleet, region, store = self._args.fleet, self._args.region, self._store
        isvcs = m.region_inference_services(
            fleet.catalog, region, bucket_from=store.catalog_bucket, bucket_to=store.bucket
        )
        self._identities(cluster, isvcs)
        args = region_workloads_args(
            fleet, region, isvcs, fleet_token=self._args.fleet_token,
            ingress_annotations=self._lb_annotations(network), kserve=addons.kserve,
            monitoring=addons.monitoring, headroom=self._headroom(),
            model_cache=self._model_cache(), model_cache_controller=addons.model_cache,
            failover_policies=self._failover_policies(),
        )  # fmt: skip
        return Workloads(f"{self._name}-workloads", args, kube)
