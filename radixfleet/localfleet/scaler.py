"""The port a controller drives the local fleet's replicas through: one model in one region.

The autoscale controller's act layer (and the entry's wake-from-zero) need only this: how many
replicas are wanted, how many serve, set the count, wait for readiness, and drain one chosen
replica (the cache-aware scale-down picks which). Kept free of I/O so decision code and fakes
can import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class ReplicaState(StrEnum):
    """Where a replica is in its life."""

    STARTING = "starting"  # process started; not yet healthy and registered with the router
    READY = "ready"  # healthy and registered: the router sends it traffic
    STOPPING = "stopping"  # removed from the router, draining, then stopped


@dataclass(frozen=True)
class ReplicaInfo:
    """A replica as a controller sees it."""

    id: str
    url: str
    state: ReplicaState
    started_at: float  # unix seconds
    ready_at: float | None


class Scaler(Protocol):
    """The replicas of one model in one region. Methods run on the fleet's event loop."""

    @property
    def region(self) -> str: ...

    @property
    def model(self) -> str: ...

    def desired(self) -> int:
        """The replica count asked for."""
        ...

    def ready_count(self) -> int:
        """Replicas healthy and registered with the router."""
        ...

    def replicas(self) -> list[ReplicaInfo]:
        """Every replica not yet stopped."""
        ...

    def scale_to(self, replicas: int) -> int:
        """Ask for `replicas` (clamped to the model's bounds); returns the count asked for.

        Returns at once: replicas start or drain in the background.
        """
        ...

    def drain(self, replica_id: str) -> bool:
        """Scale down by one, removing that replica; False when there is no such replica."""
        ...

    async def wait_ready(self, *, at_least: int = 1, timeout_s: float) -> bool:
        """Wait until `at_least` replicas are ready; False on timeout."""
        ...


@runtime_checkable
class PromptRecorder(Protocol):
    """Optional for a Scaler: told each prompt the entry routes to it (for pre-warming)."""

    def record_prompt(self, body: Mapping[str, Any]) -> None: ...


class PairShape(Protocol):
    """A prefill/decode pair's counts, as the pair rule returns them."""

    @property
    def prefill(self) -> int: ...

    @property
    def decode(self) -> int: ...

    @property
    def asleep(self) -> bool: ...


class PairRule(Protocol):
    """The rule that scales a prefill/decode pair as one (the autoscaler's
    `radixfleet/controllers/autoscale/pairs.pair_counts`, given to the local fleet, a host
    below the controllers, as its pre-warmers are)."""

    def __call__(self, *, prefill: int, decode: int, waiting: bool) -> PairShape: ...
