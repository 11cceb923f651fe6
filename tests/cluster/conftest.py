"""Fixtures shared by the cluster tests: KServe installed once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import session
from testbed.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def kserve(cluster: Cluster) -> Cluster:
    """The session's cluster with KServe (Standard mode) and radixfleet's CRDs installed."""
    session.install_kserve(cluster)
    for crd in sorted((REPO / "radixfleet/crds").glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
    return cluster
