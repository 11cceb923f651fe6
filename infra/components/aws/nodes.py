"""EKS managed node groups behind a launch template that enforces the node baseline:
IMDSv2 only, no pod access to instance metadata, encrypted gp3 root volumes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from radixfleet import labels
from radixfleet.config import GpuPool

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


def gpu_nodes_args(
    pool: GpuPool,
    *,
    cluster_name: pulumi.Input[str],
    node_role_arn: pulumi.Input[str],
    subnet_ids: Sequence[pulumi.Input[str]],
    ami_type: str,
    node_labels: Mapping[str, str],
) -> ManagedNodesArgs:
    """The node group of one catalog GPU pool: its size, capacity, labels and the GPU taint."""
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
        self.node_group = aws.eks.NodeGroup(
            name,
            cluster_name=args.cluster_name,
            node_role_arn=args.node_role_arn,
            subnet_ids=list(args.subnet_ids),
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
        opts=child,
    )


def _tag_safe(node_labels: Mapping[str, str]) -> dict[str, str]:
    # Node labels double as instance tags for cost reports per GPU type and pool.
    return {k: v for k, v in node_labels.items() if k.startswith(labels.GROUP)}
