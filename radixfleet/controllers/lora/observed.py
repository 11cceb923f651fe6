"""What the LoRA controller sees and what it asks for: plain, frozen types the local fleet, the
twin and the cluster's adapter all fill in (no client, no clock).

A replica is one pod of a tenant's base (each tenant runs its own base of a LoRA model, so a
replica belongs to exactly one tenant); demand is counted per tenant and adapter, because the
same shared adapter is served by each tenant's own base.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Verb = Literal["load", "unload"]


@dataclass(frozen=True)
class Replica:
    """One replica of a tenant's base: its bound (SGLang's `--max-loaded-loras`), the adapters it
    holds with when each was loaded, and its requests running or queued by adapter."""

    name: str
    tenant: str
    max_loaded: int
    loaded: Mapping[str, float] = field(default_factory=dict)  # adapter -> loaded at (s)
    running: Mapping[str, int] = field(default_factory=dict)  # adapter -> requests on it

    def busy_with(self, adapter: str) -> bool:
        return self.running.get(adapter, 0) > 0


@dataclass(frozen=True)
class Demand:
    """One adapter's demand on one tenant's base: its recent request rate, the requests held
    waiting for a holder, and when it was last asked for (None: never)."""

    tenant: str
    adapter: str
    rps: float = 0.0
    waiting: int = 0
    last_request_at: float | None = None


@dataclass(frozen=True)
class Observed:
    """The replicas of one LoRA model, the demand for its adapters, and its adapters' owners
    (adapter -> owning tenant; None: shared). `demand` is None when the metrics could not be
    read: the controller then halts instead of unloading what it cannot see used."""

    replicas: tuple[Replica, ...]
    demand: tuple[Demand, ...] | None
    owners: Mapping[str, str | None]


@dataclass(frozen=True, order=True)
class Action:
    """Load or unload one adapter on one replica (SGLang's `/load_lora_adapter`,
    `/unload_lora_adapter`); each is idempotent where it lands."""

    verb: Verb
    replica: str
    adapter: str


@dataclass(frozen=True)
class Decision:
    """The actions of one pass, unloads first (they free the slots the loads take); `halted`
    says why nothing was decided."""

    actions: tuple[Action, ...] = ()
    halted: str | None = None


def may_hold(owners: Mapping[str, str | None], adapter: str, tenant: str) -> bool:
    """Whether `tenant`'s base may hold `adapter`: its own or a shared one, never another's
    (an adapter the catalog does not name: nobody's)."""
    if adapter not in owners:
        return False
    owner = owners[adapter]
    return owner is None or owner == tenant
