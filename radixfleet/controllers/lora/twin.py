"""The LoRA controller in the fleet twin: `decide()` keeping each replica's adapters by demand,
under adapter-aware routing.

A scenario names it as its routing policy, `adapter_dynamic` (the controller's plug-in gives the
twin the name; the twin imports no controller): smg's cache-aware routing among the replicas
holding a request's adapter, loading on demand where none does (`adapter_aware`,
radixfleet/twin/lora_routing.py), plus :class:`DecideKeeper`, which every `tick_s` hands
`radixfleet.controllers.lora.decide.decide` the replicas' adapters and the demand the router
counted since the previous tick, exactly as the controller reads them from the replicas and
Prometheus, and lets the twin apply its load and unload actions.

In the twin one tenant owns the model's base and every adapter is shared (the scenario has no
owners); nothing waits for an adapter outside a replica (an on-demand load is sent at once), so
each adapter's `waiting` is 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from radixfleet.controllers.lora.decide import decide
from radixfleet.controllers.lora.observed import Demand, Observed, Replica
from radixfleet.controllers.lora.spec import AdapterPolicy
from radixfleet.twin.lora import adapter_name
from radixfleet.twin.lora_routing import (
    AdapterAction,
    AdapterDemand,
    AdapterRouting,
    HeldAdapters,
    Holders,
)
from radixfleet.twin.registry import PolicyContext, adapter_routing

#: How often the controller looks at a model's adapters (its kopf timer).
TICK_S = 10.0
#: The tenant of the twin's one base (the scenario's adapters have no owners).
TENANT = "twin"


class DecideKeeper:
    """The controller's `decide()` as the twin's keeper (an AdapterKeeper)."""

    def __init__(
        self, adapters: Sequence[str], policy: AdapterPolicy | None = None, tick_s: float = TICK_S
    ) -> None:
        self.policy = policy or AdapterPolicy()
        self.tick_s = tick_s
        self.owners: dict[str, str | None] = dict.fromkeys(adapters)
        self.halted = 0

    def keep(
        self, held: Sequence[HeldAdapters], demand: Sequence[AdapterDemand], now: float
    ) -> list[AdapterAction]:
        """One pass of the controller over the replicas: its load and unload actions."""
        decision = decide(self.observe(held, demand), self.policy, now)
        if decision.halted is not None:
            self.halted += 1
        return [AdapterAction(a.verb, int(a.replica), a.adapter) for a in decision.actions]

    def observe(self, held: Sequence[HeldAdapters], demand: Sequence[AdapterDemand]) -> Observed:
        """What the controller would read of the replicas and of Prometheus."""
        replicas = tuple(
            Replica(
                name=str(h.worker),
                tenant=TENANT,
                max_loaded=h.max_loaded,
                loaded=h.loaded,
                running=h.running,
            )
            for h in held
        )
        wanted = tuple(
            Demand(TENANT, d.adapter, rps=d.rps, last_request_at=d.last_request_at) for d in demand
        )
        return Observed(replicas=replicas, demand=wanted, owners=self.owners)


def adapter_dynamic(ctx: PolicyContext) -> AdapterRouting:
    """Adapter-aware routing with the controller keeping adapters by demand."""
    assert ctx.model is not None, "a routing policy is built for its model"
    lora = ctx.model.lora
    names = [adapter_name(rank) for rank in range(lora.adapters if lora else 0)]
    return adapter_routing(ctx, Holders(ctx.scenario.router), keeper=DecideKeeper(names))
