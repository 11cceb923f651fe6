"""Leader election by kopf peering: who acts, and what /readyz says."""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from radixfleet.kit.health import serve_readiness
from radixfleet.kit.leader import PeeringReadiness, is_leader, peering_identity, peering_priority

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def peer(priority: int, *, seen_ago: float = 5, lifetime: int = 60) -> dict[str, Any]:
    lastseen = (NOW - timedelta(seconds=seen_ago)).isoformat()
    return {"priority": priority, "lifetime": lifetime, "lastseen": lastseen}


@pytest.mark.parametrize(
    ("peers", "leads"),
    [
        ({"me": peer(10)}, True),
        ({"me": peer(10), "other": peer(5)}, True),
        ({"me": peer(10), "other": peer(50)}, False),
        ({"me": peer(10), "other": peer(10)}, False),  # kopf pauses both on a tie
        ({"me": peer(10), "other": peer(50, seen_ago=120)}, True),  # its keep-alive expired
        ({"other": peer(5)}, False),  # our own keep-alive has not landed yet
        ({"me": peer(10, seen_ago=61)}, False),
        ({}, False),
    ],
    ids=["alone", "outranks", "outranked", "tie", "expired-rival", "not-yet-seen", "own-expired",
         "empty"],
)  # fmt: skip
def test_who_leads(peers: dict[str, Any], leads: bool) -> None:
    assert is_leader(peers, identity="me", priority=10, now=NOW) is leads


def test_priority_and_identity_from_the_environment_or_random() -> None:
    assert peering_priority({"RADIXFLEET_PEERING_PRIORITY": "42"}) == 42
    assert peering_priority({}) >= 1
    assert peering_identity({"POD_NAME": "operator-0"}) == "operator-0"
    assert peering_identity({}).startswith("radixfleet-")


def readiness(*, started: bool, peers: dict[str, Any] | None) -> PeeringReadiness:
    return PeeringReadiness(
        started=lambda: started, peers=None if peers is None else (lambda: peers),
        identity="me", priority=10, clock=lambda: NOW,
    )  # fmt: skip


def test_ready_only_once_kopf_started_and_while_leading() -> None:
    assert not readiness(started=False, peers=None).ready()
    assert readiness(started=True, peers=None).ready()  # standalone
    assert readiness(started=True, peers={"me": peer(10)}).ready()
    assert not readiness(started=True, peers={"me": peer(10), "x": peer(99)}).ready()


def status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_readyz_answers_200_while_ready_and_503_otherwise() -> None:
    state = {"ready": False}
    server = serve_readiness(port=0, ready=lambda: state["ready"], host="127.0.0.1")
    port = server.server_address[1]
    try:
        assert status(port, "/readyz") == 503
        state["ready"] = True
        assert status(port, "/readyz") == 200
        assert status(port, "/elsewhere") == 404
    finally:
        server.shutdown()
