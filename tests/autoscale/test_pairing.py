"""A prefill/decode model's two AutoscalePolicies under one rule (pairing.py): a role never
sleeps while its peer serves, on the pure rule and on the controller over recording fakes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.controllers.autoscale.decide import Decision
from radixfleet.controllers.autoscale.knative import MIN_SCALE
from radixfleet.controllers.autoscale.pairing import Peer, paired, peer_of
from radixfleet.controllers.autoscale.state import AutoscaleStatus, Verb
from radixfleet.labels import MODEL
from radixfleet.labels import PD_ROLE as ROLE
from tests.autoscale.test_controller import ISVC, NS, REV, T0, World, answers, gauges, policy


def decision(desired: int) -> Decision:
    status = AutoscaleStatus(inference_service="x", desired=desired)
    return Decision(Verb.SCALE_DOWN, desired, "idle", status)


@pytest.mark.parametrize(
    ("role", "mine", "peer", "expected"),
    [
        ("decode", 0, 2, 1), ("prefill", 0, 3, 1),
        ("decode", 0, 0, 0), ("prefill", 0, 0, 0),
        ("decode", 3, 0, 3), ("prefill", 2, 5, 2),
    ],
    ids=["decode-keeps-one-beside-a-busy-prefill", "prefill-keeps-one-beside-a-busy-decode",
         "decode-sleeps-with-its-prefill", "prefill-sleeps-with-its-decode",
         "a-busy-decode-is-untouched", "a-busy-prefill-is-untouched"],
)  # fmt: skip
def test_a_role_goes_to_zero_only_with_its_peer(
    role: str, mine: int, peer: int, expected: int
) -> None:
    found = paired(decision(mine), role=role, peer_desired=peer)
    assert (found.desired, found.status.desired) == (expected, expected)
    assert (found.reason == "idle") == (expected == mine), "a raise says why"


@given(role=st.sampled_from(["prefill", "decode"]), mine=st.integers(0, 50),
       peer=st.integers(0, 50))  # fmt: skip
def test_the_pair_rule_only_ever_raises_and_never_leaves_a_role_alone(
    role: str, mine: int, peer: int
) -> None:
    found = paired(decision(mine), role=role, peer_desired=peer)
    assert found.desired >= mine
    assert (found.desired == 0) == (mine == 0 and peer == 0) or found.desired > 0


@pytest.mark.parametrize(
    ("found_labels", "expected"),
    [({MODEL: "m", ROLE: "decode"}, Peer("decode", "m-prefill")),
     ({MODEL: "m", ROLE: "prefill"}, Peer("prefill", "m-decode")),
     ({MODEL: "m"}, None), ({ROLE: "decode"}, None)],
    ids=["decode", "prefill", "a-plain-model", "a-role-without-its-model"],
)  # fmt: skip
def test_the_peer_is_read_from_the_roles_labels(
    found_labels: dict[str, str], expected: Peer | None
) -> None:
    assert peer_of({"metadata": {"name": "x", "labels": found_labels}}) == expected


def _idle_decode(world: World) -> None:
    """The World's InferenceService as the decode of pair `m`, idle for two hours."""
    found = world.isvcs.get(NS, ISVC)
    assert found is not None
    found["metadata"]["labels"] = {"radixfleet.io/model": "m", "radixfleet.io/pd-role": "decode"}
    world.isvcs.add(found)
    world.prometheus.answers = answers({"pod-0": gauges(0.0, running=0.0)}, rate=0.0)
    zeros = [{"at": (T0 - timedelta(seconds=s)).isoformat(), "value": 0.0}
             for s in range(300, 0, -10)]  # fmt: skip
    world.policies.add(policy() | {"status": {
        "inferenceService": ISVC, "revision": REV, "desired": 1, "recommendations": zeros,
        "lastActiveAt": (T0 - timedelta(hours=2)).isoformat(),
        "lastTickAt": (T0 - timedelta(seconds=10)).isoformat(),
    }})  # fmt: skip


def _peer(desired: int) -> dict[str, Any]:
    return {"metadata": {"name": "m-prefill", "namespace": NS},
            "spec": {"inferenceService": "m-prefill"}, "status": {"desired": desired}}  # fmt: skip


@pytest.mark.parametrize(
    ("peer_desired", "kept"), [(2, 1), (0, 0)], ids=["prefill-busy", "prefill-asleep"]
)
def test_an_idle_decode_keeps_one_replica_while_its_prefill_serves(
    peer_desired: int, kept: int
) -> None:
    world = World(ready=1, bounds=(1, 1))
    _idle_decode(world)
    world.policies.add(_peer(peer_desired))
    found = world.tick(T0)
    assert found.desired == kept
    assert world.policies.status_writes[-1]["desired"] == kept
    found_revision = world.revisions.get(NS, REV)
    assert found_revision is not None
    assert found_revision["metadata"]["annotations"][MIN_SCALE] == str(kept)
