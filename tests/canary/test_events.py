"""The canary's Events adapter (`radixfleet.kit.kube.KubeEvents`) posting to the test cluster.

The rollouts run on the act layer's fakes for InferenceServices, policies and Prometheus (as in
test_controller.py); only the Events go over the wire, and the test reads back what the API
server stored. A refused Event comes from RBAC itself: the adapter posts as a ServiceAccount
with no role.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from radixfleet.adapters.prometheus_fake import FakePrometheus
from radixfleet.controllers.canary.controller import run_tick
from radixfleet.controllers.canary.kube import FIELD_MANAGER
from radixfleet.controllers.canary.spec import Metric
from radixfleet.controllers.canary.state import Phase
from radixfleet.kit.kube import KubeEvents
from testbed.cluster import Cluster
from tests.canary.test_controller import CANARY, GOOD, NAME, NS, POLICY, Fleet, answers
from tests.cluster.events import clean_namespace, refused_client, stored

SLOW = GOOD | {Metric.TTFT_P95: 0.40}


@pytest.fixture
def cluster_ns(platform_crds: Cluster, kube_client: Any) -> Cluster:
    clean_namespace(platform_crds, kube_client, NS)
    return platform_crds


def on_the_wire(api_client: Any, prometheus: FakePrometheus) -> Fleet:
    """A Fleet whose Events go through the real adapter to the API server."""
    fleet = Fleet(prometheus)
    fleet.events = KubeEvents(  # type: ignore[assignment]
        api_client, clock=lambda: fleet.now, component=FIELD_MANAGER
    )
    fleet.restart()
    return fleet


def test_an_advance_and_a_rollback_are_posted_as_events_on_the_inference_service(
    cluster_ns: Cluster, kube_client: Any
) -> None:
    fleet = on_the_wire(kube_client, FakePrometheus(answers(SLOW)))
    fleet.tick(20)
    rollout = fleet.rollout()
    assert fleet.percents == [5, 0] and rollout.phase is Phase.ROLLED_BACK

    events = stored(kube_client, NS, component=FIELD_MANAGER)
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
        # Each one its own object, named by the API server from generateName.
        assert event["metadata"]["name"].startswith(f"{NAME}.")
        assert event["count"] == 1 and event["firstTimestamp"] == event["lastTimestamp"]
    assert len({e["metadata"]["name"] for e in events}) == len(events)
    assert events[-1]["message"] == rollout.last_decision.reason


def test_a_refused_event_is_logged_and_the_tick_carries_on(
    cluster_ns: Cluster, kube_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    refused = refused_client(cluster_ns, NS, tmp_path)
    fleet = on_the_wire(refused, FakePrometheus(answers(GOOD)))
    current = fleet.policies.get(NS, POLICY)
    assert current is not None
    with caplog.at_level(logging.WARNING, logger="radixfleet.kit.kube"):
        run_tick(fleet.controller, current, now=datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    # The advance was carried out (status, then traffic) although its Event was refused.
    assert fleet.percents == [5]
    assert fleet.rollout().weight == 5
    assert stored(kube_client, NS, component=FIELD_MANAGER) == []
    assert f"CanaryAdvance not posted: event CanaryAdvance on {NS}/{NAME}: HTTP 403" in (
        caplog.text
    )
    # The next ticks go on as usual.
    fleet.tick(7)
    assert fleet.percents == [5, 20]
