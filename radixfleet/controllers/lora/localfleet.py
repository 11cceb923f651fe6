"""The LoRA controller on the local fleet: the same decision over a LoRA model's replicas on
loopback.

`LocalFleetAdapterPlacer` is the local fleet's `AdapterPlacer` (radixfleet/localfleet/lora.py):
a request waits for an adapter no replica holds, and `decide.place` says where it goes.
`LocalFleetAdapters.tick` is one periodic pass: observe each LoRA model's replicas and demand from
its `AdapterRouter`, `decide`, and act through the router's `apply` (SGLang's load and unload
API; idempotent, and an unload a request started under since is skipped). Both run on the fleet's
event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from radixfleet.controllers.lora.decide import decide, place
from radixfleet.controllers.lora.observed import Action, Decision, Demand, Observed, Replica
from radixfleet.controllers.lora.spec import AdapterPolicy
from radixfleet.localfleet.lora import (
    AdapterAction,
    AdapterDemand,
    AdapterError,
    AdapterRouter,
    Holding,
)
from radixfleet.localfleet.spec import ModelSpec


def observed(
    model: ModelSpec, holdings: Sequence[Holding], demand: Sequence[AdapterDemand] | None
) -> Observed:
    """The decision's view of one LoRA model: its ready replicas (each its tenant's base) and
    its adapters' demand (None: not read, and the decision halts)."""
    tenant = model.tenant
    replicas = tuple(Replica(h.replica, tenant, model.max_loaded_loras, h.loaded, h.running)
                     for h in holdings)  # fmt: skip
    wanted = None if demand is None else tuple(
        Demand(tenant, d.adapter, d.rps, d.waiting, d.last_request_at) for d in demand
    )  # fmt: skip
    owners = {a.name: a.tenant for a in model.lora_adapters}
    return Observed(replicas, wanted, owners)


def as_actions(actions: Iterable[Action]) -> list[AdapterAction]:
    return [AdapterAction(a.verb, a.replica, a.adapter) for a in actions]


@dataclass(frozen=True)
class LocalFleetAdapterPlacer:
    """Where a request's adapter loads: the decision's `place`, under the fleet's policy."""

    policy: AdapterPolicy = field(default_factory=AdapterPolicy)

    def place(
        self, model: ModelSpec, holdings: Sequence[Holding], demand: Sequence[AdapterDemand],
        *, adapter: str, now: float,
    ) -> list[AdapterAction]:  # fmt: skip
        seen = observed(model, holdings, demand)
        return as_actions(place(seen, self.policy, now, tenant=model.tenant, adapter=adapter))


@dataclass
class LocalFleetAdapters:
    """The periodic LoRA controller over a region's LoRA models."""

    routers: Mapping[str, AdapterRouter]
    policy: AdapterPolicy = field(default_factory=AdapterPolicy)
    interval_s: float = 2.0
    decisions: list[Decision] = field(default_factory=list)

    async def tick(self, now: float | None = None) -> list[Decision]:
        """One pass over every LoRA model: decide, then act."""
        now = time.time() if now is None else now
        made = []
        for router in self.routers.values():
            seen = observed(router.model, router.holdings(), router.demand(now))
            decision = decide(seen, self.policy, now)
            with contextlib.suppress(AdapterError):  # a replica refused: the next pass sees why
                await router.apply(as_actions(decision.actions))
            made.append(decision)
        self.decisions.extend(made)
        return made

    async def run(self, stop: threading.Event) -> None:
        """Tick every `interval_s` until `stop` is set (from any thread)."""
        while not stop.is_set():
            await self.tick()
            await asyncio.sleep(self.interval_s)
