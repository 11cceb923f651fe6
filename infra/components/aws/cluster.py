"""A region's EKS cluster: KMS-encrypted secrets, an optionally private API endpoint, an OIDC
provider and Pod Identity for workloads, the EKS-managed add-ons and the system node group.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.components.aws.identity import PodRole, PodRoleArgs, iam_role, policy_document
from infra.components.aws.nodes import ManagedNodes, ManagedNodesArgs
from infra.manifests import SYSTEM_NODE_LABELS, kubeconfig
from infra.settings import ClusterSettings

MANAGED = "arn:aws:iam::aws:policy/"
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
    # Shell access through Session Manager instead of SSH keys and an open port 22.
    "AmazonSSMManagedInstanceCore",
)
# The CNI and kube-proxy must exist before nodes can become Ready; CoreDNS and the EBS driver
# need Ready nodes to schedule on.
ADDONS_BEFORE_NODES = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
# Add-on settings (each add-on's configuration schema: `aws eks describe-addon-configuration`).
# The VPC CNI enforces NetworkPolicies only with its network policy agent turned on; without it
# every tenant namespace's policies are accepted and do nothing.
ADDON_CONFIGURATION: dict[str, dict[str, str]] = {"vpc-cni": {"enableNetworkPolicy": "true"}}


@dataclass(frozen=True)
class EksClusterArgs:
    cluster_name: str
    region: str
    settings: ClusterSettings
    vpc_id: pulumi.Input[str]
    vpc_cidr: str
    subnet_ids: Sequence[pulumi.Input[str]]


class EksCluster(pulumi.ComponentResource):
    """The control plane, its identity plumbing and the nodes the add-ons run on."""

    name: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    node_role_arn: pulumi.Output[str]
    system_nodes: aws.eks.NodeGroup
    # What any node group needs first (the CNI), and what the add-ons need (nodes, DNS, EBS).
    node_prerequisites: list[pulumi.Resource]
    ready: list[pulumi.Resource]

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("radixfleet:aws:EksCluster", name, None, opts)
        self._name, self._args = name, args
        child = pulumi.ResourceOptions(parent=self)
        cluster = self._control_plane(child)
        self.name = cluster.name
        # The security group EKS makes for the cluster: a node whose launch template names its
        # network interfaces (EFA) names it there too, or it never reaches the control plane.
        self.security_group_id = cluster.vpc_config.cluster_security_group_id
        aws.iam.OpenIdConnectProvider(
            f"{name}-oidc",
            url=cluster.identities[0].oidcs[0].issuer.apply(lambda u: u or ""),
            client_id_lists=["sts.amazonaws.com"],
            opts=child,
        )
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(
                cluster.name, cluster.endpoint, cluster.certificate_authority.data
            ).apply(
                lambda a: kubeconfig(
                    cluster=a[0], endpoint=a[1], ca_data=a[2] or "", region=args.region
                )
            )
        )
        early = [self._addon(cluster, n, child) for n in ADDONS_BEFORE_NODES]
        self.node_prerequisites = list(early)
        self.system_nodes = self._system_nodes(cluster, early)
        late = [
            self._addon(cluster, "coredns", child, after=[self.system_nodes]),
            self._ebs_csi(cluster, child),
        ]
        self.ready = [self.system_nodes, *early, *late]
        self.register_outputs({"name": cluster.name, "endpoint": cluster.endpoint})

    def _control_plane(self, child: pulumi.ResourceOptions) -> aws.eks.Cluster:
        name, args, settings = self._name, self._args, self._args.settings
        key = aws.kms.Key(
            f"{name}-secrets",
            description=f"Encrypts Kubernetes secrets of {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            opts=child,
        )
        role = self._cluster_role(key)
        api = aws.ec2.SecurityGroup(
            f"{name}-api",
            vpc_id=args.vpc_id,
            description="Kubernetes API from inside the VPC only",
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-api-https",
            security_group_id=api.id,
            cidr_ipv4=args.vpc_cidr,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            opts=child,
        )
        return aws.eks.Cluster(
            f"{name}-cluster",
            name=args.cluster_name,
            version=settings.kubernetes_version,
            role_arn=role.arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=list(args.subnet_ids),
                security_group_ids=[api.id],
                endpoint_private_access=True,
                endpoint_public_access=not settings.private_endpoint,
                public_access_cidrs=None
                if settings.private_endpoint
                else settings.public_access_cidrs,
            ),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                resources=["secrets"],
                provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=key.arn),
            ),
            # Access entries instead of the aws-auth ConfigMap; node roles get theirs from EKS.
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API", bootstrap_cluster_creator_admin_permissions=True
            ),
            # The add-ons are EKS-managed below, pinned; EKS must not install its own copies.
            bootstrap_self_managed_addons=False,
            enabled_cluster_log_types=["api", "audit", "authenticator"],
            # Extended support costs six times the standard hourly fee: upgrade instead.
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type="STANDARD"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[role]),
        )

    def _cluster_role(self, key: aws.kms.Key) -> aws.iam.Role:
        child = pulumi.ResourceOptions(parent=self)
        role = iam_role(f"{self._name}-cluster", trusted="eks.amazonaws.com", opts=child)
        aws.iam.RolePolicyAttachment(
            f"{self._name}-cluster-policy",
            role=role.name,
            policy_arn=MANAGED + "AmazonEKSClusterPolicy",
            opts=child,
        )
        kms = {
            "Effect": "Allow",
            "Action": ["kms:Encrypt", "kms:Decrypt", "kms:DescribeKey", "kms:CreateGrant"],
            "Resource": key.arn,
        }
        aws.iam.RolePolicy(
            f"{self._name}-cluster-kms", role=role.id, policy=policy_document([kms]), opts=child
        )
        return role

    def _node_role(self) -> aws.iam.Role:
        child = pulumi.ResourceOptions(parent=self)
        role = iam_role(f"{self._name}-nodes", trusted="ec2.amazonaws.com", opts=child)
        for policy in NODE_POLICIES:
            aws.iam.RolePolicyAttachment(
                f"{self._name}-nodes-{policy}",
                role=role.name,
                policy_arn=MANAGED + policy,
                opts=child,
            )
        return role

    def _system_nodes(
        self, cluster: aws.eks.Cluster, addons: list[aws.eks.Addon]
    ) -> aws.eks.NodeGroup:
        role = self._node_role()
        self.node_role_arn = role.arn
        system = self._args.settings.system_nodes
        nodes = ManagedNodes(
            f"{self._name}-system",
            ManagedNodesArgs(
                cluster_name=cluster.name,
                node_role_arn=role.arn,
                subnet_ids=self._args.subnet_ids,
                instance_type=system.instance_type,
                ami_type="AL2023_x86_64_STANDARD",
                capacity="on-demand",
                min_nodes=system.min_nodes,
                max_nodes=system.max_nodes,
                volume_gib=system.root_volume_gib,
                labels=SYSTEM_NODE_LABELS,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=addons),
        )
        return nodes.node_group

    def _addon(
        self,
        cluster: aws.eks.Cluster,
        addon: str,
        child: pulumi.ResourceOptions,
        *,
        after: Sequence[pulumi.Resource] = (),
        roles: Sequence[aws.eks.AddonPodIdentityAssociationArgs] = (),
    ) -> aws.eks.Addon:
        return aws.eks.Addon(
            f"{self._name}-{addon}",
            cluster_name=cluster.name,
            addon_name=addon,
            addon_version=self._args.settings.addons[addon],
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            pod_identity_associations=list(roles) or None,
            configuration_values=_configuration(addon),
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=list(after))
            ),
        )

    def _ebs_csi(self, cluster: aws.eks.Cluster, child: pulumi.ResourceOptions) -> aws.eks.Addon:
        # Prometheus keeps its data on EBS volumes; the driver's controller gets AWS access
        # through Pod Identity like every other workload.
        role = PodRole(
            f"{self._name}-ebs-csi",
            PodRoleArgs(
                cluster_name=cluster.name,
                service_accounts=(),
                managed_policy_arns=(MANAGED + "service-role/AmazonEBSCSIDriverPolicy",),
            ),
            child,
        )
        association = aws.eks.AddonPodIdentityAssociationArgs(
            role_arn=role.arn, service_account="ebs-csi-controller-sa"
        )
        return self._addon(
            cluster, "aws-ebs-csi-driver", child, after=[self.system_nodes], roles=[association]
        )


def _configuration(addon: str) -> str | None:
    settings = ADDON_CONFIGURATION.get(addon)
    return json.dumps(settings) if settings else None
