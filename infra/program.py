"""The program `pulumi up` runs: read and validate the stack config, wire the components, export.

Nothing here runs on import; `main()` is called by `infra/__main__.py` (and by the tests and the
benchmark under Pulumi's mocks).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_random as random

from infra.components.aws.dns import ModelDns, ModelDnsArgs
from infra.components.aws.model_store import ModelStore, ModelStoreArgs
from infra.components.interface import RegionalFleet, RegionalFleetArgs, regional_fleet
from infra.settings import CONFIG_KEYS, NAMESPACE, STRING_KEYS, Fleet, parse_fleet
from radixfleet.config import ConfigError

INFRA_DIR = Path(__file__).resolve().parent


def read_config(config: pulumi.Config) -> dict[str, Any]:
    """The `radixfleet:*` values of the stack, objects decoded, absent keys left out."""
    raw: dict[str, Any] = {}
    for key in CONFIG_KEYS:
        value = config.get(key)
        if value is None:
            continue
        raw[key] = value if key in STRING_KEYS else _decode(value)
    return raw


def _decode(value: str) -> Any:
    # Pulumi hands objects and lists over as JSON and scalars as their text.
    try:
        return json.loads(value)
    except ValueError:
        return value


def load_fleet() -> Fleet:
    """The validated stack, or a `RunError` listing every problem (no resource declared yet)."""
    source = f"Pulumi.{pulumi.get_stack()}.yaml"
    try:
        return parse_fleet(read_config(pulumi.Config(NAMESPACE)), source=source, base_dir=INFRA_DIR)
    except ConfigError as err:
        count = len(err.problems)
        raise pulumi.RunError(
            f"the stack configuration has {count} problem{'s' if count > 1 else ''}:\n{err}"
        ) from None


def build(fleet: Fleet) -> dict[str, RegionalFleet]:
    """Declare the whole fleet on the stack's cloud."""
    if fleet.settings.cloud == "kubernetes":
        return build_on_existing_clusters(fleet)
    return build_on_aws(fleet)


def build_on_existing_clusters(fleet: Fleet) -> dict[str, RegionalFleet]:
    """One regional fleet per region, each onto the cluster its kubeconfig reaches; no cloud
    resource (no model store, no DNS: the team's own)."""
    # A secret config value: parse_fleet has refused a stack without it.
    token = pulumi.Output.secret(fleet.settings.fleet_token or "")
    fleets = {
        region.name: regional_fleet(
            f"region-{region.name}",
            RegionalFleetArgs(fleet=fleet, region=region, model_store=None, fleet_token=token),
        )
        for region in fleet.regions
    }
    pulumi.export("clusters", {r: f.cluster_name for r, f in fleets.items()})
    pulumi.export("kubeconfigs", {r: f.kubeconfig for r, f in fleets.items()})
    return fleets


def build_on_aws(fleet: Fleet) -> dict[str, RegionalFleet]:
    """Declare the whole fleet: model store, one regional fleet per region, DNS."""
    aws_settings = fleet.aws
    regions = [r.name for r in fleet.regions]
    tags = {"radixfleet:stack": pulumi.get_stack(), "radixfleet:managed-by": "pulumi"}
    providers = {
        name: aws.Provider(
            f"aws-{name}", region=name, default_tags=aws.ProviderDefaultTagsArgs(tags=tags)
        )
        for name in regions
    }
    store = ModelStore(
        "model-store",
        ModelStoreArgs(
            settings=aws_settings.model_store,
            regions=regions,
            primary_region=fleet.primary_region,
            providers=providers,
        ),
    )
    # One token for the fleet: every region's entry checks it, the failover's operator shows it.
    token = random.RandomPassword("fleet-token", length=48, special=False)
    fleets = {
        region.name: regional_fleet(
            f"region-{region.name}",
            RegionalFleetArgs(
                fleet=fleet,
                region=region,
                model_store=store.refs[region.name],
                fleet_token=token.result,
            ),
            pulumi.ResourceOptions(providers=[providers[region.name]]),
        )
        for region in fleet.regions
    }
    dns = ModelDns(
        "dns",
        ModelDnsArgs(
            settings=aws_settings.dns,
            endpoints=_endpoints(fleet),
            ingress_hostnames={r: f.ingress_hostname for r, f in fleets.items()},
        ),
        # Route 53 is global; its API is reached through the primary region's provider.
        pulumi.ResourceOptions(provider=providers[fleet.primary_region]),
    )
    _export(store, fleets, dns)
    return fleets


def _endpoints(fleet: Fleet) -> dict[str, list[str]]:
    deployed = [r.name for r in fleet.regions]
    return {
        model.name: [r for r in deployed if r in model.regions]
        for model in fleet.catalog.models
        if any(r in model.regions for r in deployed)
    }


def _export(store: ModelStore, fleets: dict[str, RegionalFleet], dns: ModelDns) -> None:
    pulumi.export("modelBuckets", {r: ref.bucket for r, ref in store.refs.items()})
    pulumi.export("clusters", {r: f.cluster_name for r, f in fleets.items()})
    pulumi.export("ingress", {r: f.ingress_hostname for r, f in fleets.items()})
    pulumi.export("kubeconfigs", {r: f.kubeconfig for r, f in fleets.items()})
    pulumi.export("endpoints", dns.names)


def main() -> None:
    build(load_fleet())
