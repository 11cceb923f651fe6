"""Leader election on a real API server: the peering CRD, kopf's keep-alives, and /readyz.

kopf's replicas keep their keep-alives in the status of the ClusterKopfPeering `radixfleet`
(the CRD from radixfleet/crds/, the object from deploy/operator/peering.yaml), written with a
merge patch of the whole object, as kopf's `peering.touch` does. This test writes them the same
way and checks what the readiness of each replica says, through the kit's own reader.

Why not two `radixfleet operator run` processes here: the test API server serves custom
resources only, and kopf waits for the core `namespaces` resource before it watches anything,
so its reactor never starts on this server (it does on any real cluster).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from radixfleet.kit.leader import PEERING_NAME, PeeringReadiness, kube_peers
from tests.apiserver.fixture import ApiServer

REPO = Path(__file__).resolve().parents[2]
NOW = datetime.now(UTC)


def keepalive(priority: int, *, seen_ago: float = 1.0, lifetime: int = 60) -> dict[str, Any]:
    """A peer's keep-alive exactly as kopf's `Peer.as_dict()` writes it."""
    seen = (NOW - timedelta(seconds=seen_ago)).isoformat()
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen}


def touch(server: ApiServer, peers: dict[str, Any]) -> None:
    patch = json.dumps({"status": peers})
    server.kubectl("patch", "clusterkopfpeering", PEERING_NAME, "--type=merge", "-p", patch)


def ready(server: ApiServer, identity: str, priority: int) -> bool:
    readiness = PeeringReadiness(
        started=lambda: True, peers=kube_peers(server.api_client), identity=identity,
        priority=priority, clock=lambda: NOW,
    )  # fmt: skip
    return readiness.ready()


def test_only_the_highest_live_peer_is_ready_and_a_leaver_hands_over(apiserver: ApiServer) -> None:
    apiserver.kubectl("apply", "-f", str(REPO / "deploy" / "operator" / "peering.yaml"))
    touch(apiserver, {"op-high": keepalive(200), "op-low": keepalive(100)})
    assert ready(apiserver, "op-high", 200)
    assert not ready(apiserver, "op-low", 100)
    # kopf's goodbye on a clean stop: its entry removed (a null in the merge patch).
    touch(apiserver, {"op-high": None})
    assert ready(apiserver, "op-low", 100)
    # A leader that died without a goodbye stops counting once its lifetime has passed.
    touch(apiserver, {"op-high": keepalive(200, seen_ago=120)})
    assert ready(apiserver, "op-low", 100)


def test_an_absent_peering_object_means_not_ready(apiserver: ApiServer) -> None:
    readiness = PeeringReadiness(
        started=lambda: True, peers=kube_peers(apiserver.api_client, name="nobody"),
        identity="me", priority=1, clock=lambda: NOW,
    )  # fmt: skip
    assert not readiness.ready()
