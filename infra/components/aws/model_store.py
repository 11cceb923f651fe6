"""The S3 model store: one private, KMS-encrypted, versioned, TLS-only bucket per region, either
replicated from a primary region or filled per region, and a read-only policy per bucket for
the serving pods' pod identity.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.components.aws.identity import iam_role, policy_document
from infra.components.interface import ModelStoreRef
from infra.settings import ModelStoreSettings


def bucket_name(base: str, region: str) -> str:
    return f"{base}-{region}"


def tls_only_policy(bucket_arn: str) -> dict[str, Any]:
    """Deny every request that does not arrive over TLS."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [bucket_arn, f"{bucket_arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ],
    }


@dataclass(frozen=True)
class ModelStoreArgs:
    settings: ModelStoreSettings
    regions: Sequence[str]
    primary_region: str
    providers: Mapping[str, aws.Provider]


@dataclass(frozen=True)
class _Bucket:
    bucket: aws.s3.Bucket
    key: aws.kms.Key
    versioning: aws.s3.BucketVersioning


class ModelStore(pulumi.ComponentResource):
    """Buckets, keys and replication of every region."""

    refs: dict[str, ModelStoreRef]

    def __init__(self, name: str, args: ModelStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("radixfleet:aws:ModelStore", name, None, opts)
        self._name, self._args = name, args
        buckets = {region: self._bucket(region) for region in args.regions}
        self.refs = {
            region: ModelStoreRef(
                catalog_bucket=args.settings.bucket,
                bucket=bucket_name(args.settings.bucket, region),
                bucket_arn=b.bucket.arn,
                key_arn=b.key.arn,
            )
            for region, b in buckets.items()
        }
        if args.settings.mode == "replicated" and len(buckets) > 1:
            self._replicate(buckets)
        self.register_outputs({"buckets": {r: ref.bucket for r, ref in self.refs.items()}})

    def _opts(self, region: str, after: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(
            parent=self, provider=self._args.providers[region], depends_on=list(after)
        )

    def _bucket(self, region: str) -> _Bucket:
        name, opts = f"{self._name}-{region}", self._opts(region)
        key = aws.kms.Key(
            f"{name}-key",
            description=f"Encrypts model weights in {region}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            opts=opts,
        )
        bucket = aws.s3.Bucket(
            name,
            bucket=bucket_name(self._args.settings.bucket, region),
            force_destroy=self._args.settings.force_destroy,
            opts=opts,
        )
        aws.s3.BucketOwnershipControls(
            name,
            bucket=bucket.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
            opts=opts,
        )
        block = aws.s3.BucketPublicAccessBlock(
            name,
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=opts,
        )
        versioning = aws.s3.BucketVersioning(
            name,
            bucket=bucket.id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(
                status="Enabled"
            ),
            opts=opts,
        )
        self._encrypt(name, bucket, key, opts)
        aws.s3.BucketPolicy(
            name,
            bucket=bucket.id,
            policy=bucket.arn.apply(lambda arn: json.dumps(tls_only_policy(arn))),
            # S3 rejects a bucket policy while the public access block is being written.
            opts=self._opts(region, [block]),
        )
        return _Bucket(bucket, key, versioning)

    def _encrypt(
        self, name: str, bucket: aws.s3.Bucket, key: aws.kms.Key, opts: pulumi.ResourceOptions
    ) -> None:
        s3 = aws.s3
        default = (
            s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                sse_algorithm="aws:kms", kms_master_key_id=key.arn
            )
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            name,
            bucket=bucket.id,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=default,
                    # Bucket keys cut KMS requests (and their cost) for large multi-part objects.
                    bucket_key_enabled=True,
                )
            ],
            opts=opts,
        )

    def _replicate(self, buckets: dict[str, _Bucket]) -> None:
        primary = self._args.primary_region
        source, replicas = buckets[primary], {r: b for r, b in buckets.items() if r != primary}
        opts = self._opts(primary)
        role = iam_role(f"{self._name}-replication", trusted="s3.amazonaws.com", opts=opts)
        aws.iam.RolePolicy(
            f"{self._name}-replication",
            role=role.id,
            policy=policy_document(_replication_statements(source, list(replicas.values()))),
            opts=opts,
        )
        rules = [
            aws.s3.BucketReplicationConfigRuleArgs(
                id=f"to-{region}",
                priority=i,
                status="Enabled",
                filter=aws.s3.BucketReplicationConfigRuleFilterArgs(prefix=""),
                delete_marker_replication=aws.s3.BucketReplicationConfigRuleDeleteMarkerReplicationArgs(
                    status="Enabled"
                ),
                source_selection_criteria=aws.s3.BucketReplicationConfigRuleSourceSelectionCriteriaArgs(
                    sse_kms_encrypted_objects=aws.s3.BucketReplicationConfigRuleSourceSelectionCriteriaSseKmsEncryptedObjectsArgs(
                        status="Enabled"
                    )
                ),
                destination=aws.s3.BucketReplicationConfigRuleDestinationArgs(
                    bucket=b.bucket.arn,
                    encryption_configuration=aws.s3.BucketReplicationConfigRuleDestinationEncryptionConfigurationArgs(
                        replica_kms_key_id=b.key.arn
                    ),
                ),
            )
            for i, (region, b) in enumerate(sorted(replicas.items()))
        ]
        versioned = [b.versioning for b in buckets.values()]
        aws.s3.BucketReplicationConfig(
            f"{self._name}-replication",
            bucket=source.bucket.id,
            role=role.arn,
            rules=rules,
            # Replication needs versioning on both ends first.
            opts=self._opts(primary, versioned),
        )


def _replication_statements(source: _Bucket, replicas: list[_Bucket]) -> list[dict[str, Any]]:
    arn = source.bucket.arn
    return [
        {
            "Effect": "Allow",
            "Action": ["s3:GetReplicationConfiguration", "s3:ListBucket"],
            "Resource": arn,
        },
        {
            "Effect": "Allow",
            "Action": [
                "s3:GetObjectVersionForReplication",
                "s3:GetObjectVersionAcl",
                "s3:GetObjectVersionTagging",
            ],
            "Resource": arn.apply(lambda a: f"{a}/*"),
        },
        {
            "Effect": "Allow",
            "Action": ["s3:ReplicateObject", "s3:ReplicateDelete", "s3:ReplicateTags"],
            "Resource": [r.bucket.arn.apply(lambda a: f"{a}/*") for r in replicas],
        },
        {"Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": source.key.arn},
        {"Effect": "Allow", "Action": ["kms:Encrypt"], "Resource": [r.key.arn for r in replicas]},
    ]
