"""The canary's real Events adapter (`radixfleet.kit.kube.KubeEvents`) over HTTP, against kmock.

Events are core objects, which the test API server does not serve (see tests/README.md), so
the rollouts here run on the act layer's fakes for InferenceServices, policies and Prometheus,
and only the Events go over the wire: the kubernetes client posts them to kmock, and the test
reads what kmock received.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from canary.controller import run_tick
from canary.kube import FIELD_MANAGER
from canary.spec import Metric
from canary.state import Phase
from radixfleet.adapters.prometheus_fake import FakePrometheus
from radixfleet.kit.kube import KubeEvents
from tests.canary.test_controller import CANARY, GOOD, NAME, NS, POLICY, Fleet, answers
from tests.kmock_server import Emulated, kmock_kubernetes

EVENTS_PATH = f"/api/v1/namespaces/{NS}/events"
SLOW = GOOD | {Metric.TTFT_P95: 0.40}


@pytest.fixture
def kube() -> Iterator[Emulated]:
    with kmock_kubernetes() as emulated:
        yield emulated


def on_the_wire(kube: Emulated, prometheus: FakePrometheus) -> Fleet:
    """A Fleet whose Events go through the real adapter to kmock."""
    fleet = Fleet(prometheus)
    fleet.events = KubeEvents(  # type: ignore[assignment]
        kube.api_client, clock=lambda: fleet.now, component=FIELD_MANAGER
    )
    fleet.restart()
    return fleet


def test_an_advance_and_a_rollback_are_posted_as_events_on_the_inference_service(
    kube: Emulated,
) -> None:
    fleet = on_the_wire(kube, FakePrometheus(answers(SLOW)))
    fleet.tick(20)
    rollout = fleet.rollout()
    assert fleet.percents == [5, 0] and rollout.phase is Phase.ROLLED_BACK

    events = kube.posted(EVENTS_PATH)
    assert [(e["reason"], e["type"], e["message"]) for e in events] == [
        ("CanaryAdvance", "Normal", "advancing from 0% to 5%"),
        ("CanaryHold", "Normal",
         "failed analysis 1 of 2 at 5%: ttftP95 0.4 > bound 0.25, stable 0.2"),
        ("CanaryRollback", "Warning",
         f"rolling back {CANARY}: failed 2 of 2: ttftP95 0.4 > bound 0.25, stable 0.2"),
    ]  # fmt: skip
    for event in events:
        assert event["involvedObject"] == {
            "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "name": NAME, "namespace": NS,
        }  # fmt: skip
        assert event["metadata"] == {"generateName": f"{NAME}.", "namespace": NS}
        assert event["source"] == {"component": FIELD_MANAGER}
        assert event["count"] == 1 and event["firstTimestamp"] == event["lastTimestamp"]
    assert events[-1]["message"] == rollout.last_decision.reason
    # Each one became its own object (the server names them from generateName).
    stored = [key for key in kube.emulator.objects if key[0].plural == "events"]
    assert len(stored) == len(events)


@pytest.mark.parametrize("status", [403, 500])
def test_a_refused_event_is_logged_and_the_tick_carries_on(
    kube: Emulated, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    kube.emulator[f"post {EVENTS_PATH}"] << status
    fleet = on_the_wire(kube, FakePrometheus(answers(GOOD)))
    current = fleet.policies.get(NS, POLICY)
    assert current is not None
    with caplog.at_level(logging.WARNING, logger="radixfleet.kit.kube"):
        run_tick(fleet.controller, current, now=datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    # The advance was carried out (status, then traffic) although its Event was refused.
    assert fleet.percents == [5]
    assert fleet.rollout().weight == 5
    assert [e["reason"] for e in kube.posted(EVENTS_PATH)] == ["CanaryAdvance"]
    assert f"CanaryAdvance not posted: event CanaryAdvance on {NS}/{NAME}: HTTP {status}" in (
        caplog.text
    )
    # The next ticks go on as usual.
    fleet.tick(7)
    assert fleet.percents == [5, 20]
