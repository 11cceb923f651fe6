"""Leader election on the test cluster: the peering CRD, kopf's keep-alives, and /readyz.

kopf's replicas keep their keep-alives in the status of a ClusterKopfPeering (the CRD from
deploy/crds/, the object as deploy/operator/peering.yaml makes it), written with a merge
patch of the whole object, as kopf's `peering.touch` does. This test writes them the same way,
on a peering object of its own, and checks what the readiness of each replica says through the
kit's own reader; real `radixfleet operator run` processes under peering are in
tests/cluster/test_controller_rbac.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from radixfleet.kit.leader import PeeringReadiness, kube_peers
from testbed.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
NOW = datetime.now(UTC)
PEERING = "peering-test"


@pytest.fixture
def peering(platform_crds: Cluster) -> Iterator[Cluster]:
    """deploy/operator/peering.yaml's object under a name of this test's."""
    made = yaml.safe_load((REPO / "deploy" / "operator" / "peering.yaml").read_text())
    made["metadata"]["name"] = PEERING
    platform_crds.kubectl("apply", "-f", "-", stdin=json.dumps(made))
    yield platform_crds
    platform_crds.kubectl("delete", "clusterkopfpeering", PEERING)


def keepalive(priority: int, *, seen_ago: float = 1.0, lifetime: int = 60) -> dict[str, Any]:
    """A peer's keep-alive exactly as kopf's `Peer.as_dict()` writes it."""
    seen = (NOW - timedelta(seconds=seen_ago)).isoformat()
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen}


def touch(cluster: Cluster, peers: dict[str, Any]) -> None:
    patch = json.dumps({"status": peers})
    cluster.kubectl("patch", "clusterkopfpeering", PEERING, "--type=merge", "-p", patch)


def role(kube_client: Any, identity: str, priority: int) -> str | None:
    readiness = PeeringReadiness(
        started=lambda: True, peers=kube_peers(kube_client, name=PEERING), identity=identity,
        priority=priority, clock=lambda: NOW,
    )  # fmt: skip
    return readiness.role()


def test_the_highest_live_peer_leads_the_other_stands_by_and_a_leaver_hands_over(
    peering: Cluster, kube_client: Any
) -> None:
    touch(peering, {"op-high": keepalive(200), "op-low": keepalive(100)})
    assert role(kube_client, "op-high", 200) == "leading"
    assert role(kube_client, "op-low", 100) == "standby"  # ready too: it can take over
    # kopf's goodbye on a clean stop: its entry removed (a null in the merge patch).
    touch(peering, {"op-high": None})
    assert role(kube_client, "op-low", 100) == "leading"
    # A leader that died without a goodbye stops counting once its lifetime has passed.
    touch(peering, {"op-high": keepalive(200, seen_ago=120)})
    assert role(kube_client, "op-low", 100) == "leading"


def test_an_absent_peering_object_means_not_ready(kube_client: Any) -> None:
    readiness = PeeringReadiness(
        started=lambda: True, peers=kube_peers(kube_client, name="nobody"),
        identity="me", priority=1, clock=lambda: NOW,
    )  # fmt: skip
    assert not readiness.ready()
