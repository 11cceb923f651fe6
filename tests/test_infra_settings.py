"""The stack config: the example parses; every kind of bad stack or catalog is one clear error,
located by config key, raised before the program declares any resource.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from infra.program import INFRA_DIR
from infra.settings import Fleet, duration_seconds, parse_fleet
from infra.testing import RecordingMocks, example_config, radixfleet_values, run_program
from radixfleet.config import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CATALOG = INFRA_DIR.parent / "inferenceservices" / "catalog.yaml"


def values() -> dict[str, Any]:
    return copy.deepcopy(radixfleet_values(example_config()))


def parse(raw: dict[str, Any]) -> Fleet:
    return parse_fleet(raw, source="Pulumi.test.yaml", base_dir=INFRA_DIR)


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse(raw)
    return [str(p) for p in caught.value.problems]


def with_catalog(
    tmp_path: Path, raw: dict[str, Any], change: Callable[[dict[str, Any]], None]
) -> None:
    """Point `raw` at a copy of the repository catalog with `change` applied."""
    catalog = yaml.safe_load(CATALOG.read_text())
    change(catalog)
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    raw["catalog"] = str(path)


def test_the_example_stack_parses_into_three_regions() -> None:
    fleet = parse(values())
    assert [r.name for r in fleet.regions] == ["us-east-1", "eu-west-1", "ap-northeast-1"]
    assert fleet.primary_region == "us-east-1"
    assert fleet.failover_region == "us-east-1"  # the primary region's, unless set


def test_the_example_as_written_is_refused_at_each_placeholder_digest() -> None:
    """A copy of the example that was not given real image digests stops before any resource,
    naming every image still to push (an all-zero digest would pull nothing)."""
    found = problems(radixfleet_values(example_config(as_written=True)))
    assert sorted(p.split(": ")[1] for p in found) == [
        "radixfleet:controllers.digest", "radixfleet:controllers.router.digest",
        "radixfleet:pause.digest", "radixfleet:runtime.digest",
    ]  # fmt: skip
    assert all("placeholder" in p for p in found), found


# A good key of each tenant the example serves (`openssl rand -hex 32` makes 64 characters).
GOOD_KEY = "0123456789abcdef" * 4
SERVED = ("research", "search", "support")


def _tenant_keys(**changes: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A mutation setting `tenantKeys`: every served tenant's `api-key`, then `changes`."""
    keys: dict[str, Any] = {tenant: {"api-key": GOOD_KEY} for tenant in SERVED}
    return lambda v: v.update(tenantKeys={**keys, **changes})


