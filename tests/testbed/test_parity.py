"""The test cluster runs the versions infra pins: KServe's charts from the KServe module the test
bed builds, cert-manager's CRDs from the cert-manager release whose chart infra installs,
Knative Serving from the release infra's operator installs, prometheus-operator at the release
infra's kube-prometheus-stack runs, Kubernetes at infra's EKS minor.
Change one side and this fails until the other follows."""

from __future__ import annotations

from typing import Any

import pytest

from infra import manifests
from infra.testing import example_config
from testbed import charts, knative, prometheus
from testbed.builds import HERE, KUBE_VERSION


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    return example_config()


@pytest.mark.parametrize("release", ["kserve-crd", "kserve-resources"])
def test_kserves_charts_are_the_release_infra_installs(stack: dict[str, Any], release: str) -> None:
    chart = charts.kserve_chart(release)
    assert stack["radixfleet:charts"][release]["version"] == chart.version()


def test_cert_managers_crds_are_of_the_release_infra_installs(stack: dict[str, Any]) -> None:
    pinned = stack["radixfleet:charts"]["cert-manager"]["version"]
    assert pinned == charts.cert_manager_crds().version()


def test_knative_serving_is_the_release_infras_operator_installs(stack: dict[str, Any]) -> None:
    release = knative.release(knative.module_version())
    assert stack["radixfleet:knative"]["servingVersion"] == release
    assert stack["radixfleet:charts"]["knative-operator"]["version"] == f"v{release}"


def test_the_operator_builds_the_serving_the_test_bed_builds() -> None:
    # The operator installs the Serving release its own go.mod requires, and the test bed runs
    # the Serving programs it builds from testbed/knative: one version on both sides.
    serving = charts.ModuleChart("knative.dev/serving", HERE / "knative" / "go.mod", ".")
    operator = charts.ModuleChart(knative.OPERATOR_MODULE, knative.OPERATOR_GO_MOD, ".")
    operator_requires = (operator.path() / "go.mod").read_text()
    assert f"knative.dev/serving {serving.version()}" in operator_requires


def test_kubernetes_is_infras_eks_minor(stack: dict[str, Any]) -> None:
    minor = ".".join(KUBE_VERSION.removeprefix("v").split(".")[:2])
    assert stack["radixfleet:cluster"]["kubernetesVersion"] == minor


# kube-prometheus-stack's chart versions and the prometheus-operator release each runs (the
# chart's appVersion). The chart cannot be downloaded here, so the pairing is written down: a
# new pin in infra fails here until its release is added and the test bed builds it.
CHART_OPERATOR = {"72.9.1": "v0.82.2"}


def test_prometheus_operator_is_the_release_infras_chart_runs(stack: dict[str, Any]) -> None:
    pinned = stack["radixfleet:charts"]["kube-prometheus-stack"]["version"]
    built = charts.ModuleChart(prometheus.MODULE, prometheus.GO_MOD, ".").version()
    assert CHART_OPERATOR.get(pinned) == built, f"chart {pinned}, operator {built} built here"


def test_prometheus_is_the_version_infra_pins_in_the_charts_values() -> None:
    pinned = manifests.prometheus_stack_values(admin_secret="a", storage_class="b")
    spec = pinned["prometheus"]["prometheusSpec"]
    assert spec["image"]["tag"] == prometheus.server_version()
