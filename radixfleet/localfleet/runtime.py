"""What a started local fleet is made of, and the waits its parts share: a region's entry, routers
and replica sets (`RegionRuntime`), a model's revisions (`Revision`, `RevisionStatus`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from aiohttp import web

from radixfleet.localfleet.entry import RegionEntry
from radixfleet.localfleet.pairs import PairSet
from radixfleet.localfleet.replicas import ReplicaSet
from radixfleet.localfleet.router import RouterGroup
from radixfleet.localfleet.scaler import ReplicaState
from radixfleet.localfleet.spec import ModelSpec, RegionSpec
from radixfleet.twin.interfaces import Prewarmer

T = TypeVar("T")
# (region, model) -> what pre-warms the model's new replicas there, or None.
PrewarmerFactory = Callable[[str, ModelSpec], Prewarmer | None]
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0


class LocalFleetError(RuntimeError):
    """The fleet could not start (the message says which part and shows its log)."""


@dataclass(frozen=True)
class Revision:
    """One revision of a model in a region: its own router and replicas."""

    name: str
    router: RouterGroup
    replicas: ReplicaSet


@dataclass(frozen=True)
class RevisionStatus:
    """A model's revisions in a region, as KServe's predictor status would tell them."""

    stable: str
    canary: str | None
    canary_percent: int
    canary_ready: int
    baseline_ready: int | None = None  # the canary's baseline's ready replicas, while one runs

    @property
    def latest(self) -> str:
        """The newest revision: the canary while there is one."""
        return self.canary or self.stable


@dataclass
class RegionRuntime:
    """A started region: its entry, and per model its router and replica set."""

    spec: RegionSpec
    entry: RegionEntry | None = None
    entry_url: str = ""
    runner: web.AppRunner | None = None
    routers: dict[str, RouterGroup] = field(default_factory=dict)  # per model: the stable's
    sets: dict[str, ReplicaSet] = field(default_factory=dict)  # per model: the stable revision's
    pairs: dict[str, PairSet] = field(default_factory=dict)  # per P/D model: its two roles' sets
    canaries: dict[str, Revision] = field(default_factory=dict)
    baselines: dict[str, Revision] = field(default_factory=dict)  # the stable's, beside a canary
    retiring: list[Revision] = field(default_factory=list)  # draining, then stopped
    generations: dict[str, int] = field(default_factory=dict)  # per model: the newest revision
    baselines_started: int = 0

    def role_sets(self) -> list[tuple[str, ReplicaSet]]:
        """(model, replica set) of each P/D model's prefill and decode roles."""
        return [(name, role) for name, pair in self.pairs.items() for role in pair.roles]

    def side_revisions(self) -> list[Revision]:
        """Every replica set beside the stable ones: canaries, baselines, those being retired."""
        return [*self.canaries.values(), *self.baselines.values(), *self.retiring]


async def call_on_loop(work: Callable[[], None]) -> None:
    """Run `work` on the fleet's loop (what the replica sets touch lives there)."""
    work()


async def until(done: Callable[[], bool], *, timeout_s: float) -> bool:
    """Wait until `done()` holds, polling; False on timeout."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not done():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def settle(replica_set: ReplicaSet | PairSet, target: int, *, timeout_s: float) -> bool:
    """Wait until exactly `target` replicas exist and all are ready (a pair's: of each role)."""
    sets = replica_set.roles if isinstance(replica_set, PairSet) else (replica_set,)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        if all(_settled(one, target) for one in sets):
            return True
        await asyncio.sleep(0.05)
    return False


def _settled(replica_set: ReplicaSet, target: int) -> bool:
    infos = replica_set.replicas()
    return len(infos) == target and all(i.state is ReplicaState.READY for i in infos)