STACK_CASES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "tenant-key-missing": (
        lambda v: v.update(tenantKeys={"search": {"api-key": GOOD_KEY}}),
        "radixfleet:tenantKeys.support.api-key: missing: the catalog names the key",
    ),
    "tenant-key-the-catalog-does-not-name": (
        _tenant_keys(search={"api-key": GOOD_KEY, "2027-01": GOOD_KEY}),
        "radixfleet:tenantKeys.search.2027-01: not one of the catalog's api_keys of search",
    ),
    "tenant-key-of-no-tenant": (
        _tenant_keys(nobody={"api-key": GOOD_KEY}),
        "radixfleet:tenantKeys.nobody: no such tenant in the catalog",
    ),
    "tenant-key-too-short": (
        _tenant_keys(search={"api-key": "hunter2"}),
        "radixfleet:tenantKeys.search.api-key: too short: at least 32 characters",
    ),
    "tenant-key-with-a-space": (
        _tenant_keys(search={"api-key": GOOD_KEY + " x"}),
        "radixfleet:tenantKeys.search.api-key: only printable ASCII, no spaces",
    ),
    "duplicate-region": (
        lambda v: v.update(regions=["us-east-1", "eu-west-1", "us-east-1"]),
        "radixfleet:regions: region 'us-east-1' is listed 2 times",
    ),
    "unknown-region": (
        lambda v: v.update(regions=["us-east-1", "mars-north-1"]),
        "radixfleet:regions[1]: the catalog has no region 'mars-north-1'",
    ),
    "unpinned-chart": (
        lambda v: v["charts"]["cert-manager"].update(version="latest"),
        "radixfleet:charts.cert-manager.version: 'latest' is not a pinned version",
    ),
    "range-chart": (
        lambda v: v["charts"]["cert-manager"].update(version="^1.17"),
        "radixfleet:charts.cert-manager.version: '^1.17' is not a pinned version",
    ),
    "missing-chart": (
        lambda v: v["charts"].pop("dcgm-exporter"),
        "radixfleet:charts.dcgm-exporter: missing",
    ),
    "missing-eks-addon": (
        lambda v: v["cluster"]["addons"].pop("coredns"),
        "radixfleet:cluster.addons.coredns: missing",
    ),
    "unquoted-kubernetes-version": (
        lambda v: v["cluster"].update(kubernetesVersion=1.33),
        "radixfleet:cluster.kubernetesVersion: 1.33: Input should be a valid string",
    ),
    # Chart 9.46.6 runs cluster autoscaler 1.32 (the example's until it was caught) on 1.35
    "cluster-autoscaler-of-another-minor": (
        lambda v: v["charts"]["cluster-autoscaler"].update(version="9.46.6"),
        "radixfleet:charts.cluster-autoscaler.version: 9.46.6 runs cluster autoscaler 1.32.0, "
        "not the cluster's 1.35",
    ),
    "cluster-autoscaler-unknown-chart": (
        lambda v: v["charts"]["cluster-autoscaler"].update(version="9.99.0"),
        "radixfleet:charts.cluster-autoscaler.version: 9.99.0: which cluster autoscaler it runs",
    ),
    "public-endpoint-without-cidrs": (
        lambda v: v["cluster"].update(publicAccessCidrs=[]),
        "radixfleet:cluster.publicAccessCidrs: a public API endpoint needs the CIDRs",
    ),
    "public-endpoint-open-to-all": (
        lambda v: v["cluster"].update(publicAccessCidrs=["0.0.0.0/0"]),
        "radixfleet:cluster.publicAccessCidrs: together they open the API to 4,294,967,296 "
        "addresses (the whole internet)",
    ),
    "public-endpoint-open-to-all-in-two-halves": (
        lambda v: v["cluster"].update(publicAccessCidrs=["0.0.0.0/1", "128.0.0.0/1"]),
        "radixfleet:cluster.publicAccessCidrs: together they open the API to 4,294,967,296 "
        "addresses (the whole internet)",
    ),
    "public-endpoint-open-to-a-slash-7": (
        lambda v: v["cluster"].update(publicAccessCidrs=["10.0.0.0/8", "11.0.0.0/8"]),
        "radixfleet:cluster.publicAccessCidrs: together they open the API to 33,554,432",
    ),
    "overlapping-cidrs": (
        lambda v: v["network"]["vpcCidrs"].update({"eu-west-1": "10.10.0.0/17"}),
        "radixfleet:network.vpcCidrs.eu-west-1: 10.10.0.0/17 overlaps the CIDR of us-east-1",
    ),
    "missing-cidr": (
        lambda v: v["network"]["vpcCidrs"].pop("eu-west-1"),
        "radixfleet:network.vpcCidrs.eu-west-1: missing",
    ),
    "two-zones": (
        lambda v: v["network"].update(availabilityZones=2),
        "radixfleet:network.availabilityZones: 2: Input should be greater than or equal to 3",
    ),
    "unknown-key": (
        lambda v: v["dns"].update(ttl=30),
        "radixfleet:dns.ttl: unknown field",
    ),
    "weight-for-unknown-region": (
        lambda v: v["dns"]["weights"].update({"us-west-2": 10}),
        "radixfleet:dns.weights.us-west-2: 'us-west-2' is not a deployed region",
    ),
    "failover-region-not-deployed": (
        lambda v: v["controllers"].update(failoverRegion="us-west-2"),
        "radixfleet:controllers.failoverRegion: 'us-west-2' is not a deployed region",
    ),
    "primary-not-deployed": (
        lambda v: v["modelStore"].update(primaryRegion="us-west-2"),
        "radixfleet:modelStore.primaryRegion: 'us-west-2' is not a deployed region",
    ),
    "bad-stable-window": (
        lambda v: v["knative"].update(stableWindow="2h"),
        "radixfleet:knative.stableWindow: 7200s is outside Knative's 6s..1h",
    ),
    "bad-duration": (
        lambda v: v["knative"].update(scaleToZeroGracePeriod="30 seconds"),
        "radixfleet:knative.scaleToZeroGracePeriod: '30 seconds' is not a duration",
    ),
    "unused-pool": (
        lambda v: v.update(reservedPools=[]),
        "GPU pool ap-northeast-1/l40s-spot is used by no catalog model",
    ),
    "image-by-tag-alone": (
        lambda v: v["controllers"].pop("digest"),
        "radixfleet:controllers.digest: Field required",
    ),
    "image-digest-not-sha256": (
        lambda v: v["controllers"].update(digest="latest"),
        "radixfleet:controllers.digest: 'latest' is not an image digest like sha256:",
    ),
    "router-image-left-out": (
        lambda v: v["controllers"].pop("router"),
        "radixfleet:controllers.router: Field required",
    ),
    "router-image-by-tag-alone": (
        lambda v: v["controllers"]["router"].pop("digest"),
        "radixfleet:controllers.router.digest: Field required",
    ),
    "runtime-image-by-tag-alone": (
        lambda v: v["runtime"].pop("digest"),
        "radixfleet:runtime.digest: Field required",
    ),
    "headroom-without-a-pause-image": (
        lambda v: v.pop("pause"),
        "radixfleet:pause: GPU pools us-east-1/h100-ondemand keep headroom_gpus free with "
        "placeholder pods: name their pause image (image, tag, digest)",
    ),
    "entry-without-replicas": (
        lambda v: v["controllers"].update(entryReplicas=0),
        "radixfleet:controllers.entryReplicas: 0: Input should be greater than or equal to 1",
    ),
    "reserved-pool-in-use": (
        lambda v: v.update(reservedPools=["ap-northeast-1/l40s-spot", "us-east-1/h100-spot"]),
        "radixfleet:reservedPools: us-east-1/h100-spot is not spare: llama-3-1-8b",
    ),
    "system-nodes-2**70": (
        lambda v: v["cluster"].setdefault("systemNodes", {}).update(maxNodes=2**70),
        f"radixfleet:cluster.systemNodes.maxNodes: {2**70}: Input should be less than or equal "
        "to 5000",
    ),
    "reserved-pool-unknown": (
        lambda v: v.update(reservedPools=["ap-northeast-1/l40s-spot", "us-east-1/a10g"]),
        "radixfleet:reservedPools[1]: no deployed GPU pool 'us-east-1/a10g'",
    ),
}


