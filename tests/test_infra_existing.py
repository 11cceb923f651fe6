"""The Pulumi program on clusters a team already runs (cloud `kubernetes`), under mocks: the
stack config is checked per cloud, and the program declares the Kubernetes half only (no cloud
resource, no load balancer), through one provider per region that reads the stack's kubeconfig.
`tests/cluster/test_pulumi.py` runs the same program for real on the test cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pulumi.runtime import rpc

from infra import manifests
from infra.settings import AWS_KEYS, parse_fleet
from infra.testing import (
    EXISTING_EXAMPLE_STACK,
    RecordingMocks,
    example_config,
    radixfleet_values,
    run_program,
)
from radixfleet.config import ConfigError, load_catalog

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

INFRA_DIR = EXISTING_EXAMPLE_STACK.parent
# How Pulumi's wire format marks a secret value (the SDK's pulumi.runtime.rpc).
SECRET_SIGNATURE = rpc._special_sig_key
SECRET_SIGNATURE_VALUE = rpc._special_secret_sig
CATALOG = (INFRA_DIR / "../inferenceservices/catalog.yaml").resolve()


def existing_config(kubeconfig: Path, **changes: Any) -> dict[str, Any]:
    """The example-existing stack with its kubeconfig at `kubeconfig`, its token set, and
    `changes` (`radixfleet:` keys without the namespace; None drops a key)."""
    config = example_config(stack=EXISTING_EXAMPLE_STACK)
    config["radixfleet:clusters"]["us-east-1"]["kubeconfig"] = str(kubeconfig)
    config["radixfleet:fleetToken"] = "a-token-for-the-tests"
    for key, value in changes.items():
        if value is None:
            config.pop(f"radixfleet:{key}", None)
        else:
            config[f"radixfleet:{key}"] = value
    return config


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kube") / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\n")  # the mocks never read it
    return path


def problems(config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_fleet(radixfleet_values(config), source="existing", base_dir=INFRA_DIR)
    return [f"{p.location}: {p.message}" for p in caught.value.problems]


def test_the_existing_cluster_example_parses_with_its_token(kubeconfig: Path) -> None:
    config = radixfleet_values(existing_config(kubeconfig))
    fleet = parse_fleet(config, source="existing", base_dir=INFRA_DIR)
    assert [r.name for r in fleet.regions] == ["us-east-1"]
    assert fleet.primary_region == fleet.failover_region == "us-east-1"
    with pytest.raises(ValueError, match="no aws settings"):
        _ = fleet.aws


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({"fleetToken": None}, "radixfleet:fleetToken: missing", id="no-token"),
        pytest.param(
            {"clusters": {}}, "radixfleet:clusters.us-east-1: missing", id="region-without-cluster"
        ),
        pytest.param(
            {"dns": {"zoneId": "Z1", "domain": "models.example.com"}},
            "radixfleet:dns: only for cloud aws",
            id="aws-key-on-kubernetes",
        ),
        pytest.param(
            {"clusters": {"us-east-1": {"kubeconfig": "/nonexistent/kubeconfig"}}},
            "radixfleet:clusters.us-east-1.kubeconfig: no kubeconfig file at /nonexistent",
            id="kubeconfig-not-there",
        ),
    ],
)
def test_a_bad_existing_cluster_stack_is_a_located_error(
    kubeconfig: Path, changes: dict[str, Any], expected: str
) -> None:
    found = problems(existing_config(kubeconfig, **changes))
    assert any(p.startswith(expected) for p in found), found


def test_an_aws_stack_needs_every_aws_key_and_no_kubernetes_key(kubeconfig: Path) -> None:
    config = existing_config(kubeconfig, cloud="aws")
    found = problems(config)
    for key in AWS_KEYS:
        assert f"radixfleet:{key}: missing: the aws cloud needs it" in found, found
    assert "radixfleet:clusters: only for cloud kubernetes" in found
    assert "radixfleet:fleetToken: only for cloud kubernetes" in found


@pytest.fixture(scope="module")
def stack(kubeconfig: Path) -> RecordingMocks:
    return run_program(existing_config(kubeconfig), stack="example-existing")


def kinds(stack: RecordingMocks, kind: str) -> list[dict[str, Any]]:
    """The inputs of every Kubernetes object of `kind` declared (typed or custom)."""
    return [
        r.inputs
        for r in stack.resources
        if r.type.startswith("kubernetes:")
        and (r.type.endswith(f":{kind}") or r.inputs.get("kind") == kind)
    ]


def test_no_cloud_resource_and_one_provider_reading_the_kubeconfig(
    stack: RecordingMocks, kubeconfig: Path
) -> None:
    types = {r.type for r in stack.resources}
    assert not {t for t in types if t.startswith(("aws:", "random:", "eks:"))}, types
    (provider,) = [r for r in stack.resources if r.type == "pulumi:providers:kubernetes"]
    # The path, not the file's contents: the cluster's credentials stay out of Pulumi's state.
    assert provider.inputs["kubeconfig"] == str(kubeconfig)
    # A rotated key Secret is updated, never deleted and created again (test_infra_program.py).
    assert provider.inputs.get("enableSecretMutable") in {True, "true"}, provider.inputs


def test_the_kubernetes_half_is_deployed_without_a_load_balancer(stack: RecordingMocks) -> None:
    deployments = {d["metadata"]["name"]: d for d in kinds(stack, "Deployment")}
    assert {"radixfleet-operator", "radixfleet-entry"} <= set(deployments), deployments
    for name in ("radixfleet-operator", "radixfleet-entry"):
        # No label only infra's EKS system nodes carry (the pods would never schedule).
        pod = deployments[name]["spec"]["template"]["spec"]
        assert not pod.get("nodeSelector"), pod.get("nodeSelector")
    services = kinds(stack, "Service")
    assert services and all(s["spec"].get("type", "ClusterIP") == "ClusterIP" for s in services)
    assert {c["metadata"]["name"] for c in kinds(stack, "CustomResourceDefinition")}
    (token,) = [s for s in kinds(stack, "Secret")
                if s["metadata"]["name"] == manifests.FLEET_TOKEN_SECRET]  # fmt: skip
    # A Pulumi secret (kept encrypted in the state), holding the stack's token.
    data = token["stringData"]
    assert data.get(SECRET_SIGNATURE) == SECRET_SIGNATURE_VALUE, data
    assert data["value"] == {manifests.FLEET_TOKEN_KEY: "a-token-for-the-tests"}
    assert kinds(stack, "ClusterServingRuntime")
    assert kinds(stack, "PodMonitor") and kinds(stack, "PrometheusRule")


def test_models_read_the_catalogs_uris_as_written(stack: RecordingMocks) -> None:
    catalog = load_catalog(CATALOG)
    wanted = {m.storage_uri for m in catalog.models if "us-east-1" in m.regions}
    isvcs = kinds(stack, "InferenceService")
    assert isvcs
    uris = {i["spec"]["predictor"]["model"].get("storageUri") for i in isvcs}
    assert uris <= wanted | {None}, uris - wanted


def test_without_monitoring_no_dashboards_rules_or_monitors(kubeconfig: Path) -> None:
    config = existing_config(kubeconfig)
    config["radixfleet:clusters"]["us-east-1"]["monitoring"] = False
    stack = run_program(config, stack="example-existing")
    assert not kinds(stack, "PodMonitor") and not kinds(stack, "PrometheusRule")
    assert not [c for c in kinds(stack, "ConfigMap") if "grafana_dashboard" in
                (c["metadata"].get("labels") or {})]  # fmt: skip
    assert kinds(stack, "InferenceService")  # the rest is there


def test_the_system_node_selector_places_the_operator_and_the_entry(kubeconfig: Path) -> None:
    config = existing_config(kubeconfig)
    config["radixfleet:clusters"]["us-east-1"]["systemNodeSelector"] = {"pool": "system"}
    stack = run_program(config, stack="example-existing")
    placed = {d["metadata"]["name"]: d["spec"]["template"]["spec"].get("nodeSelector")
              for d in kinds(stack, "Deployment")}  # fmt: skip
    assert placed["radixfleet-operator"] == placed["radixfleet-entry"] == {"pool": "system"}
