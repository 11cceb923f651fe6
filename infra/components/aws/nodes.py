"""EKS managed node groups behind a launch template that enforces the node baseline:
IMDSv2 only, no pod access to instance metadata, encrypted gp3 root volumes.

A pool that runs a multi-node model (its ranks exchange activations and all-reduces across
nodes every step) gets EFA and a cluster placement group: one EFA interface on each of the
instance type's network cards, in a security group that lets the pool's nodes reach each other
on every protocol (EFA's SRD traffic is not TCP), the cluster's own security group beside it,
and every node in one placement group of strategy `cluster` in one zone, so the 3,200 Gbit/s
of a p5 stays inside one spine. infra/README.md, "Multi-node models", says what is still left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from radixfleet import labels
from radixfleet.config import GpuPool
from radixfleet.config.catalog import Catalog, Region

# EFA-capable network cards per instance type (AWS's "Maximize network bandwidth" table): one
# EFA interface on each. A multi-node pool of a type not listed is refused, by name.
EFA_CARDS = {
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
}

# EKS spells taint effects in its own enum.
EKS_TAINT_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}

# Where each AMI family keeps what grows with model weights (images, emptyDirs, caches).
DATA_DEVICE = {
    "AL2023_x86_64_NVIDIA": "/dev/xvda",
    "AL2023_x86_64_STANDARD": "/dev/xvda",
    "BOTTLEROCKET_x86_64_NVIDIA": "/dev/xvdb",
}


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


GPU_TAINT = Taint(labels.GPU_TAINT_KEY, labels.GPU_TAINT_VALUE, labels.GPU_TAINT_EFFECT)


@dataclass(frozen=True)
class ManagedNodesArgs:
    cluster_name: pulumi.Input[str]
    node_role_arn: pulumi.Input[str]
    subnet_ids: Sequence[pulumi.Input[str]]
    instance_type: str
    ami_type: str
    capacity: str
    min_nodes: int
    max_nodes: int
    volume_gib: int
    labels: Mapping[str, str]
    taints: Sequence[Taint] = field(default_factory=tuple)
    # A multi-node pool's: the VPC of its EFA security group and the cluster's security group.
    efa: Efa | None = None


@dataclass(frozen=True)
class Efa:
    """What a multi-node pool's nodes need to meet each other over EFA."""

    vpc_id: pulumi.Input[str]
    cluster_security_group_id: pulumi.Input[str]


def multinode_gpu_types(catalog: Catalog, region: Region) -> set[str]:
    """The GPU types a model of more than one node runs on in `region`."""
    return {m.gpu_type for m in catalog.models if m.nodes > 1 and region.name in m.regions}


def efa_cards(instance_type: str) -> int:
    """How many EFA interfaces a node of `instance_type` gets; a type without EFA is refused."""
    if instance_type not in EFA_CARDS:
        known = ", ".join(sorted(EFA_CARDS))
        raise ValueError(f"a multi-node GPU pool needs EFA: {instance_type} has none ({known})")
    return EFA_CARDS[instance_type]


def gpu_nodes_args(
    pool: GpuPool,
    *,
    cluster_name: pulumi.Input[str],
    node_role_arn: pulumi.Input[str],
    subnet_ids: Sequence[pulumi.Input[str]],
    ami_type: str,
    node_labels: Mapping[str, str],
    efa: Efa | None = None,
) -> ManagedNodesArgs:
    """The node group of one catalog GPU pool: its size, capacity, labels and the GPU taint
    (and EFA with a placement group, for a pool of multi-node models)."""
    if efa is not None:
        efa_cards(pool.instance_type)  # refused here, by name, before any resource
    return ManagedNodesArgs(
        cluster_name=cluster_name,
        node_role_arn=node_role_arn,
        subnet_ids=subnet_ids,
        instance_type=pool.instance_type,
        ami_type=ami_type,
        capacity=pool.capacity,
        min_nodes=pool.min_nodes,
        max_nodes=pool.max_nodes,
        volume_gib=pool.root_volume_gib,
        labels=node_labels,
        taints=(GPU_TAINT,),
        efa=efa,
    )


