"""The test cluster runs the versions infra pins: KServe's charts from the KServe module the test
bed builds, cert-manager's CRDs from the cert-manager release whose chart infra installs,
Knative Serving from the release infra's operator installs, Kubernetes at infra's EKS minor.
Change one side and this fails until the other follows."""

from __future__ import annotations

from typing import Any

import pytest

from infra.testing import example_config
from testbed import charts, knative
from testbed.builds import KUBE_VERSION


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
    # Knative's Go modules are tagged v0.(N+27).P for release 1.N.P.
    _, minor, patch = knative.SERVING_VERSION.removeprefix("v").split(".")
    release = f"1.{int(minor) - 27}.{patch}"
    assert stack["radixfleet:knative"]["servingVersion"] == release
    assert stack["radixfleet:charts"]["knative-operator"]["version"] == f"v{release}"


def test_kubernetes_is_infras_eks_minor(stack: dict[str, Any]) -> None:
    minor = ".".join(KUBE_VERSION.removeprefix("v").split(".")[:2])
    assert stack["radixfleet:cluster"]["kubernetesVersion"] == minor