@pytest.mark.parametrize("case", list(STACK_CASES), ids=list(STACK_CASES))
def test_a_bad_stack_config_is_one_located_error(case: str) -> None:
    mutate, expected = STACK_CASES[case]
    raw = values()
    mutate(raw)
    found = problems(raw)
    assert any(expected in p for p in found), found
    assert all(p.startswith("Pulumi.test.yaml: ") for p in found)


def test_tenant_keys_set_for_every_served_tenant_parse() -> None:
    raw = values()
    _tenant_keys()(raw)
    keys = parse(raw).settings.tenant_keys
    assert keys is not None and sorted(keys) == list(SERVED)
    assert keys["search"]["api-key"].get_secret_value() == GOOD_KEY


@pytest.mark.parametrize(
    "value", ["hunter2", 123456789012345678901234567890123, GOOD_KEY + " x"],
    ids=["too-short", "a-number", "a-space"],
)  # fmt: skip
def test_a_bad_tenant_key_or_token_is_located_but_never_quoted(value: Any) -> None:
    raw = values()
    _tenant_keys(search={"api-key": value})(raw)
    raw["fleetToken"] = value
    found = problems(raw)
    assert any("tenantKeys.search.api-key" in p for p in found), found
    assert any("fleetToken" in p for p in found), found
    assert not any(str(value) in p for p in found), found


def _drop_h200(catalog: dict[str, Any]) -> None:
    catalog["regions"][0]["gpu_pools"] = catalog["regions"][0]["gpu_pools"][:2]


