"""The failover's Events posting to the test cluster: the real adapter it posts through.

The failover posts through the kit's `KubeEvents` (core/v1 Events), under its own component
name, about the FailoverPolicy. The controller runs on the fakes of tests/failover/
test_controller.py; only the Events go over the wire, and the test reads back what the API
server stored. A refused Event comes from RBAC: the adapter posts as a ServiceAccount with no
role.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from radixfleet.controllers.failover.kube import FIELD_MANAGER
from radixfleet.kit.kube import KubeEvents
from testbed.cluster import Cluster
from tests.cluster.events import clean_namespace, refused_client, stored
from tests.failover.test_controller import World

NS, NAME = "fleet", "llama"


@pytest.fixture
def cluster_ns(platform_crds: Cluster, kube_client: Any) -> Cluster:
    clean_namespace(platform_crds, kube_client, NS)
    return platform_crds


def on_the_wire(api_client: Any) -> World:
    world = World()
    world.controller.events = KubeEvents(
        api_client, clock=lambda: world.now, component=FIELD_MANAGER
    )
    return world


def test_a_dead_region_is_reported_in_events_on_the_failover_policy(
    cluster_ns: Cluster, kube_client: Any
) -> None:
    world = on_the_wire(kube_client)
    world.tick()
    world.kill("us")
    world.tick()
    world.tick()
    assert world.route53.weights == {"us-east-1": 0, "eu": 100, "ap": 100}

    events = stored(kube_client, NS, component=FIELD_MANAGER)
    assert [(e["reason"], e["type"]) for e in events] == [
        ("RegionUnhealthy", "Warning"), ("PreScaled", "Normal"), ("WeightsSet", "Normal"),
    ]  # fmt: skip
    for event in events:
        assert event["involvedObject"] == {
            "apiVersion": "radixfleet.io/v1alpha1", "kind": "FailoverPolicy",
            "name": NAME, "namespace": NS,
        }  # fmt: skip
        assert event["metadata"]["name"].startswith(f"{NAME}.")
        assert event["message"]
    assert "us" in events[0]["message"]


def test_refused_events_are_logged_and_the_shift_still_happens(
    cluster_ns: Cluster, kube_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    world = on_the_wire(refused_client(cluster_ns, NS, tmp_path))
    world.tick()
    world.kill("us")
    with caplog.at_level(logging.WARNING):
        world.tick()
        world.tick()
    assert world.route53.weights == {"us-east-1": 0, "eu": 100, "ap": 100}
    assert world.policy["status"]["weights"] == {"us": 0, "eu": 100, "ap": 100}
    assert stored(kube_client, NS, component=FIELD_MANAGER) == []
    assert f"RegionUnhealthy not posted: event RegionUnhealthy on {NS}/{NAME}: HTTP 403" in (
        caplog.text
    )
