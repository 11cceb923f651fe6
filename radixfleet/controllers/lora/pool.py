"""One tenant's replicas while a pass plans: what each will hold, and where a copy goes or leaves.

The decision (decide.py) says how many copies each adapter wants; this module picks the
replicas: a new copy goes to the replica with a free slot and the least demand on it (load
spread evenly), else it takes the slot of the coldest adapter that may go; a copy leaves the
busiest replica first. Nothing here reads a clock: `now` comes with the pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from radixfleet.controllers.lora.observed import Action, Demand, Replica
from radixfleet.controllers.lora.spec import AdapterPolicy


@dataclass
class Pool:
    """A tenant's replicas and what the pass has planned for them so far."""

    replicas: tuple[Replica, ...]
    demand: Mapping[str, Demand]
    policy: AdapterPolicy
    now: float
    held: dict[str, dict[str, float]] = field(init=False)  # replica -> adapter -> loaded at
    actions: list[Action] = field(default_factory=list)
    planned: set[tuple[str, str]] = field(default_factory=set)  # (replica, adapter) loaded now

    def __post_init__(self) -> None:
        self.held = {r.name: dict(r.loaded) for r in self.replicas}
        self._by_name = {r.name: r for r in self.replicas}

    def copies(self, adapter: str) -> int:
        return sum(adapter in loaded for loaded in self.held.values())

    def holders(self, adapter: str) -> list[str]:
        return [name for name, loaded in self.held.items() if adapter in loaded]

    def rps(self, adapter: str) -> float:
        found = self.demand.get(adapter)
        return found.rps if found else 0.0

    def load_of(self, replica: str) -> float:
        """The demand a replica carries: each held adapter's rate shared among its copies."""
        return sum(self.rps(a) / self.copies(a) for a in self.held[replica])

    def needed(self, adapter: str) -> bool:
        """Whether the adapter must keep a copy: requests wait for it, or run on a holder."""
        found = self.demand.get(adapter)
        waiting = found is not None and found.waiting > 0
        return waiting or any(r.busy_with(adapter) for r in self.replicas)

    # -- unloading ---------------------------------------------------------------------------

    def may_unload(self, replica: str, adapter: str, *, urgent: bool) -> bool:
        """Never a copy with requests running on it, nor the last copy of one still needed, nor
        one this pass loads; a recent copy only to make room for a request that waits
        (`urgent`)."""
        if self._by_name[replica].busy_with(adapter) or (replica, adapter) in self.planned:
            return False
        if self.needed(adapter) and self.copies(adapter) <= 1:
            return False
        recent = self.now - self.held[replica][adapter] < self.policy.min_hold_s
        return urgent or not recent

    def unload(self, replica: str, adapter: str) -> None:
        del self.held[replica][adapter]
        self.actions.append(Action("unload", replica, adapter))

    def drop_copies(self, adapter: str, count: int) -> None:
        """Unload up to `count` copies of `adapter`, from the busiest replicas first."""
        for replica in sorted(self.holders(adapter), key=lambda r: (-self.load_of(r), r)):
            if count <= 0:
                return
            if self.may_unload(replica, adapter, urgent=False):
                self.unload(replica, adapter)
                count -= 1

    # -- loading -----------------------------------------------------------------------------

    def add_copy(self, adapter: str, *, urgent: bool) -> bool:
        """Load one more copy of `adapter` where it spreads load best; False if no replica has
        a slot to give (every slot busy, recent or hotter, unless `urgent`)."""
        candidates = [r for r in self.replicas if adapter not in self.held[r.name]]
        for replica in sorted(candidates, key=self._preference):
            if self._make_room(replica, adapter, urgent=urgent):
                self.held[replica.name][adapter] = self.now
                self.planned.add((replica.name, adapter))
                self.actions.append(Action("load", replica.name, adapter))
                return True
        return False

    def _preference(self, replica: Replica) -> tuple[bool, float, str]:
        """A free slot before one to empty; then the least demand on the replica."""
        full = len(self.held[replica.name]) >= replica.max_loaded
        return (full, self.load_of(replica.name), replica.name)

    def _make_room(self, replica: Replica, adapter: str, *, urgent: bool) -> bool:
        loaded = self.held[replica.name]
        if len(loaded) < replica.max_loaded:
            return True
        victims = [a for a in loaded if self.may_unload(replica.name, a, urgent=urgent)
                   and (urgent or self.rps(a) < self.rps(adapter))]  # fmt: skip
        if not victims:
            return False
        self.unload(replica.name, min(victims, key=lambda a: (self.rps(a), a)))
        return True
