"""The failover's Events over HTTP, against kmock: the real adapter it posts through.

The failover posts through the canary's `KubeEvents` (the same core/v1 Events), under its own
component name, about the FailoverPolicy. Events are core objects, which the test API server
does not serve, so the controller runs on the fakes of tests/failover/test_controller.py and
only the Events go over the wire to kmock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from policies.failover.kube import FIELD_MANAGER
from radixfleet.kit.kube import KubeEvents
from tests.failover.test_controller import World
from tests.kmock_server import Emulated, kmock_kubernetes

NS, NAME = "fleet", "llama"
EVENTS_PATH = f"/api/v1/namespaces/{NS}/events"


@pytest.fixture
def kube() -> Iterator[Emulated]:
    with kmock_kubernetes() as emulated:
        yield emulated


def on_the_wire(kube: Emulated) -> World:
    world = World()
    world.controller.events = KubeEvents(
        kube.api_client, clock=lambda: world.now, component=FIELD_MANAGER
    )
    return world


def test_a_dead_region_is_reported_in_events_on_the_failover_policy(kube: Emulated) -> None:
    world = on_the_wire(kube)
    world.tick()
    world.kill("us")
    world.tick()
    world.tick()
    assert world.route53.weights == {"us-east-1": 0, "eu": 100, "ap": 100}

    events = kube.posted(EVENTS_PATH)
    assert [(e["reason"], e["type"]) for e in events] == [
        ("RegionUnhealthy", "Warning"), ("PreScaled", "Normal"), ("WeightsSet", "Normal"),
    ]  # fmt: skip
    for event in events:
        assert event["involvedObject"] == {
            "apiVersion": "radixfleet.io/v1alpha1", "kind": "FailoverPolicy",
            "name": NAME, "namespace": NS,
        }  # fmt: skip
        assert event["metadata"] == {"generateName": f"{NAME}.", "namespace": NS}
        assert event["source"] == {"component": "radixfleet-failover"}
        assert event["message"]
    assert "us" in events[0]["message"]
    stored = [key for key in kube.emulator.objects if key[0].plural == "events"]
    assert len(stored) == 3


@pytest.mark.parametrize("status", [403, 500])
def test_refused_events_are_logged_and_the_shift_still_happens(
    kube: Emulated, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    kube.emulator[f"post {EVENTS_PATH}"] << status
    world = on_the_wire(kube)
    world.tick()
    world.kill("us")
    with caplog.at_level(logging.WARNING):
        world.tick()
        world.tick()
    assert world.route53.weights == {"us-east-1": 0, "eu": 100, "ap": 100}
    assert world.policy["status"]["weights"] == {"us": 0, "eu": 100, "ap": 100}
    assert [e["reason"] for e in kube.posted(EVENTS_PATH)] == [
        "RegionUnhealthy",
        "PreScaled",
        "WeightsSet",
    ]
    assert f"RegionUnhealthy not posted: event RegionUnhealthy on {NS}/{NAME}: HTTP {status}" in (
        caplog.text
    )
