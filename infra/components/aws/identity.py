"""IAM roles that pods assume through EKS Pod Identity: no static keys anywhere in the fleet."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pulumi
import pulumi_aws as aws

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


# IAM role names stop at 64 characters. The AWS provider adds a 26-character unique suffix to a
# `name_prefix`, so a prefix holds 38; Pulumi's own autoname (the resource name and 8 more)
# passed 64 for any tenant namespace over about 20 characters.
ROLE_NAME_MAX = 64
ROLE_PREFIX_MAX = ROLE_NAME_MAX - 26


def role_name_prefix(resource_name: str) -> str:
    """The `name_prefix` of the role declared as `resource_name`: the name itself when it fits,
    else its start and a hash of the whole (distinct resource names stay distinct)."""
    if len(resource_name) < ROLE_PREFIX_MAX:
        return f"{resource_name}-"
    digest = hashlib.sha256(resource_name.encode()).hexdigest()[:8]
    return f"{resource_name[: ROLE_PREFIX_MAX - len(digest) - 2]}-{digest}-"


def iam_role(
    resource_name: str, *, trusted: str, opts: pulumi.ResourceOptions | None = None
) -> aws.iam.Role:
    """An IAM role that `trusted` (a service principal) may assume, named within IAM's limit."""
    return aws.iam.Role(
        resource_name,
        name_prefix=role_name_prefix(resource_name),
        assume_role_policy=trust_policy(trusted),
        opts=opts,
    )


def trust_policy(principal: str) -> str:
    """A trust policy letting an AWS service principal assume the role (and tag the session)."""
    actions = (
        ["sts:AssumeRole", "sts:TagSession"]
        if principal == POD_IDENTITY_PRINCIPAL
        else ["sts:AssumeRole"]
    )
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": principal}, "Action": actions}
            ],
        }
    )


def policy_document(statements: Sequence[dict[str, Any]]) -> pulumi.Output[str]:
    """An IAM policy document from statements whose resources may still be outputs."""
    return pulumi.Output.json_dumps({"Version": "2012-10-17", "Statement": list(statements)})


@dataclass(frozen=True)
class PodRoleArgs:
    cluster_name: pulumi.Input[str]
    # (namespace, service account) pairs that may assume the role.
    service_accounts: Sequence[tuple[str, str]]
    statements: Sequence[dict[str, Any]] = ()
    managed_policy_arns: Sequence[pulumi.Input[str]] = field(default_factory=tuple)


class PodRole(pulumi.ComponentResource):
    """A role, its permissions, and the pod identity associations that hand it to pods."""

    arn: pulumi.Output[str]

    def __init__(self, name: str, args: PodRoleArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("radixfleet:aws:PodRole", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = iam_role(f"{name}-role", trusted=POD_IDENTITY_PRINCIPAL, opts=child)
        if args.statements:
            aws.iam.RolePolicy(
                f"{name}-policy", role=role.id, policy=policy_document(args.statements), opts=child
            )
        for i, arn in enumerate(args.managed_policy_arns):
            aws.iam.RolePolicyAttachment(
                f"{name}-managed-{i}", role=role.name, policy_arn=arn, opts=child
            )
        for namespace, account in args.service_accounts:
            aws.eks.PodIdentityAssociation(
                f"{name}-{namespace}-{account}",
                cluster_name=args.cluster_name,
                namespace=namespace,
                service_account=account,
                role_arn=role.arn,
                opts=child,
            )
        self.arn = role.arn
        self.register_outputs({"arn": role.arn})


def model_reader_statements(
    bucket_arn: pulumi.Input[str], key_arn: pulumi.Input[str], prefixes: Sequence[str]
) -> list[dict[str, Any]]:
    """Read only `prefixes` of the model store (listing included) and decrypt with its key:
    what one tenant's serving pods need for the weights and adapters of that tenant's models."""
    arn = pulumi.Output.from_input(bucket_arn)
    folders = [p.strip("/") for p in prefixes]
    listed = [pattern for f in folders for pattern in (f, f"{f}/*")]
    return [
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": arn,
            "Condition": {"StringLike": {"s3:prefix": listed}},
        },
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:GetObjectVersion"],
            "Resource": [arn.apply(partial(_objects_under, folder=f)) for f in folders],
        },
        {"Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": key_arn},
    ]


def _objects_under(bucket_arn: str, *, folder: str) -> str:
    return f"{bucket_arn}/{folder}/*"
