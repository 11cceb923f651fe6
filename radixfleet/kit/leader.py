"""Leader election by kopf peering, and whether this replica is the one acting.

Why kopf peering rather than a coordination.k8s.io Lease: kopf already runs a peering protocol
that *pauses every handler* (timers, event watches) of an operator while a live peer with a
higher priority exists, and resumes them when that peer's keep-alive expires. A Lease would
need our own election loop and a way to stop and start kopf's watches around it, which kopf
does not offer; with peering the "who acts" rule sits where the handlers are. The costs, both
accepted: a takeover waits for the old leader's keep-alive to expire (`LIFETIME_SECONDS`), and
two replicas with the same priority would both pause, so each replica draws its own priority
(`peering_priority`). A brief overlap is harmless: every action is idempotent and decided from
the status. Peering needs the `ClusterKopfPeering` CRD (kopf's, kept as data beside this module
and rendered to deploy/crds/) and one object named `PEERING_NAME`; `radixfleet operator run
--standalone` runs without them.

`/readyz` is ready while this replica stands in the election: kopf has started and (with
peering) the replica's own keep-alive is live in the peering object's status with no live peer
tied with it, so it either leads or takes over once the leader's keep-alive ends
(`role_in`). Leadership is not readiness: a Deployment's rollout, and pulumi-kubernetes' await
of it, want every replica Ready, and a standby that is up and able to take over is all that
its readiness can promise. Which replica leads is the answer's body (`leading`, `standby`).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

PEERING_NAME = "radixfleet"
PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL = "kopf.dev", "v1", "clusterkopfpeerings"
PRIORITY_ENV = "RADIXFLEET_PEERING_PRIORITY"
IDENTITY_ENV = "POD_NAME"
LIFETIME_SECONDS = 60

Role = Literal["leading", "standby"]


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
    return role_in(peers, identity=identity, priority=priority, now=now) == "leading"


def role_in(
    peers: Mapping[str, Mapping[str, Any]], *, identity: str, priority: int, now: datetime
) -> Role | None:
    """`identity`'s part in the peering: it leads (no live peer ranks as high), it stands by
    (a live peer outranks it: kopf resumes it once that peer's keep-alive ends), or none.

    None when its own keep-alive is not live (kopf has not joined, or cannot write the status)
    or a live peer has its priority: kopf pauses both on a tie, so neither would ever act.
    """
    live = {name: info for name, info in peers.items() if _alive(info, now)}
    if identity not in live:
        return None
    rivals = [int(info.get("priority", 0)) for name, info in live.items() if name != identity]
    if priority in rivals:
        return None
    return "leading" if all(rival < priority for rival in rivals) else "standby"


def _alive(info: Mapping[str, Any], now: datetime) -> bool:
    seen = info.get("lastseen")
    if seen is None:
        return False
    lifetime = timedelta(seconds=int(info.get("lifetime", LIFETIME_SECONDS)))
    return datetime.fromisoformat(str(seen)) + lifetime > now


class PeeringReadiness:
    """`role()` for /readyz: None until kopf is up; then this replica's part in the peering
    (a standalone replica leads)."""

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

    def role(self) -> Role | None:
        if not self.started():
            return None
        if self.peers is None:  # standalone: no peers to defer to
            return "leading"
        return role_in(
            self.peers(), identity=self.identity, priority=self.priority, now=self.clock()
        )

    def ready(self) -> bool:
        return self.role() is not None


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
