"""The Pulumi program's pure parts: subnet plans, dashboards and rules discovery, bucket rewrites,
and node labels that match what the InferenceServices select.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

from infra import manifests as m
from infra.components.aws.network import subnet_cidrs
from radixfleet import labels
from radixfleet.config import GpuPool
from radixfleet.kit.registry import plugins
from radixfleet.render import operator


@pytest.mark.parametrize("cidr", ["10.0.0.0/16", "10.1.0.0/17", "172.16.0.0/18"])
@pytest.mark.parametrize("zones", [3, 6])
def test_subnets_are_disjoint_and_inside_the_vpc(cidr: str, zones: int) -> None:
    private, public = subnet_cidrs(cidr, zones)
    nets = [ipaddress.IPv4Network(n) for n in [*private, *public]]
    assert len(private) == len(public) == zones
    assert all(n.subnet_of(ipaddress.IPv4Network(cidr)) for n in nets)
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])


def test_no_dashboards_directory_means_nothing_to_provision(tmp_path: Path) -> None:
    assert m.dashboard_files(tmp_path / "absent") == []
    assert m.prometheus_rules(tmp_path / "absent") == []
    assert m.load_crds(tmp_path / "absent") == []


def _rules(name: str) -> dict[str, object]:
    return {"groups": [{"name": name, "rules": [{"record": "x", "expr": "1"}]}]}


def test_prometheus_rule_objects_win_over_their_bare_copies(tmp_path: Path) -> None:
    obj = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "fleet", "namespace": "elsewhere"},
        "spec": _rules("a"),
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(obj))
    (tmp_path / "fleet.rules.yaml").write_text(yaml.safe_dump(_rules("a")))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["x"], "tests": []}))
    (rule,) = m.prometheus_rules(tmp_path)
    assert rule["metadata"] == {"name": "fleet", "namespace": m.MONITORING_NAMESPACE}


def test_bare_rule_files_are_wrapped_when_alone(tmp_path: Path) -> None:
    (tmp_path / "Team Rules.yml").write_text(yaml.safe_dump(_rules("b")))
    (rule,) = m.prometheus_rules(tmp_path)
    assert rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["name"] == "team-rules"
    assert rule["spec"] == _rules("b")


def test_repository_dashboards_are_found() -> None:
    directory = Path(__file__).resolve().parent.parent / "dashboards"
    assert all(p.suffix == ".json" for p in m.dashboard_files(directory))


def test_bucket_rewrite_touches_only_the_catalog_bucket() -> None:
    value = {
        "a": "s3://models/x/y",
        "b": ["s3://models-other/x", "hf://models/x", {"uri": "s3://models/z"}],
        "c": 3,
    }
    assert m.rewrite_bucket(value, "models", "models-eu-west-1") == {
        "a": "s3://models-eu-west-1/x/y",
        "b": ["s3://models-other/x", "hf://models/x", {"uri": "s3://models-eu-west-1/z"}],
        "c": 3,
    }


def test_gpu_labels_match_the_inference_service_selector() -> None:
    pool = GpuPool(
        name="h100-spot",
        instance_type="p5.48xlarge",
        gpu_type="H100",
        gpus_per_node=8,
        max_nodes=2,
        capacity="spot",
    )
    node = m.gpu_node_labels(pool)
    assert node[labels.GPU_TYPE] == "h100"
    assert node[labels.GPU_POOL] == "h100-spot"
    assert node[labels.CAPACITY_TYPE] == "spot"
    assert m.GPU_TOLERATION["key"] == labels.GPU_TAINT_KEY


def test_controller_rules_cover_every_radixfleet_crd_and_nothing_more() -> None:
    rules = m.controller_cluster_rules()
    groups = [r for r in rules if r["apiGroups"] == [labels.GROUP]]
    plurals = {resource.split("/")[0] for r in groups for resource in r["resources"]}
    assert plurals == {p.plural for p in plugins() if p.plural is not None}
    status = {res for r in groups for res in r["resources"] if res.endswith("/status")}
    assert status == {f"{p.plural}/status" for p in plugins() if p.plural is not None}


def test_infra_and_the_kustomize_base_grant_the_same_rules() -> None:
    assert m.controller_cluster_rules() == operator.role()["rules"]


def test_pulumi_leaves_the_canary_percent_to_the_canary_controller() -> None:
    """What `pulumi up` must not reset: the field the canary steps during a rollout (the mocks
    do not see resource options, so the rule is tested where workloads.py takes it from)."""
    isvc = {"kind": "InferenceService", "spec": {"predictor": {"canaryTrafficPercent": 0}}}
    assert m.owned_by_controllers(isvc) == ["spec.predictor.canaryTrafficPercent"]
    assert m.owned_by_controllers({"kind": "ClusterServingRuntime"}) == []
