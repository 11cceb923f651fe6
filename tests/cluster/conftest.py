"""Fixtures shared by the cluster tests: KServe and Knative Serving installed once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from radixfleet.platform import DEFAULT_DEPLOYMENT_MODE, KNATIVE_FEATURES
from testbed import session
from testbed.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def kserve(cluster: Cluster) -> Iterator[Cluster]:
    """The session's cluster with radixfleet's CRDs, KServe in both deployment modes (the default
    the platform's, Knative: an InferenceService asks for Standard by annotation) and Knative
    Serving with the platform's config-features. Knative's networking layer is the test helper
    `testbed.fake_kingress` (KIngresses marked ready, nothing routed by host name): no real one
    can be built here (testbed/NETWORKING.md)."""
    other = "Standard" if DEFAULT_DEPLOYMENT_MODE == "Knative" else "Knative"
    session.install_kserve(
        cluster, modes=(DEFAULT_DEPLOYMENT_MODE, other), knative_features=dict(KNATIVE_FEATURES)
    )
    for crd in sorted((REPO / "radixfleet/crds").glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
    with session.kingresses_marked_ready(cluster):
        yield cluster
