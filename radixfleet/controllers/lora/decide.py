"""Decide which LoRA adapters each replica of a LoRA model keeps loaded; pure.

`decide(observed, policy, now)` returns load and unload actions. Rules, in order:

1. Halt on missing metrics: without the demand (`Observed.demand` None) nothing is unloaded
   or loaded, as the autoscaler and the canary halt on a missing series.
2. A tenant's base holds only that tenant's adapters and the shared ones: an adapter of another
   tenant, or one the catalog does not name, is unloaded (and never loaded) unless a request runs
   on it (it is then left to finish, and unloaded on a later pass).
3. Each adapter wants `ceil(rps / rps_per_copy)` copies, at least one while requests wait for it
   or run on it, at most one per replica. It gains copies up to that; it loses them only when
   its demand would fit, with `keep_band` to spare, in fewer (hysteresis), down to none once it
   has had no request for `idle_unload_s`.
4. A copy never leaves a replica while requests run on it there, nor while it is the last copy of
   an adapter requests wait for; a copy younger than `min_hold_s` stays unless a waiting request
   needs its slot.
5. New copies go first to adapters that requests wait for and no replica holds (on demand), then
   by rate; each to the replica with a free slot and the least demand on it, else into the slot
   of its coldest adapter that may leave (for a copy not urgently needed, only one colder).
   A replica never holds more than its `max_loaded`.

The local fleet's request path calls `place()` for one adapter that a request waits for: the same
choice, for one copy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from radixfleet.controllers.lora.observed import (
    Action,
    Decision,
    Demand,
    Observed,
    Replica,
    may_hold,
)
from radixfleet.controllers.lora.pool import Pool
from radixfleet.controllers.lora.spec import AdapterPolicy


def decide(observed: Observed, policy: AdapterPolicy, now: float) -> Decision:
    """The load and unload actions of one pass over one LoRA model's replicas."""
    if observed.demand is None:
        return Decision(halted="the adapters' demand could not be read")
    actions: list[Action] = []
    for tenant, replicas in _by_tenant(observed.replicas).items():
        demand = _demand_of(tenant, observed.demand, observed.owners)
        pool = Pool(replicas, demand, policy, now)
        _drop_foreign(pool, tenant, observed.owners)
        _size(pool, policy, now, owners=observed.owners)
        actions.extend(pool.actions)
    return Decision(actions=tuple(_unloads_first(actions)))


def place(observed: Observed, policy: AdapterPolicy, now: float, *, tenant: str,
          adapter: str) -> tuple[Action, ...]:  # fmt: skip
    """The actions that give `adapter` one copy on `tenant`'s base for a request waiting for it
    (none if a replica holds it already, or if the tenant may not hold it, or no slot is free)."""
    if not may_hold(observed.owners, adapter, tenant):
        return ()
    replicas = tuple(r for r in observed.replicas if r.tenant == tenant)
    known = {d.adapter: d for d in observed.demand or () if d.tenant == tenant}
    waiting = known.get(adapter, Demand(tenant, adapter))
    demand = {**known, adapter: Demand(tenant, adapter, waiting.rps, max(waiting.waiting, 1))}
    pool = Pool(replicas, demand, policy, now)
    if pool.copies(adapter) == 0:
        pool.add_copy(adapter, urgent=True)
    return tuple(_unloads_first(pool.actions))


def _by_tenant(replicas: Iterable[Replica]) -> dict[str, tuple[Replica, ...]]:
    grouped: dict[str, list[Replica]] = {}
    for replica in replicas:
        grouped.setdefault(replica.tenant, []).append(replica)
    return {tenant: tuple(sorted(found, key=lambda r: r.name)) for tenant, found in grouped.items()}


def _demand_of(
    tenant: str, demand: Iterable[Demand], owners: Mapping[str, str | None]
) -> dict[str, Demand]:
    """The tenant's demand for adapters its base may hold (a request for another's adapter is
    refused at the front and never counted here; if one were, it is ignored)."""
    return {d.adapter: d for d in demand
            if d.tenant == tenant and may_hold(owners, d.adapter, tenant)}  # fmt: skip


def _drop_foreign(pool: Pool, tenant: str, owners: Mapping[str, str | None]) -> None:
    for replica in pool.replicas:
        for adapter in list(pool.held[replica.name]):
            if not may_hold(owners, adapter, tenant) and not replica.busy_with(adapter):
                pool.unload(replica.name, adapter)


def _size(
    pool: Pool, policy: AdapterPolicy, now: float, *, owners: Mapping[str, str | None]
) -> None:
    """Bring each adapter's copies to its target: urgent ones first, then by rate."""
    held = {a for loaded in pool.held.values() for a in loaded}
    tenant = pool.replicas[0].tenant
    adapters = {a for a in set(pool.demand) | held if may_hold(owners, a, tenant)}
    targets = {a: _target(pool, a, policy, now) for a in adapters}
    for adapter in sorted(adapters):
        pool.drop_copies(adapter, pool.copies(adapter) - targets[adapter])
    for adapter in sorted(adapters):  # on demand: a first copy for what requests wait for
        if pool.needed(adapter) and pool.copies(adapter) == 0:
            pool.add_copy(adapter, urgent=True)
    for adapter in sorted(adapters, key=lambda a: (-pool.rps(a), a)):
        for _ in range(targets[adapter] - pool.copies(adapter)):
            if not pool.add_copy(adapter, urgent=False):
                break


def _target(pool: Pool, adapter: str, policy: AdapterPolicy, now: float) -> int:
    """How many copies `adapter` should have after this pass (rule 3): `up` to grow to; a
    count above it is kept while the demand, with `keep_band` to spare, still needs it."""
    demand = pool.demand.get(adapter)
    rps = demand.rps if demand else 0.0
    floor = 1 if pool.needed(adapter) or rps > 0 or not _idle(demand, policy, now) else 0
    up = max(floor, math.ceil(rps / policy.rps_per_copy))
    keep = max(up, math.ceil(rps * (1 + policy.keep_band) / policy.rps_per_copy))
    have = pool.copies(adapter)
    wanted = up if have < up else min(have, keep)
    return min(wanted, len(pool.replicas))


def _idle(demand: Demand | None, policy: AdapterPolicy, now: float) -> bool:
    last = None if demand is None else demand.last_request_at
    return last is None or now - last >= policy.idle_unload_s


def _unloads_first(actions: Iterable[Action]) -> list[Action]:
    """Unloads before loads, each kept in the order planned (a load may take a freed slot)."""
    ordered = list(actions)
    return [a for a in ordered if a.verb == "unload"] + [a for a in ordered if a.verb == "load"]