CATALOG_CASES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "duplicate-region": (
        lambda c: c["regions"].append(copy.deepcopy(c["regions"][1])),
        "regions[3].name: duplicate name 'eu-west-1'",
    ),
    "headroom-above-the-pool": (
        lambda c: c["regions"][1]["gpu_pools"][0].update(headroom_gpus=33),
        "regions[1].gpu_pools[0].headroom_gpus: 33 is more than the pool's 4 nodes of 8 GPUs hold",
    ),
    "max-below-min": (
        lambda c: c["regions"][1]["gpu_pools"][0].update(min_nodes=5, max_nodes=2),
        "regions[1].gpu_pools[0].min_nodes: 5 is above max_nodes 2",
    ),
    "unknown-instance-family": (
        lambda c: c["regions"][1]["gpu_pools"][0].update(instance_type="p9.48xlarge"),
        "regions[1].gpu_pools[0].instance_type: unknown GPU instance type 'p9.48xlarge'",
    ),
    "model-gpu-type-not-offered": (
        _drop_h200,
        "region 'us-east-1' has no GPU pool of type H200",
    ),
    "not-an-aws-region": (
        lambda c: c["regions"].append({**copy.deepcopy(c["regions"][1]), "name": "europe"}),
        "radixfleet:catalog: regions[3].name 'europe' is not an AWS region name",
    ),
}


@pytest.mark.parametrize("case", list(CATALOG_CASES), ids=list(CATALOG_CASES))
def test_a_bad_catalog_is_reported_through_the_stack(case: str, tmp_path: Path) -> None:
    change, expected = CATALOG_CASES[case]
    raw = values()
    raw.pop("regions")
    with_catalog(tmp_path, raw, change)
    found = problems(raw)
    assert any(expected in p for p in found), found


def test_every_problem_is_reported_at_once() -> None:
    raw = values()
    raw["charts"]["cert-manager"]["version"] = "latest"
    raw["knative"]["stableWindow"] = "forever"
    raw["dns"]["bogus"] = True
    assert len(problems(raw)) == 3


def test_durations() -> None:
    assert [duration_seconds(d) for d in ("6s", "5m", "1h")] == [6, 300, 3600]
    with pytest.raises(ValueError, match="not a duration"):
        duration_seconds("1d")


def test_a_bad_stack_stops_the_program_before_any_resource() -> None:
    config = example_config()
    config["radixfleet:cluster"] = {**config["radixfleet:cluster"], "kubernetesVersion": "latest"}
    mocks = RecordingMocks()
    with pytest.raises(pulumi.RunError, match=r"radixfleet:cluster\.kubernetesVersion") as caught:
        run_program(config, stack="broken", mocks=mocks)
    assert "the stack configuration has 1 problem:" in str(caught.value)
    assert mocks.resources == []


def test_a_one_region_private_stack_without_replication(tmp_path: Path) -> None:
    config = example_config()
    config["radixfleet:regions"] = ["eu-west-1"]
    config["radixfleet:reservedPools"] = []
    config["radixfleet:cluster"] = {**config["radixfleet:cluster"], "privateEndpoint": True}
    config["radixfleet:network"] = {
        "vpcCidrs": {"eu-west-1": "10.20.0.0/16"},
        "natGateways": "single",
    }
    config["radixfleet:modelStore"] = {"bucket": "radixfleet-models", "mode": "per-region"}
    config["radixfleet:dns"] = {**config["radixfleet:dns"], "weights": {}}
    config["radixfleet:dashboardsDir"] = str(tmp_path / "no-dashboards")
    stack = run_program(config, stack="private")
    types = [r.type for r in stack.resources]
    (cluster,) = [r for r in stack.resources if r.type == "aws:eks/cluster:Cluster"]
    assert cluster.inputs["vpcConfig"]["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in cluster.inputs["vpcConfig"]
    assert types.count("aws:ec2/natGateway:NatGateway") == 1
    assert "aws:s3/bucketReplicationConfig:BucketReplicationConfig" not in types
    config_maps = [r.inputs["metadata"]["name"] for r in stack.resources
                   if r.type == "kubernetes:core/v1:ConfigMap"]  # fmt: skip
    assert not [n for n in config_maps if n.startswith("radixfleet-dashboard")], config_maps
    assert "kubernetes:monitoring.coreos.com/v1:PrometheusRule" not in types
    weights = [
        r.inputs["weightedRoutingPolicies"][0]["weight"]
        for r in stack.resources
        if r.type == "aws:route53/record:Record" and r.inputs.get("setIdentifier")
    ]
    assert weights and set(weights) == {100}