class ManagedNodes(pulumi.ComponentResource):
    """A launch template and the managed node group that uses it."""

    node_group: aws.eks.NodeGroup

    def __init__(
        self, name: str, args: ManagedNodesArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("radixfleet:aws:ManagedNodes", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        template = _launch_template(name, args, child)
        # A cluster placement group lives in one zone: its nodes go to the first subnet's.
        subnets = list(args.subnet_ids)[:1] if args.efa else list(args.subnet_ids)
        self.node_group = aws.eks.NodeGroup(
            name,
            cluster_name=args.cluster_name,
            node_role_arn=args.node_role_arn,
            subnet_ids=subnets,
            instance_types=[args.instance_type],
            ami_type=args.ami_type,
            capacity_type="SPOT" if args.capacity == "spot" else "ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=args.min_nodes, max_size=args.max_nodes, desired_size=args.min_nodes
            ),
            labels=dict(args.labels),
            taints=[
                aws.eks.NodeGroupTaintArgs(
                    key=t.key, value=t.value, effect=EKS_TAINT_EFFECTS[t.effect]
                )
                for t in args.taints
            ],
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=template.id, version=template.latest_version.apply(str)
            ),
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
            # The cluster autoscaler owns the node count between min and max; Pulumi must not
            # reset it on the next `pulumi up`.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["scalingConfig.desiredSize"]),
        )
        self.register_outputs({"nodeGroup": self.node_group.arn})


def _launch_template(
    name: str, args: ManagedNodesArgs, child: pulumi.ResourceOptions
) -> aws.ec2.LaunchTemplate:
    volume = aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
        volume_size=args.volume_gib,
        volume_type="gp3",
        # Large models load from local disk after the first pull: give the volume headroom.
        throughput=500,
        iops=6000,
        encrypted="true",
        delete_on_termination="true",
    )
    interfaces, placement = _efa(name, args, args.efa, child) if args.efa else (None, None)
    return aws.ec2.LaunchTemplate(
        f"{name}-lt",
        description=f"radixfleet nodes {name}",
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_endpoint="enabled",
            http_tokens="required",
            # One hop: the node reaches metadata, pods do not (they get AWS access through Pod
            # Identity, never through the node's role).
            http_put_response_hop_limit=1,
        ),
        block_device_mappings=[
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=DATA_DEVICE[args.ami_type], ebs=volume
            )
        ],
        tag_specifications=[
            aws.ec2.LaunchTemplateTagSpecificationArgs(
                resource_type=kind, tags={"Name": name, **_tag_safe(args.labels)}
            )
            for kind in ("instance", "volume")
        ],
        update_default_version=True,
        network_interfaces=interfaces,
        placement=placement,
        opts=child,
    )


def _efa(
    name: str, args: ManagedNodesArgs, efa: Efa, child: pulumi.ResourceOptions
) -> tuple[list[aws.ec2.LaunchTemplateNetworkInterfaceArgs], aws.ec2.LaunchTemplatePlacementArgs]:
    """The launch template's EFA interfaces (one per network card; only card 0's is the
    primary, device 0) and its cluster placement group."""
    group = aws.ec2.PlacementGroup(f"{name}-pg", strategy="cluster", opts=child)
    peers = aws.ec2.SecurityGroup(
        f"{name}-efa", vpc_id=efa.vpc_id, description="EFA between one pool's nodes", opts=child
    )
    aws.vpc.SecurityGroupIngressRule(f"{name}-efa-in", security_group_id=peers.id,
                                     referenced_security_group_id=peers.id, ip_protocol="-1",
                                     opts=child)  # fmt: skip
    aws.vpc.SecurityGroupEgressRule(f"{name}-efa-out", security_group_id=peers.id,
                                    referenced_security_group_id=peers.id, ip_protocol="-1",
                                    opts=child)  # fmt: skip
    interfaces = [
        aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=card, device_index=0 if card == 0 else 1, interface_type="efa",
            security_groups=[peers.id, efa.cluster_security_group_id],
            delete_on_termination="true",
        )
        for card in range(efa_cards(args.instance_type))
    ]  # fmt: skip
    return interfaces, aws.ec2.LaunchTemplatePlacementArgs(group_name=group.name)


def _tag_safe(node_labels: Mapping[str, str]) -> dict[str, str]:
    # Node labels double as instance tags for cost reports per GPU type and pool.
    return {k: v for k, v in node_labels.items() if k.startswith(labels.GROUP)}
