"""Leader election by kopf peering, and whether this replica is the one acting.

Why kopf peering rather than a coordination.k8s.io Lease: kopf already runs a peering protocol
that *pauses every handler* (timers, event watches) of an operator while a live peer with a
higher priority exists, and resumes them when that peer's keep-alive expires. A Lease would
need our own election loop and a way to stop and start kopf's watches around it, which kopf
does not offer; with peering the "who acts" rule sits where the handlers are. The costs, both
accepted: a takeover waits for the old leader's keep-alive to expire (`LIFETIME_SECONDS`), and
two replicas with the same priority would both pause, so each replica draws its own priority
(`peering_priority`). A brief overlap is harmless: every action is idempotent and decided from
the status. Peering needs the `ClusterKopfPeering` CRD and one object named `PEERING_NAME`
(radixfleet/crds/); `radixfleet operator run --standalone` runs without them.

`/readyz` is ready only while this replica's handlers run: kopf has started, and (with peering)
no live peer outranks it in the peering object's status, which `is_leader` reads.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

PEERING_NAME = "radixfleet"
PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL = "kopf.dev", "v1", "clusterkopfpeerings"
PRIORITY_ENV = "RADIXFLEET_PEERING_PRIORITY"
IDENTITY_ENV = "POD_NAME"
LIFETIME_SECONDS = 60


def peering_priority(environ: Mapping[str, str] | None = None) -> int:
    """This replica's kopf peering priority: from the environment, else a random one."""
    value = (environ if environ is not None else os.environ).get(PRIORITY_ENV)
    return int(value) if value else random.randint(1, 1_000_000)


def peering_identity(environ: Mapping[str, str] | None = None) -> str:
    """This replica's name among its peers: the pod's name (downward API), else a random one."""
    value = (environ if environ is not None else os.environ).get(IDENTITY_ENV)
    return value or f"radixfleet-{random.randint(0, 1 << 32):08x}"


def is_leader(
    peers: Mapping[str, Mapping[str, Any]], *, identity: str, priority: int, now: datetime
) -> bool:
    """Whether `identity` acts: its own keep-alive is live and no live peer ranks as high.

    `peers` is the peering object's status, `{identity: {priority, lifetime, lastseen}}`, as
    kopf writes it. kopf pauses an operator for a higher priority and for an equal one.
    """
    live = {name: info for name, info in peers.items() if _alive(info, now)}
    if identity not in live:
        return False
    return all(
        int(info.get("priority", 0)) < priority for name, info in live.items() if name != identity
    )


def _alive(info: Mapping[str, Any], now: datetime) -> bool:
    seen = info.get("lastseen")
    if seen is None:
        return False
    lifetime = timedelta(seconds=int(info.get("lifetime", LIFETIME_SECONDS)))
    return datetime.fromisoformat(str(seen)) + lifetime > now


class PeeringReadiness:
    """`ready()` for /readyz: kopf is up and this replica leads (or runs standalone)."""

    def __init__(
        self,
        *,
        started: Callable[[], bool],
        peers: Callable[[], Mapping[str, Mapping[str, Any]]] | None,
        identity: str,
        priority: int,
        clock: Callable[[], datetime],
    ) -> None:
        self.started, self.peers = started, peers
        self.identity, self.priority, self.clock = identity, priority, clock

    def ready(self) -> bool:
        if not self.started():
            return False
        if self.peers is None:  # standalone: no peers to defer to
            return True
        return is_leader(
            self.peers(), identity=self.identity, priority=self.priority, now=self.clock()
        )


def kube_peers(api_client: Any, *, name: str = PEERING_NAME) -> Callable[[], Mapping[str, Any]]:
    """Reads the ClusterKopfPeering's status (an unreadable one: no peers known, not ready)."""
    from kubernetes import client

    from radixfleet.kit.errors import KubeError
    from radixfleet.kit.kube import absent_as_none, as_dict

    api = client.CustomObjectsApi(api_client)

    def read() -> Mapping[str, Any]:
        try:
            found = absent_as_none(
                f"get {PEERING_PLURAL} {name}",
                lambda: api.get_cluster_custom_object(
                    PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL, name
                ),
            )
        except KubeError:
            return {}
        return dict(as_dict(found).get("status") or {}) if found is not None else {}

    return read
