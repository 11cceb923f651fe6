"""The whole Pulumi program under mocks, for the example stack: the fleet's policies hold for
every resource it declares (clusters, node groups, security groups, buckets, Helm releases,
Route 53 records), and the node groups carry what the InferenceServices select.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from infra import manifests
from infra.components.aws.identity import ROLE_NAME_MAX, role_name_prefix
from infra.components.aws.nodes import EKS_TAINT_EFFECTS, Efa, gpu_nodes_args
from infra.settings import PINNED, REQUIRED_CHARTS, REQUIRED_EKS_ADDONS, Fleet
from infra.testing import Declared, RecordingMocks, example_config, radixfleet_values, run_program
from radixfleet import labels
from radixfleet.config import GpuPool, load_catalog
from radixfleet.config.catalog import KNOWN_RUNTIMES
from radixfleet.config.gpus import INSTANCE_TYPES
from radixfleet.config.serving import inference_services_of
from radixfleet.controllers.canary.spec import POLICY_ANNOTATION
from radixfleet.controllers.failover.spec import FailoverPolicySpec
from radixfleet.controllers.quota import admission
from radixfleet.kit.health import serve_readiness
from radixfleet.kit.leader import PeeringReadiness
from radixfleet.kit.operator import READINESS_PORT
from radixfleet.platform import ENTRY_LEDGER, ENTRY_URL, KNATIVE_FEATURES
from radixfleet.render import data_plane_guard
from radixfleet.render.inferenceservices import MODEL_READER, NODE_GROUP

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

REGIONS = ["us-east-1", "eu-west-1", "ap-northeast-1"]
NAMESPACES = ["team-search", "team-support", "team-research"]  # the example catalog's tenants


@pytest.fixture(scope="module")
def stack() -> RecordingMocks:
    return run_program(example_config())


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    from infra.program import INFRA_DIR
    from infra.settings import parse_fleet

    return parse_fleet(radixfleet_values(example_config()), source="example", base_dir=INFRA_DIR)


def of_type(stack: RecordingMocks, typ: str) -> list[Declared]:
    return [r for r in stack.resources if r.type == typ]


def in_region(resources: list[Declared], region: str) -> list[Declared]:
    return [r for r in resources if r.name.startswith(f"region-{region}-")]


def by_id(stack: RecordingMocks) -> dict[str, Declared]:
    return {r.id: r for r in stack.resources}


def test_one_cluster_per_region_with_pinned_version_and_encrypted_secrets(
    stack: RecordingMocks,
) -> None:
    clusters = of_type(stack, "aws:eks/cluster:Cluster")
    assert len(clusters) == len(REGIONS)
    for region in REGIONS:
        (cluster,) = in_region(clusters, region)
        assert cluster.inputs["name"] == f"radixfleet-example-{region}"
        assert cluster.inputs["version"] == "1.35"
        assert cluster.inputs["encryptionConfig"]["resources"] == ["secrets"]
        assert cluster.inputs["encryptionConfig"]["provider"]["keyArn"]
        assert cluster.inputs["accessConfig"]["authenticationMode"] == "API"
        vpc = cluster.inputs["vpcConfig"]
        assert vpc["endpointPrivateAccess"] is True
        assert "0.0.0.0/0" not in vpc.get("publicAccessCidrs", [])


def test_every_cluster_has_an_oidc_provider_and_the_pod_identity_agent(
    stack: RecordingMocks,
) -> None:
    for region in REGIONS:
        assert (
            len(
                in_region(
                    of_type(stack, "aws:iam/openIdConnectProvider:OpenIdConnectProvider"), region
                )
            )
            == 1
        )
        addons = {
            a.inputs["addonName"] for a in in_region(of_type(stack, "aws:eks/addon:Addon"), region)
        }
        assert addons == set(REQUIRED_EKS_ADDONS)


def test_every_clusters_cni_enforces_the_tenants_network_policies(stack: RecordingMocks) -> None:
    for region in REGIONS:
        (cni,) = [a for a in in_region(of_type(stack, "aws:eks/addon:Addon"), region)
                  if a.inputs["addonName"] == "vpc-cni"]  # fmt: skip
        # Without its network policy agent the VPC CNI ignores every NetworkPolicy
        assert json.loads(cni.inputs["configurationValues"])["enableNetworkPolicy"] == "true"


def test_vpcs_span_three_zones_with_private_node_subnets_nat_and_endpoints(
    stack: RecordingMocks,
) -> None:
    for region in REGIONS:
        subnets = in_region(of_type(stack, "aws:ec2/subnet:Subnet"), region)
        private = [s for s in subnets if "kubernetes.io/role/internal-elb" in s.inputs["tags"]]
        assert len({s.inputs["availabilityZone"] for s in private}) == 3
        assert all(not s.inputs.get("mapPublicIpOnLaunch") for s in subnets)
        assert len(in_region(of_type(stack, "aws:ec2/natGateway:NatGateway"), region)) == 3
        services = {
            e.inputs["serviceName"]
            for e in in_region(of_type(stack, "aws:ec2/vpcEndpoint:VpcEndpoint"), region)
        }
        assert services == {f"com.amazonaws.{region}.{s}" for s in ("s3", "ecr.api", "ecr.dkr")}
    node_groups = of_type(stack, "aws:eks/nodeGroup:NodeGroup")
    private_ids = {
        s.id
        for s in of_type(stack, "aws:ec2/subnet:Subnet")
        if "kubernetes.io/role/internal-elb" in s.inputs["tags"]
    }
    assert all(set(ng.inputs["subnetIds"]) <= private_ids for ng in node_groups)


def gpu_node_groups(stack: RecordingMocks, region: str) -> dict[str, Declared]:
    groups = in_region(of_type(stack, "aws:eks/nodeGroup:NodeGroup"), region)
    return {
        g.inputs["labels"][labels.GPU_POOL]: g
        for g in groups
        if labels.GPU_POOL in g.inputs["labels"]
    }


def test_one_gpu_node_group_per_catalog_pool_sized_and_priced_as_configured(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    for region in fleet.regions:
        groups = gpu_node_groups(stack, region.name)
        assert set(groups) == {p.name for p in region.gpu_pools}
        for pool in region.gpu_pools:
            group = groups[pool.name].inputs
            assert group["instanceTypes"] == [pool.instance_type]
            assert group["amiType"] == "AL2023_x86_64_NVIDIA"
            assert group["capacityType"] == ("SPOT" if pool.capacity == "spot" else "ON_DEMAND")
            scaling = group["scalingConfig"]
            assert (scaling["minSize"], scaling["maxSize"]) == (pool.min_nodes, pool.max_nodes)
            assert pool.min_nodes <= scaling["desiredSize"] <= pool.max_nodes


def expected_gpu_labels(pool: GpuPool) -> dict[str, str]:
    return {
        labels.GPU_TYPE: pool.gpu_type.lower(),
        labels.GPU_POOL: pool.name,
        labels.CAPACITY_TYPE: pool.capacity,
    }


def test_every_gpu_node_group_is_tainted_and_labeled(stack: RecordingMocks, fleet: Fleet) -> None:
    taint = {
        "key": labels.GPU_TAINT_KEY,
        "value": labels.GPU_TAINT_VALUE,
        "effect": EKS_TAINT_EFFECTS[labels.GPU_TAINT_EFFECT],
    }
    for region in fleet.regions:
        for pool in region.gpu_pools:
            group = gpu_node_groups(stack, region.name)[pool.name].inputs
            assert group["taints"] == [taint]
            assert expected_gpu_labels(pool).items() <= group["labels"].items()


class Refusing(RecordingMocks):
    """Mocks that fail one resource (the cloud refusing it, or an await that timed out);
    everything else is created as usual."""

    def __init__(self, typ: str, name: str, reason: str) -> None:
        super().__init__()
        self.refused, self.reason = (typ, name), reason

    def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
        if (args.typ, args.name) == self.refused:
            raise RuntimeError(f"{args.name}: {self.reason}")
        return super().new_resource(args)

    def missing(self, complete: RecordingMocks) -> set[tuple[str, str]]:
        """What a complete run declared that this one did not."""
        declared = {(r.type, r.name) for r in self.resources}
        return {(r.type, r.name) for r in complete.resources} - declared

    def run(self) -> None:
        """Run the example stack, which fails at the refused resource. The resources that
        waited for it hold the same error; their futures are dropped unread, which asyncio
        would log, once each, as the run's garbage is collected."""
        loop = asyncio.get_event_loop_policy().get_event_loop()
        previous = loop.get_exception_handler()
        loop.set_exception_handler(self._quiet)
        try:
            with pytest.raises(RuntimeError, match=self.reason):
                run_program(example_config(), mocks=self)
            gc.collect()
        finally:
            loop.set_exception_handler(previous)

    def _quiet(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if self.reason not in str(context.get("exception")):
            loop.default_exception_handler(context)


@pytest.mark.parametrize("pool", ["h200-ondemand", "h100-spot"])
def test_a_gpu_pool_that_cannot_launch_leaves_the_rest_of_its_region_standing(
    stack: RecordingMocks, pool: str
) -> None:
    """Only the refused pool is missing: its region keeps its add-ons, operator, entry and
    models (which wait, pending, for nodes the autoscaler can add later)."""
    refused = ("aws:eks/nodeGroup:NodeGroup", f"region-us-east-1-{pool}")
    failing = Refusing(*refused, "InsufficientInstanceCapacity")
    failing.run()
    assert failing.missing(stack) == {refused}


def schedulable(isvc: dict[str, Any], group: dict[str, Any]) -> bool:
    """Would the predictor's pods land on this node group: selector, tolerations, GPU count."""
    predictor = isvc["spec"]["predictor"]
    selects = predictor["nodeSelector"].items() <= group["labels"].items()
    tolerated = all(
        any(
            t["key"] == taint["key"]
            and t.get("value") == taint["value"]
            and EKS_TAINT_EFFECTS[t["effect"]] == taint["effect"]
            for t in predictor["tolerations"]
        )
        for taint in group["taints"]
    )
    gpus = int(predictor["model"]["resources"]["requests"][labels.GPU_RESOURCE])
    fits = INSTANCE_TYPES[group["instanceTypes"][0]].gpus >= gpus
    return selects and tolerated and fits


def test_every_inference_service_has_a_node_group_it_schedules_on(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    isvcs = of_type(stack, "kubernetes:serving.kserve.io/v1beta1:InferenceService")
    assert isvcs
    for region in fleet.regions:
        groups = [g.inputs for g in gpu_node_groups(stack, region.name).values()]
        for isvc in in_region(isvcs, region.name):
            assert any(schedulable(isvc.inputs, g) for g in groups), isvc.name


def test_each_region_runs_the_runtimes_and_the_inference_services_of_its_models(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    isvcs = of_type(stack, "kubernetes:serving.kserve.io/v1beta1:InferenceService")
    runtimes = of_type(stack, "kubernetes:serving.kserve.io/v1alpha1:ClusterServingRuntime")
    for region in fleet.regions:
        served = {i.inputs["metadata"]["name"] for i in in_region(isvcs, region.name)}
        assert served == {isvc.name for m in fleet.catalog.models if region.name in m.regions
                          for isvc in inference_services_of(m)}  # fmt: skip
        assert len(in_region(runtimes, region.name)) == len(KNOWN_RUNTIMES)
    for runtime in runtimes:
        spec = runtime.inputs["spec"]
        workers = spec.get("workerSpec", {}).get("containers", [])
        for container in [*spec["containers"], *workers]:
            # SGLang's image by the digest of the stack config, on a read-only root
            assert container["image"] == fleet.settings.runtime.reference
            assert "@sha256:" in container["image"]
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
        for isvc in in_region(isvcs, region.name):
            uri = isvc.inputs["spec"]["predictor"]["model"].get("storageUri", "")
            assert not uri.startswith("s3://radixfleet-models/")
            if uri.startswith("s3://"):
                assert uri.startswith(f"s3://radixfleet-models-{region.name}/")


def test_gpu_headroom_is_held_by_placeholders_every_workload_preempts(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    classes = of_type(stack, "kubernetes:scheduling.k8s.io/v1:PriorityClass")
    deployments = of_type(stack, "kubernetes:apps/v1:Deployment")
    pause = fleet.settings.pause
    assert pause is not None
    for region in fleet.regions:
        if not any(p.headroom_gpus for p in region.gpu_pools):
            assert in_region(classes, region.name) == [], region.name
            continue
        (held,) = in_region(classes, region.name)
        # Below every workload (default 0), above the cluster autoscaler's expendable cutoff.
        assert -10 <= held.inputs["value"] < 0
        assert held.inputs["preemptionPolicy"] == "Never"
        assert held.inputs["globalDefault"] is False
        for pool in region.gpu_pools:
            placeholders = [
                d for d in in_region(deployments, region.name)
                if d.inputs["metadata"]["name"] == f"gpu-headroom-{pool.name}"
            ]  # fmt: skip
            if not pool.headroom_gpus:
                assert placeholders == []
                continue
            (deployment,) = placeholders
            spec = deployment.inputs["spec"]
            assert spec["replicas"] == pool.headroom_gpus
            pod = spec["template"]["spec"]
            assert pod["priorityClassName"] == held.inputs["metadata"]["name"]
            assert pod["nodeSelector"] == {labels.GPU_POOL: pool.name}
            assert {t["key"] for t in pod["tolerations"]} == {labels.GPU_TAINT_KEY}
            assert pod["automountServiceAccountToken"] is False
            (container,) = pod["containers"]
            assert container["image"] == pause.reference and "@sha256:" in container["image"]
            assert container["resources"]["limits"][labels.GPU_RESOURCE] == 1
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert pod["securityContext"]["runAsNonRoot"] is True


def test_gpu_nodes_cache_the_weights_of_their_models_where_the_catalog_says(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    """us-east-1's H100 pools cache (the example catalog): KServe's local model charts at
    KServe's own version, the agent on those nodes only, a cache per storage URI its H100
    InferenceServices read (from the region's bucket), downloaded by a role that reads those
    weights only; no other region caches anything."""
    releases = of_type(stack, "kubernetes:helm.sh/v3:Release")
    caches = of_type(stack, "kubernetes:serving.kserve.io/v1alpha1:LocalModelCache")
    groups = of_type(stack, "kubernetes:serving.kserve.io/v1alpha1:LocalModelNodeGroup")
    isvcs = of_type(stack, "kubernetes:serving.kserve.io/v1beta1:InferenceService")
    for region in ("eu-west-1", "ap-northeast-1"):
        assert in_region(caches, region) == in_region(groups, region) == []
        (kserve,) = [
            r for r in in_region(releases, region) if r.inputs["name"] == "kserve-resources"
        ]
        assert "localmodel" not in kserve.inputs["values"]["kserve"]
    east = {r.inputs["name"]: r for r in in_region(releases, "us-east-1")}
    assert east["kserve-resources"].inputs["values"]["kserve"]["localmodel"]["enabled"] is True
    for chart in ("kserve-localmodel-crd", "kserve-localmodel-resources"):
        assert east[chart].inputs["chart"].endswith(f"/{chart}")
        assert east[chart].inputs["version"] == east["kserve-resources"].inputs["version"]
    agent = east["kserve-localmodel-resources"].inputs["values"]["kserve"]["localmodelnode"]
    assert agent["controller"]["nodeSelector"] == {"kserve/localmodel": "worker"}
    cached_pools = {
        p.name for p in fleet.catalog.region("us-east-1").gpu_pools if p.model_cache_gib
    }
    node_groups = of_type(stack, "aws:eks/nodeGroup:NodeGroup")
    for group in node_groups:
        caching = group.inputs["labels"].get("kserve/localmodel") == "worker"
        assert caching == (group.name.startswith("region-us-east-1-") and any(
            group.name.startswith(f"region-us-east-1-{p}") for p in cached_pools))  # fmt: skip
    (h100,) = in_region(groups, "us-east-1")
    assert h100.inputs["metadata"]["name"] == "h100-nodes"
    keepers = [d for d in of_type(stack, "kubernetes:apps/v1:DaemonSet")
               if d.inputs["metadata"]["name"] == "model-cache-folder"]  # fmt: skip
    (keeper,) = keepers
    assert in_region(keepers, "us-east-1") == [keeper]
    # Beside KServe's node agent: radixfleet's namespace refuses a host folder and root.
    assert keeper.inputs["metadata"]["namespace"] == "kserve"
    pod = keeper.inputs["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kserve/localmodel": "worker"}
    assert pod["initContainers"][0]["image"] == fleet.settings.controllers.reference
    served = {i.inputs["spec"]["predictor"]["model"].get("storageUri")
              for i in in_region(isvcs, "us-east-1")
              if i.inputs["metadata"]["annotations"].get(NODE_GROUP) == "h100-nodes"}  # fmt: skip
    uris = {c.inputs["spec"]["sourceModelUri"] for c in in_region(caches, "us-east-1")}
    assert uris == served and len(uris) == 2  # the 8B and the 70B
    (downloads,) = [p for p in of_type(stack, "aws:iam/rolePolicy:RolePolicy")
                    if p.name.startswith("region-us-east-1-model-cache")]  # fmt: skip
    statements = json.loads(downloads.inputs["policy"])["Statement"]
    (objects,) = [s["Resource"] for s in statements if "s3:GetObject" in s["Action"]]
    assert set(objects) == {f"arn:aws:mock:::model-store-us-east-1/{u.split('/', 3)[3]}/*"
                            for u in uris}  # fmt: skip
    associations = of_type(stack, "aws:eks/podIdentityAssociation:PodIdentityAssociation")
    (jobs,) = [a for a in associations if "model-cache" in a.name]
    assert (jobs.inputs["namespace"], jobs.inputs["serviceAccount"]) == (
        "kserve-localmodel-jobs", "default")  # fmt: skip


def test_imdsv2_and_encrypted_volumes_on_every_node(stack: RecordingMocks) -> None:
    templates = {t.id: t for t in of_type(stack, "aws:ec2/launchTemplate:LaunchTemplate")}
    assert not of_type(stack, "aws:ec2/instance:Instance")
    for template in templates.values():
        metadata = template.inputs["metadataOptions"]
        assert metadata["httpTokens"] == "required"
        assert metadata["httpPutResponseHopLimit"] == 1
        for device in template.inputs["blockDeviceMappings"]:
            assert device["ebs"]["encrypted"] == "true"
    for group in of_type(stack, "aws:eks/nodeGroup:NodeGroup"):
        assert group.inputs["launchTemplate"]["id"] in templates


def test_gpu_root_volumes_are_sized_for_model_weights(stack: RecordingMocks, fleet: Fleet) -> None:
    templates = {t.id: t for t in of_type(stack, "aws:ec2/launchTemplate:LaunchTemplate")}
    for region in fleet.regions:
        for pool in region.gpu_pools:
            group = gpu_node_groups(stack, region.name)[pool.name]
            template = templates[group.inputs["launchTemplate"]["id"]]
            (device,) = template.inputs["blockDeviceMappings"]
            assert device["ebs"]["volumeSize"] == pool.root_volume_gib


def test_pools_of_multinode_models_get_efa_on_every_card_in_one_cluster_placement_group(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    """TP16 over two p5 nodes all-reduces across them every step: EFA on all 32 cards, the
    pool's nodes in one placement group of strategy `cluster` (so in one zone), and a security
    group that lets them reach each other on every protocol (EFA's SRD is not TCP)."""
    templates = {t.id: t for t in of_type(stack, "aws:ec2/launchTemplate:LaunchTemplate")}
    placement = {g.name: g for g in of_type(stack, "aws:ec2/placementGroup:PlacementGroup")}
    self_open = {r.inputs["securityGroupId"] for r in of_type(
        stack, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
        if r.inputs.get("referencedSecurityGroupId") == r.inputs["securityGroupId"]
        and r.inputs["ipProtocol"] == "-1"}  # fmt: skip
    with_efa = set()
    for region in fleet.regions:
        for pool in region.gpu_pools:
            group = gpu_node_groups(stack, region.name)[pool.name]
            template = templates[group.inputs["launchTemplate"]["id"]].inputs
            cards = template.get("networkInterfaces") or []
            if not cards:
                assert "placement" not in template and len(group.inputs["subnetIds"]) > 1
                continue
            with_efa.add((region.name, pool.name))
            assert [c["networkCardIndex"] for c in cards] == list(range(32))
            assert [c["deviceIndex"] for c in cards] == [0] + [1] * 31
            assert {c["interfaceType"] for c in cards} == {"efa"}
            efa_group, cluster_group = cards[0]["securityGroups"]
            assert efa_group in self_open and cluster_group.startswith("sg-")
            assert placement[template["placement"]["groupName"]].inputs["strategy"] == "cluster"
            assert len(group.inputs["subnetIds"]) == 1, "a cluster placement group is in one zone"
    # The catalog's 405B runs on H100 in us-east-1 only; no other pool pays for EFA.
    assert with_efa == {("us-east-1", "h100-ondemand"), ("us-east-1", "h100-spot")}


def test_a_multinode_pool_of_an_instance_type_without_efa_is_refused_by_name() -> None:
    pool = GpuPool(name="l40s", instance_type="g6e.12xlarge", gpu_type="L40S", gpus_per_node=4,
                   min_nodes=0, max_nodes=2)  # fmt: skip
    efa = Efa(vpc_id="vpc-1", cluster_security_group_id="sg-1")
    with pytest.raises(ValueError, match=r"multi-node GPU pool needs EFA: g6e\.12xlarge has none"):
        gpu_nodes_args(pool, cluster_name="c", node_role_arn="r", subnet_ids=["s"],
                       ami_type="AL2023_x86_64_NVIDIA", node_labels={}, efa=efa)  # fmt: skip


def world_open_rules(stack: RecordingMocks) -> Iterator[Declared]:
    for rule in of_type(stack, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"):
        if rule.inputs.get("cidrIpv4") == "0.0.0.0/0" or rule.inputs.get("cidrIpv6") == "::/0":
            yield rule


def test_no_security_group_is_open_to_the_world_except_443_on_load_balancers(
    stack: RecordingMocks,
) -> None:
    ids = by_id(stack)
    open_rules = list(world_open_rules(stack))
    assert len(open_rules) == len(REGIONS)
    for rule in open_rules:
        assert (rule.inputs["fromPort"], rule.inputs["toPort"]) == (443, 443)
        group = ids[rule.inputs["securityGroupId"]]
        assert group.inputs["tags"]["radixfleet.io/role"] == "load-balancer"
    for group in of_type(stack, "aws:ec2/securityGroup:SecurityGroup"):
        assert not group.inputs.get("ingress"), "rules live in separate resources"
    assert not of_type(stack, "aws:ec2/securityGroupRule:SecurityGroupRule")


def test_no_public_bucket(stack: RecordingMocks) -> None:
    buckets = of_type(stack, "aws:s3/bucket:Bucket")
    assert {b.inputs["bucket"] for b in buckets} == {f"radixfleet-models-{r}" for r in REGIONS}
    for bucket in buckets:
        attached = [r for r in stack.resources if r.inputs.get("bucket") == bucket.id]
        kinds = {r.type.split(":")[-1]: r.inputs for r in attached}
        block = kinds["BucketPublicAccessBlock"]
        assert all(
            block[k] is True
            for k in (
                "blockPublicAcls",
                "blockPublicPolicy",
                "ignorePublicAcls",
                "restrictPublicBuckets",
            )
        )
        assert kinds["BucketVersioning"]["versioningConfiguration"]["status"] == "Enabled"
        (rule,) = kinds["BucketServerSideEncryptionConfiguration"]["rules"]
        assert rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
        policy = json.loads(kinds["BucketPolicy"]["policy"])
        assert [s["Effect"] for s in policy["Statement"]] == ["Deny"]
        assert policy["Statement"][0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        assert "acl" not in bucket.inputs


def test_the_primary_bucket_replicates_to_every_other_region(stack: RecordingMocks) -> None:
    (replication,) = of_type(stack, "aws:s3/bucketReplicationConfig:BucketReplicationConfig")
    assert replication.inputs["bucket"] == "model-store-us-east-1-id"
    targets = {r["destination"]["bucket"] for r in replication.inputs["rules"]}
    assert targets == {f"arn:aws:mock:::model-store-{r}" for r in REGIONS[1:]}


def test_serving_pods_read_models_through_pod_identity_without_keys(stack: RecordingMocks) -> None:
    associations = of_type(stack, "aws:eks/podIdentityAssociation:PodIdentityAssociation")
    for region in REGIONS:
        readers = [a for a in in_region(associations, region) if "model-reader" in a.name]
        isvcs = in_region(
            of_type(stack, "kubernetes:serving.kserve.io/v1beta1:InferenceService"), region
        )
        assert {a.inputs["namespace"] for a in readers} == {
            i.inputs["metadata"]["namespace"] for i in isvcs
        }
        assert {a.inputs["serviceAccount"] for a in readers} == {MODEL_READER}
        for isvc in isvcs:
            assert isvc.inputs["spec"]["predictor"]["serviceAccountName"] == MODEL_READER
    assert not of_type(stack, "aws:iam/accessKey:AccessKey")
    assert not of_type(stack, "aws:iam/policy:Policy"), "no policy reads the whole model store"


def test_each_tenants_pods_read_only_that_tenants_models(stack: RecordingMocks) -> None:
    """One role per tenant namespace, reading the store's prefixes of that tenant's models and
    nothing else: another tenant's weights and adapters are out of reach."""
    policies = [
        p for p in of_type(stack, "aws:iam/rolePolicy:RolePolicy") if "model-reader" in p.name
    ]
    isvcs = of_type(stack, "kubernetes:serving.kserve.io/v1beta1:InferenceService")
    assert policies
    for policy in policies:
        namespace = next(ns for ns in NAMESPACES if policy.name.endswith(f"-{ns}-policy"))
        statements = json.loads(policy.inputs["policy"])["Statement"]
        actions = {a for s in statements for a in s["Action"]}
        assert actions == {"s3:ListBucket", "s3:GetObject", "s3:GetObjectVersion", "kms:Decrypt"}
        (objects,) = [s["Resource"] for s in statements if "s3:GetObject" in s["Action"]]
        region = next(r for r in REGIONS if f"-{r}-" in policy.name)
        mine = [
            i for i in in_region(isvcs, region) if i.inputs["metadata"]["namespace"] == namespace
        ]
        uris = {u for i in mine for u in _uris(i.inputs["spec"])}
        wanted = {f"arn:aws:mock:::model-store-{region}/{u.split('/', 3)[3]}/*" for u in uris}
        assert set(objects) == wanted, policy.name
        assert all(o.endswith("/*") and o.count("/") >= 2 for o in objects), "never the bucket"


def test_every_tenant_namespace_refuses_ingress_but_from_the_platform(
    stack: RecordingMocks,
) -> None:
    policies = of_type(stack, "kubernetes:networking.k8s.io/v1:NetworkPolicy")
    isvcs = of_type(stack, "kubernetes:serving.kserve.io/v1beta1:InferenceService")
    for region in REGIONS:
        served = {i.inputs["metadata"]["namespace"] for i in in_region(isvcs, region)}
        mine = in_region(policies, region)
        deny_all = {"podSelector": {}, "policyTypes": ["Ingress"]}
        denied = {p.inputs["metadata"]["namespace"] for p in mine if p.inputs["spec"] == deny_all}
        # Every tenant namespace, and radixfleet's own (its entry is the one way in).
        assert served and denied == {*served, manifests.CONTROLLERS_NAMESPACE}, region


def test_every_region_installs_the_data_plane_guard_and_the_quotas_gpu_budget_policy(
    stack: RecordingMocks,
) -> None:
    """The policies that keep the data plane's key and labels on its own pods, as
    `inferenceservices/data-plane-guard.yaml` has them, and the quota's GPU budgets, as
    `deploy/operator/` has them: bound, in every region."""
    objects = [*data_plane_guard.manifests(), *admission.manifests()]
    wanted = {(o["kind"], o["metadata"]["name"]): o["spec"] for o in objects}
    for region in REGIONS:
        declared = {
            (kind, r.inputs["metadata"]["name"]): r.inputs["spec"]
            for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
            for r in in_region(of_type(stack, f"kubernetes:admissionregistration.k8s.io/v1:{kind}"),
                               region)
        }  # fmt: skip
        assert declared == wanted, region


def test_radixfleets_namespace_is_restricted_and_closed_as_deploy_has_it(
    stack: RecordingMocks,
) -> None:
    """In every region: Pod Security `restricted` enforced, and the same NetworkPolicies as
    deploy/operator/ and deploy/entry/ (only clients to the entry's port, only Prometheus to
    the metrics ports)."""
    namespace = manifests.platform_namespace()["metadata"]
    wanted = {p["metadata"]["name"]: p["spec"] for p in manifests.platform_network_policies()}
    assert set(wanted) == {"radixfleet-deny-ingress", "radixfleet-operator", "radixfleet-entry"}
    for region in REGIONS:
        (declared,) = [n for n in in_region(of_type(stack, "kubernetes:core/v1:Namespace"), region)
                       if n.inputs["metadata"]["name"] == namespace["name"]]  # fmt: skip
        assert declared.inputs["metadata"]["labels"] == namespace["labels"]
        assert namespace["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        policies = {
            p.inputs["metadata"]["name"]: p.inputs["spec"]
            for p in in_region(of_type(stack, "kubernetes:networking.k8s.io/v1:NetworkPolicy"),
                               region)
            if p.inputs["metadata"]["namespace"] == namespace["name"]
        }  # fmt: skip
        assert policies == wanted, region


def test_every_tenant_is_awaited_until_the_quota_has_counted_it(stack: RecordingMocks) -> None:
    """`pulumi up` creates a tenant's models only after its Tenant, and counts a Tenant created
    only once the quota controller has written its status: before that the GPU-budget policy
    refuses the models, and pulumi-kubernetes does not retry a refusal."""
    tenants = of_type(stack, "kubernetes:radixfleet.io/v1alpha1:Tenant")
    assert tenants
    for tenant in tenants:
        annotations = tenant.inputs["metadata"].get("annotations", {})
        assert annotations.get("pulumi.com/waitFor") == "jsonpath={.status.observedGeneration}"


# Pulumi's mark on a secret value, as the mocks record it.
SECRET_SIGNATURE = "4dabf18193072939515e22adb298388d"


def _key_secrets(stack: RecordingMocks) -> dict[str, dict[str, Any]]:
    """The tenants' key Secrets by resource name: region-<region>-workloads-secret-..."""
    return {r.name: r.inputs for r in of_type(stack, "kubernetes:core/v1:Secret")
            if r.inputs["metadata"]["name"].endswith("-api-keys")}  # fmt: skip


def test_each_tenants_keys_are_one_set_of_secret_values_in_every_region_it_serves_in(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The stack's `tenantKeys` is the keys' one source: each region where a tenant has a model
    gets the tenant's Secret with the same values, marked secret, under the names its Tenant
    lists; a region where it has none gets no Secret."""
    keys = {
        "search": {"api-key": "s" * 64, "2027-01": "t" * 64},
        "support": {"api-key": "u" * 64},
        "research": {"api-key": "v" * 64},
    }
    catalog = yaml.safe_load(fleet.path(fleet.settings.catalog).read_text())
    catalog["tenants"][0]["api_keys"] = [{"name": "api-key"}, {"name": "2027-01"}]
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(catalog))
    stack = run_program({**example_config(), "radixfleet:catalog": str(tmp_path / "catalog.yaml"),
                         "radixfleet:tenantKeys": keys})  # fmt: skip
    found = _key_secrets(stack)
    for tenant, values in keys.items():
        served = {r for m in fleet.catalog.models if tenant in m.tenants for r in m.regions}
        mine = {n: v for n, v in found.items() if v["metadata"]["name"] == f"{tenant}-api-keys"}
        regions = sorted(n.split("-workloads-")[0].removeprefix("region-") for n in mine)
        assert regions == sorted(served & set(REGIONS)), (tenant, sorted(mine))
        for inputs in mine.values():
            assert inputs["metadata"]["namespace"] == f"team-{tenant}"
            assert inputs["stringData"]["value"] == values
            assert SECRET_SIGNATURE in inputs["stringData"], "the values are not marked secret"
    tenants = of_type(stack, "kubernetes:radixfleet.io/v1alpha1:Tenant")
    search = next(t for t in tenants if t.inputs["metadata"]["name"] == "search")
    assert [k["key"] for k in search.inputs["spec"]["apiKeys"]] == ["api-key", "2027-01"]


def test_every_regions_provider_updates_secrets_in_place(stack: RecordingMocks) -> None:
    """A rotation changes a key Secret's data; replaced (the provider's default), a Secret with
    a fixed name is deleted before it is created again, and the tenant's keys are gone for a
    moment in the middle of every `up` (tests/cluster/test_pulumi.py rotates on a cluster)."""
    providers = of_type(stack, "pulumi:providers:kubernetes")
    assert len(providers) == len(REGIONS), [p.name for p in providers]
    assert all(p.inputs.get("enableSecretMutable") in {True, "true"} for p in providers), [
        p.inputs for p in providers
    ]


def test_without_tenant_keys_the_team_fills_the_secrets(stack: RecordingMocks) -> None:
    assert _key_secrets(stack) == {}


def _uris(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if value.startswith("s3://") else []
    if isinstance(value, dict):
        return [u for v in value.values() for u in _uris(v)]
    if isinstance(value, list):
        return [u for v in value for u in _uris(v)]
    return []


def test_versions_are_pinned(stack: RecordingMocks) -> None:
    for release in of_type(stack, "kubernetes:helm.sh/v3:Release"):
        assert PINNED.match(release.inputs["version"]), release.name
    for addon in of_type(stack, "aws:eks/addon:Addon"):
        assert PINNED.match(addon.inputs["addonVersion"]), addon.name
    for serving in of_type(stack, "kubernetes:operator.knative.dev/v1beta1:KnativeServing"):
        assert PINNED.match(serving.inputs["spec"]["version"])
    for deployment in of_type(stack, "kubernetes:apps/v1:Deployment"):
        for container in deployment.inputs["spec"]["template"]["spec"]["containers"]:
            image, _, tag = container["image"].partition("@")[0].rpartition(":")
            assert image and PINNED.match(tag)


def test_helm_releases_for_every_add_on_in_every_region(stack: RecordingMocks) -> None:
    releases = of_type(stack, "kubernetes:helm.sh/v3:Release")
    for region in REGIONS:
        # KServe's local model charts where the GPU nodes cache weights (the next test).
        cache = {"kserve-localmodel-crd", "kserve-localmodel-resources"}
        wanted = set(REQUIRED_CHARTS) | (cache if region == "us-east-1" else set())
        assert {r.inputs["name"] for r in in_region(releases, region)} == wanted
    kserve = next(r for r in releases if r.inputs["name"] == "kserve-resources")
    assert kserve.inputs["chart"] == "oci://ghcr.io/kserve/charts/kserve-resources"
    assert kserve.inputs["values"]["kserve"]["controller"]["deploymentMode"] == "Knative"


def test_kserve_is_installed_only_once_knative_serving_is_ready(stack: RecordingMocks) -> None:
    """KServe's controller looks for Knative's CRDs as it starts: the Knative operator must
    have installed Serving (the KnativeServing Ready, which pulumi-kubernetes awaits) first."""
    servings = of_type(stack, "kubernetes:operator.knative.dev/v1beta1:KnativeServing")
    for serving in servings:
        assert serving.inputs["metadata"]["annotations"]["pulumi.com/waitFor"] == "condition=Ready"
    (east,) = in_region(servings, "us-east-1")
    failing = Refusing(east.type, east.name, "timed out waiting for condition=Ready")
    failing.run()
    missing = {name for typ, name in failing.missing(stack) if typ.endswith(":Release")}
    assert "region-us-east-1-addons-kserve-resources" in missing


def test_knative_switches_on_exactly_the_features_validate_assumes(stack: RecordingMocks) -> None:
    servings = of_type(stack, "kubernetes:operator.knative.dev/v1beta1:KnativeServing")
    assert servings
    for serving in servings:
        assert serving.inputs["spec"]["config"]["features"] == dict(KNATIVE_FEATURES)


def test_knative_autoscaler_settings_come_from_the_stack(stack: RecordingMocks) -> None:
    for serving in of_type(stack, "kubernetes:operator.knative.dev/v1beta1:KnativeServing"):
        autoscaler = serving.inputs["spec"]["config"]["autoscaler"]
        assert autoscaler == {
            "enable-scale-to-zero": "true",
            "stable-window": "60s",
            "scale-to-zero-grace-period": "30s",
        }


def test_controllers_are_least_privilege_and_unprivileged(stack: RecordingMocks) -> None:
    roles = [
        *of_type(stack, "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"),
        *of_type(stack, "kubernetes:rbac.authorization.k8s.io/v1:Role"),
    ]
    secret_roles = 0
    for role in roles:
        for rule in role.inputs["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["apiGroups"]
            assert "*" not in rule["resources"]
            assert not {"delete", "deletecollection", "escalate", "bind"} & set(rule["verbs"])
            if "secrets" not in rule["resources"]:
                continue
            # Secrets: in a tenant namespace only (a Role), read by name, the data plane's key
            # created; never listed, watched or changed.
            assert "namespace" in role.inputs["metadata"], "a ClusterRole holds a Secret"
            assert set(rule["verbs"]) in ({"get"}, {"create"})
            assert rule["verbs"] == ["create"] or rule["resourceNames"]
            secret_roles += 1
    assert secret_roles, "no account may read the tenants' keys"
    for deployment in of_type(stack, "kubernetes:apps/v1:Deployment"):
        pod = deployment.inputs["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert not any("AWS_ACCESS_KEY" in e["name"] for e in container.get("env", []))
        # Pulled by the digest of the stack config, never by a tag that can move.
        assert re.fullmatch(r"[^@]+:[^@]+@sha256:[0-9a-f]{64}", container["image"])


def test_dashboards_rules_and_pod_monitors_are_provisioned_in_every_region(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    directory = fleet.path(fleet.settings.dashboards_dir)
    dashboards = [
        c
        for c in of_type(stack, "kubernetes:core/v1:ConfigMap")
        if "grafana_dashboard" in c.inputs["metadata"]["labels"]
    ]
    rules = of_type(stack, "kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    monitors = of_type(stack, "kubernetes:monitoring.coreos.com/v1:PodMonitor")
    for region in REGIONS:
        assert len(in_region(dashboards, region)) == len(manifests.dashboard_files(directory))
        assert len(in_region(rules, region)) == len(manifests.prometheus_rules(directory))
        names = {m.inputs["metadata"]["name"] for m in in_region(monitors, region)}
        assert names == {m["metadata"]["name"] for m in manifests.pod_monitors()}


def test_health_checked_records_for_every_model_in_every_region_it_runs_in(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    checks = {c.id: c for c in of_type(stack, "aws:route53/healthCheck:HealthCheck")}
    weighted = [
        r for r in of_type(stack, "aws:route53/record:Record") if r.inputs.get("setIdentifier")
    ]
    seen = set()
    for record in weighted:
        check = checks[record.inputs["healthCheckId"]]
        assert check.inputs["type"] == "HTTPS" and check.inputs["port"] == 443
        assert record.inputs["records"] == [check.inputs["fqdn"]]
        assert record.inputs["zoneId"] == "Z0123456789EXAMPLE"
        seen.add((record.inputs["name"], record.inputs["setIdentifier"]))
    expected = {
        (f"{m.name}.models.example.com", r.name)
        for m in fleet.catalog.models
        for r in fleet.regions
        if r.name in m.regions
    }
    assert seen == expected


def test_the_example_catalog_is_the_repository_catalog(fleet: Fleet) -> None:
    # One source of truth: the stack deploys the catalog `radixfleet render` renders.
    assert fleet.catalog == load_catalog(fleet.path("../inferenceservices/catalog.yaml"))


def _deployments(stack: RecordingMocks, name: str) -> list[Declared]:
    found = of_type(stack, "kubernetes:apps/v1:Deployment")
    return [d for d in found if d.inputs["metadata"]["name"] == name]


def test_each_region_serves_through_an_ha_entry_behind_its_load_balancer(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    regions = fleet.regions
    entries = _deployments(stack, manifests.ENTRY)
    assert len(entries) == len(regions)
    replicas = fleet.settings.controllers.entry_replicas
    for deployment in entries:
        assert deployment.inputs["spec"]["replicas"] == replicas
        (container,) = deployment.inputs["spec"]["template"]["spec"]["containers"]
        assert container["image"] == fleet.settings.controllers.reference
        assert container["args"][:2] == ["--replicas", str(replicas)]  # its share of budgets
    budgets = of_type(stack, "kubernetes:policy/v1:PodDisruptionBudget")
    assert len([b for b in budgets if b.inputs["spec"]["minAvailable"] == 1]) == len(regions)
    balancers = [s for s in of_type(stack, "kubernetes:core/v1:Service")
                 if s.inputs.get("spec", {}).get("type") == "LoadBalancer"]  # fmt: skip
    assert len(balancers) == len(regions)
    for service in balancers:
        assert service.inputs["metadata"]["namespace"] == manifests.CONTROLLERS_NAMESPACE
        assert service.inputs["spec"]["selector"] == {"app.kubernetes.io/name": manifests.ENTRY}
        annotations = service.inputs["metadata"]["annotations"]
        assert "service.beta.kubernetes.io/aws-load-balancer-ssl-cert" in annotations
    # The in-cluster name the operator's pre-warmer calls (ENTRY_URL), in every region
    inside = [s for s in of_type(stack, "kubernetes:core/v1:Service")
              if s.inputs["metadata"]["name"] == manifests.ENTRY]  # fmt: skip
    assert len(inside) == len(regions)
    host = urllib.parse.urlsplit(ENTRY_URL).hostname
    for service in inside:
        meta, spec = service.inputs["metadata"], service.inputs["spec"]
        assert host == f"{meta['name']}.{meta['namespace']}.svc"
        assert spec["selector"] == {"app.kubernetes.io/name": manifests.ENTRY}
        assert spec.get("type", "ClusterIP") == "ClusterIP"


def test_each_regions_entry_keeps_its_debts_in_its_ledger_and_may_touch_no_other_configmap(
    stack: RecordingMocks,
) -> None:
    """As deploy/entry/ has them: the ledger ConfigMap, rendered without data, and the entry's
    Role in radixfleet's namespace, which gets and patches that one ConfigMap by name."""
    wanted = {obj["kind"]: obj for obj in manifests.entry_ledger()}
    for region in REGIONS:
        for kind in ("ConfigMap", "Role", "RoleBinding"):
            group = "rbac.authorization.k8s.io/v1" if kind != "ConfigMap" else "core/v1"
            declared = [
                r.inputs
                for r in in_region(of_type(stack, f"kubernetes:{group}:{kind}"), region)
                if r.inputs["metadata"]["namespace"] == manifests.CONTROLLERS_NAMESPACE
                and r.inputs["metadata"]["name"] == wanted[kind]["metadata"]["name"]
            ]
            assert len(declared) == 1, (region, kind)
            for field in ("rules", "roleRef", "subjects"):
                assert declared[0].get(field) == wanted[kind].get(field), (region, kind, field)
    (role,) = [o for o in manifests.entry_ledger() if o["kind"] == "Role"]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get", "patch"],
            "resourceNames": [ENTRY_LEDGER],
        }
    ]


def test_the_operator_runs_the_routers_on_the_configured_gateway_image(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    for deployment in _deployments(stack, manifests.CONTROLLERS):
        (container,) = deployment.inputs["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["RADIXFLEET_ROUTER_IMAGE"] == fleet.settings.controllers.router.reference
        assert "@sha256:" in env["RADIXFLEET_ROUTER_IMAGE"]


def test_one_region_runs_the_failover_on_each_regions_signals(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    home = fleet.failover_region
    for deployment in _deployments(stack, manifests.CONTROLLERS):
        (container,) = deployment.inputs["spec"]["template"]["spec"]["containers"]
        region = container["args"][container["args"].index("--region") + 1]
        assert ("--with-failover" in container["args"]) == (region == home)
    policies = of_type(stack, "kubernetes:radixfleet.io/v1alpha1:FailoverPolicy")
    assert policies and in_region(policies, home) == policies
    deployed = [r.name for r in fleet.regions]
    expected = {m.name: [r for r in deployed if r in m.regions] for m in fleet.catalog.models}
    assert {p.inputs["metadata"]["name"] for p in policies} == {
        name for name, regions in expected.items() if len(regions) >= 2
    }
    for policy in policies:
        spec = FailoverPolicySpec.model_validate(policy.inputs["spec"])  # the controller's type
        assert spec.record_name == f"{policy.inputs['metadata']['name']}.models.example.com"
        assert [r.name for r in spec.regions] == expected[policy.inputs["metadata"]["name"]]
        for region in spec.regions:  # through the region's entry, never a private address
            assert region.prometheus_url == (
                f"https://fleet.{region.name}.models.example.com/fleet/v1/prometheus"
            )
        assert spec.namespaces and all(ns.startswith("team-") for ns in spec.namespaces)


def test_every_region_has_the_fleet_token_and_a_signals_name(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    secrets = [s for s in of_type(stack, "kubernetes:core/v1:Secret")
               if s.inputs["metadata"]["name"] == manifests.FLEET_TOKEN_SECRET]  # fmt: skip
    assert len(secrets) == len(fleet.regions)
    passwords = of_type(stack, "random:index/randomPassword:RandomPassword")
    assert [p.name for p in passwords].count("fleet-token") == 1  # one token for the fleet
    for name in (manifests.ENTRY, manifests.CONTROLLERS):
        for deployment in _deployments(stack, name):
            (container,) = deployment.inputs["spec"]["template"]["spec"]["containers"]
            refs = [e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e
                    and "secretKeyRef" in e["valueFrom"]]  # fmt: skip
            assert {r["name"] for r in refs} == {manifests.FLEET_TOKEN_SECRET}
    records = {r.inputs["name"] for r in of_type(stack, "aws:route53/record:Record")}
    assert {f"fleet.{r.name}.models.example.com" for r in fleet.regions} <= records


def test_each_region_gets_the_tenants_and_policies_its_models_need(
    stack: RecordingMocks, fleet: Fleet
) -> None:
    tenants = of_type(stack, "kubernetes:radixfleet.io/v1alpha1:Tenant")
    canaries = of_type(stack, "kubernetes:radixfleet.io/v1alpha1:CanaryPolicy")
    autoscale = of_type(stack, "kubernetes:radixfleet.io/v1alpha1:AutoscalePolicy")
    isvcs = of_type(stack, "kubernetes:serving.kserve.io/v1beta1:InferenceService")
    accounts = [a for a in of_type(stack, "kubernetes:core/v1:ServiceAccount")
                if a.inputs["metadata"]["name"] == "radixfleet-router"]  # fmt: skip
    for region in fleet.regions:
        names = {t.inputs["metadata"]["name"] for t in in_region(tenants, region.name)}
        assert names == {t.name for t in fleet.catalog.tenants}
        served = in_region(isvcs, region.name)
        namespaces = {i.inputs["metadata"]["namespace"] for i in served}
        wanted = {(i.inputs["metadata"]["namespace"],
                   i.inputs["metadata"]["annotations"].get(POLICY_ANNOTATION))
                  for i in served} - {(ns, None) for ns in namespaces}  # fmt: skip
        assert {(c.inputs["metadata"]["namespace"], c.inputs["metadata"]["name"])
                for c in in_region(canaries, region.name)} == wanted  # fmt: skip
        scaled = {(a.inputs["metadata"]["namespace"], a.inputs["spec"]["inferenceService"])
                  for a in in_region(autoscale, region.name)}  # fmt: skip
        assert scaled <= {(i.inputs["metadata"]["namespace"], i.inputs["metadata"]["name"])
                          for i in served} and scaled  # fmt: skip
        own = {a.inputs["metadata"]["namespace"] for a in in_region(accounts, region.name)}
        assert own == namespaces


# A Kubernetes namespace name (RFC 1123 label), up to its 63 characters.
NAMESPACE_NAMES = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)


@given(first=NAMESPACE_NAMES, second=NAMESPACE_NAMES, region=st.sampled_from(REGIONS))
def test_every_role_name_fits_iam_and_two_namespaces_never_share_one(
    first: str, second: str, region: str
) -> None:
    """A tenant namespace of any valid name gets a model-reader role IAM accepts (64
    characters with the provider's 26-character suffix), and its own."""
    names = [f"region-{region}-model-reader-{ns}-role" for ns in (first, second)]
    prefixes = [role_name_prefix(name) for name in names]
    assert all(len(p) + 26 <= ROLE_NAME_MAX for p in prefixes), prefixes
    assert (prefixes[0] == prefixes[1]) == (first == second)


def test_every_role_the_program_declares_is_named_by_a_bounded_prefix(
    stack: RecordingMocks,
) -> None:
    roles = of_type(stack, "aws:iam/role:Role")
    assert roles
    for declared in roles:
        assert "name" not in declared.inputs, declared.name  # never Pulumi's unbounded autoname
        assert declared.inputs["namePrefix"] == role_name_prefix(declared.name)


def _probe_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def _replicas_passing(probe: dict[str, Any], replicas: int) -> int:
    """How many of `replicas` operator replicas of one peering, one of them leading, pass
    `probe`, each probed on the readiness server `radixfleet operator run` starts."""
    now = datetime.now(UTC)
    seen = now.isoformat()
    peers = {f"op-{i}": {"priority": 100 + i, "lifetime": 60, "lastseen": seen}
             for i in range(replicas)}  # fmt: skip
    passing = 0
    for i in range(replicas):
        readiness = PeeringReadiness(
            started=lambda: True, peers=lambda: peers, identity=f"op-{i}", priority=100 + i,
            clock=lambda: now,
        )  # fmt: skip
        server = serve_readiness(port=0, role=readiness.role, host="127.0.0.1")
        try:
            passing += _probe_status(server.server_address[1], probe["httpGet"]["path"]) == 200
        finally:
            server.shutdown()
    return passing


def test_the_operator_deployment_becomes_available_with_one_leader(stack: RecordingMocks) -> None:
    """pulumi-kubernetes awaits every replica of a Deployment Ready: a standby replica, alive
    in the peering and able to take over, must pass the readiness probe, not only the leader."""
    deployments = _deployments(stack, manifests.CONTROLLERS)
    assert deployments
    for deployment in deployments:
        (container,) = deployment.inputs["spec"]["template"]["spec"]["containers"]
        probe = container["readinessProbe"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports[probe["httpGet"]["port"]] == READINESS_PORT  # the server probed below
        replicas = int(deployment.inputs["spec"]["replicas"])  # numbers arrive as floats
        assert replicas >= 2
        assert _replicas_passing(probe, replicas) == replicas
