"""Leader election by kopf peering: who acts, and what /readyz says (leader and standby are
ready; a replica out of the election is not)."""

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


@pytest.mark.parametrize(
    ("started", "peers", "role"),
    [
        (False, None, None),
        (False, {"me": peer(10)}, None),
        (True, None, "leading"),  # standalone
        (True, {"me": peer(10)}, "leading"),
        (True, {"me": peer(10), "x": peer(5)}, "leading"),
        (True, {"me": peer(10), "x": peer(99)}, "standby"),  # takes over when x's keep-alive ends
        (True, {"me": peer(10), "x": peer(99, seen_ago=120)}, "leading"),
        (True, {"me": peer(10), "x": peer(10)}, None),  # kopf pauses both on a tie
        (True, {"x": peer(99)}, None),  # our own keep-alive has not landed
        (True, {"me": peer(10, seen_ago=61)}, None),
        (True, {}, None),  # the peering object unreadable or absent
    ],
    ids=["not-started", "not-started-in-peering", "standalone", "alone", "outranks", "outranked",
         "expired-rival", "tie", "not-yet-seen", "own-expired", "empty"],
)  # fmt: skip
def test_ready_once_kopf_started_while_leading_or_standing_by(
    started: bool, peers: dict[str, Any] | None, role: str | None
) -> None:
    replica = readiness(started=started, peers=peers)
    assert replica.role() == role
    assert replica.ready() is (role is not None)


def answer(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as got:
            return int(got.status), got.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_readyz_answers_200_with_the_role_and_503_without_one() -> None:
    state: dict[str, str | None] = {"role": None}
    server = serve_readiness(port=0, role=lambda: state["role"], host="127.0.0.1")
    port = server.server_address[1]
    try:
        assert answer(port, "/readyz") == (503, "not ready\n")
        state["role"] = "standby"
        assert answer(port, "/readyz") == (200, "standby\n")
        state["role"] = "leading"
        assert answer(port, "/readyz") == (200, "leading\n")
        assert answer(port, "/elsewhere")[0] == 404
    finally:
        server.shutdown()
