"""One set of versions: what infra installs is what validate judges against.

The example stack pins KServe, Knative, Kubernetes and the charts; the schemas validate ships
name their release in `radixfleet.schemas`; the Knative features infra switches on are the ones
validate assumes and the rendered predictors need. Each test fails when one side moves alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import manifests
from infra.testing import example_config, radixfleet_values
from radixfleet import schemas
from radixfleet.platform import KNATIVE_FEATURES, KUBERNETES_VERSION
from radixfleet.render.inferenceservices import KNATIVE
from radixfleet.validate.knative_rules import flags_used
from radixfleet.validate.podview import Doc, predictor_pod

REPO = Path(__file__).resolve().parent.parent
# Each chart from its own project's repository.
CHART_REPOS = {
    "nvidia-device-plugin": "https://nvidia.github.io/k8s-device-plugin",
    "dcgm-exporter": "https://nvidia.github.io/dcgm-exporter/helm-charts",
    "cert-manager": "https://charts.jetstack.io",
    "knative-operator": "https://knative.github.io/operator",
    "kserve-crd": "oci://ghcr.io/kserve/charts",
    "kserve-resources": "oci://ghcr.io/kserve/charts",
    "kube-prometheus-stack": "https://prometheus-community.github.io/helm-charts",
    "cluster-autoscaler": "https://kubernetes.github.io/autoscaler",
}


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    return radixfleet_values(example_config())


def test_kserve_charts_are_the_release_of_the_schemas(stack: dict[str, Any]) -> None:
    for chart in ("kserve-crd", "kserve-resources"):
        assert stack["charts"][chart]["version"] == schemas.KSERVE_VERSION, chart


def test_knative_is_the_release_kserve_is_built_against(stack: dict[str, Any]) -> None:
    assert stack["knative"]["servingVersion"] == schemas.KNATIVE_SERVING_VERSION
    operator = stack["charts"]["knative-operator"]["version"]
    assert operator == f"v{schemas.KNATIVE_SERVING_VERSION}"
    # Knative's Go modules are numbered v0.(minor + 27).
    minor = int(schemas.KNATIVE_SERVING_VERSION.split(".")[1])
    assert schemas.KNATIVE_SERVING_MODULE_VERSION.startswith(f"v0.{minor + 27}.")


def test_prometheus_chart_is_the_one_the_pod_monitor_schema_was_copied_for(
    stack: dict[str, Any],
) -> None:
    chart = stack["charts"]["kube-prometheus-stack"]["version"]
    assert chart == schemas.KUBE_PROMETHEUS_STACK_VERSION


def test_kubernetes_version_is_the_one_validate_checks_against(stack: dict[str, Any]) -> None:
    assert stack["cluster"]["kubernetesVersion"] == KUBERNETES_VERSION
    assert stack["cluster"]["addons"]["kube-proxy"].startswith(f"v{KUBERNETES_VERSION}.")


def test_charts_come_from_their_projects_repositories(stack: dict[str, Any]) -> None:
    assert {name: c["repo"] for name, c in stack["charts"].items()} == CHART_REPOS
    # The published chart names are the keys: KServe's is kserve-resources since 0.17.
    assert all("chart" not in c for c in stack["charts"].values())


def test_pulumi_runs_the_program_in_the_uv_environment() -> None:
    project = yaml.safe_load((REPO / "infra" / "Pulumi.yaml").read_text())
    assert project["runtime"]["name"] == "python"
    assert project["runtime"]["options"]["toolchain"] == "uv"
    # uv's toolchain uses the .venv beside the nearest uv.lock: the repository root's.
    assert "virtualenv" not in project["runtime"]["options"]
    assert (REPO / "uv.lock").is_file()


def test_infra_switches_on_exactly_the_features_the_predictors_use() -> None:
    runtimes = {
        path.stem: Doc(str(path), path.stem, yaml.safe_load(path.read_text()))
        for path in (REPO / "runtimes").glob("sglang*.yaml")
    }
    used: set[str] = set()
    for path in sorted((REPO / "inferenceservices").glob("team-*/*.yaml")):
        body = yaml.safe_load(path.read_text())
        annotations = body["metadata"].get("annotations", {})
        if (
            body["kind"] != "InferenceService"
            or annotations.get("serving.kserve.io/deploymentMode") != KNATIVE
        ):
            continue
        runtime = runtimes[body["spec"]["predictor"]["model"]["runtime"]]
        used |= flags_used(predictor_pod(Doc(str(path), path.stem, body), runtime))
    assert used == set(KNATIVE_FEATURES)
    assert all(value == "enabled" for value in KNATIVE_FEATURES.values())
    serving = manifests.knative_serving(
        version="1.21.1", domain="d", scale_to_zero=True, stable_window="60s", grace_period="30s"
    )
    assert serving["spec"]["config"]["features"] == dict(KNATIVE_FEATURES)
