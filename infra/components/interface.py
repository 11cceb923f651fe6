"""What one region of the fleet is, independent of the cloud that hosts it.

`pulumi up` wires regions through this interface only: a second cloud adds an implementation of
`RegionalFleet` and a branch in `regional_fleet`, and nothing global changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pulumi

from infra.settings import Fleet
from radixfleet.config import Region


@dataclass(frozen=True)
class ModelStoreRef:
    """The region's copy of the model store, as its serving pods see it."""

    # The bucket the catalog's URIs name, and this region's bucket that replaces it.
    catalog_bucket: str
    bucket: str
    # The bucket's ARN and its encryption key's: each tenant's serving pods get a role that
    # reads only the prefixes of that tenant's models (infra.components.aws.region).
    bucket_arn: pulumi.Input[str]
    key_arn: pulumi.Input[str]


@dataclass(frozen=True)
class RegionalFleetArgs:
    """Everything a region needs: its catalog entry, the stack's settings, its model store."""

    fleet: Fleet
    region: Region
    # None on a cloud without a model store of ours: models read the catalog's URIs as written.
    model_store: ModelStoreRef | None
    # The fleet token (one for the fleet, a Pulumi secret): the failover shows it to each
    # region's entry to read that region's Prometheus.
    fleet_token: pulumi.Input[str]


class RegionalFleet(Protocol):
    """The outputs the global pieces (DNS, exports) need from a region."""

    @property
    def cluster_name(self) -> pulumi.Output[str]: ...

    @property
    def kubeconfig(self) -> pulumi.Output[str]: ...

    @property
    def ingress_hostname(self) -> pulumi.Output[str]:
        """The public name of the region's load balancer in front of the models."""
        ...


class UnknownCloudError(ValueError):
    """The stack names a cloud no `RegionalFleet` implementation exists for."""


def regional_fleet(
    name: str, args: RegionalFleetArgs, opts: pulumi.ResourceOptions | None = None
) -> RegionalFleet:
    """The region component for the stack's cloud; an unknown cloud is an error, not a default."""
    cloud = args.fleet.settings.cloud
    if cloud == "aws":
        # Imported here so that a stack on another cloud never loads the AWS SDK.
        from infra.components.aws.region import AwsRegionalFleet

        return AwsRegionalFleet(name, args, opts)
    if cloud == "kubernetes":
        from infra.components.kube.existing import ExistingRegionalFleet

        return ExistingRegionalFleet(name, args, opts)
    raise UnknownCloudError(f"no regional fleet for cloud {cloud!r}")
