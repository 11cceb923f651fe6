"""Chaos: what goes wrong in a real fleet, on demand (faults, crashes, killed processes, an
entry restarted, a region taken down and brought back)."""

from __future__ import annotations

import signal
from typing import Any

from radixfleet.localfleet.core import LocalFleetCore
from radixfleet.localfleet.replicas import ReplicaSet
from radixfleet.localfleet.runtime import (
    STOP_TIMEOUT_S,
    RegionRuntime,
    call_on_loop,
    until,
)


class LocalFleetChaos(LocalFleetCore):
    """What goes wrong in a real fleet, on demand."""

    def set_faults(
        self,
        region: str,
        model: str,
        *,
        replica: str | None = None,
        revision: str | None = None,
        hung: bool = False,
        slowdown: float = 1.0,
        error_rate: float = 0.0,
    ) -> None:
        """Inject faults (emulator faults API) in one replica, or in every replica of the model's
        stable revision, or of `revision`."""
        body = {"hung": hung, "slowdown": slowdown, "error_rate": error_rate}
        self.run(
            self._post_replicas(
                region, model, "/_radixfleet/faults", body, only=replica, revision=revision
            )
        )

    def crash(
        self, region: str, model: str, *, replica: str, restart_after: float | None = None
    ) -> None:
        """Crash a replica (it drops connections; restarts after `restart_after` seconds)."""
        body = {"restart_after": restart_after}
        self.run(self._post_replicas(region, model, "/_radixfleet/crash", body, only=replica))

    async def _post_replicas(
        self,
        region: str,
        model: str,
        path: str,
        body: dict[str, Any],
        *,
        only: str | None,
        revision: str | None = None,
    ) -> None:
        assert self._session is not None
        replica_set = self._revision_set(region, model, revision)
        targets = [r for r in replica_set.replicas() if only in (None, r.id)]
        if only is not None and not targets:
            raise KeyError(f"no replica {only!r} of {model} in {region}")
        for replica in targets:
            async with self._session.post(replica.url + path, json=body) as answer:
                answer.raise_for_status()

    def _revision_set(self, region: str, model: str, revision: str | None) -> ReplicaSet:
        stable = self.scaler(region, model)
        if revision is None or revision == stable.revision:
            return stable
        canary = self.regions[region].canaries.get(model)
        if canary is None or canary.name != revision:
            raise KeyError(f"no revision {revision!r} of {model} in {region}")
        return canary.replicas

    def kill_replica(self, region: str, model: str, replica: str) -> None:
        """SIGKILL one replica's process (an OOM kill, a lost node); its set replaces it."""
        self.run(call_on_loop(lambda: self.scaler(region, model).kill(replica)))

    def kill_router(self, region: str, model: str, *, member: int = 0) -> None:
        """SIGKILL one of the model's stable routers; its replica set starts it again."""
        self.regions[region].routers[model].members[member].child.signal_group(signal.SIGKILL)

    def restart_entry(self, region: str) -> None:
        """Restart `region`'s entry as a Deployment's rolling update does: a new entry listens
        on the same address first (SO_REUSEPORT, as a surge pod joins the Service), then the old
        one stops accepting, lets the requests it holds finish (up to STOP_TIMEOUT_S), and goes.
        What the new entry knows of routers and canary splits is what an entry in a cluster
        reads again from the InferenceServices; the gate (token budgets) is the same object, so
        its ledger survives here, where a new entry pod would start its buckets full (at most
        one burst above the budget)."""
        self.run(self._restart_entry(self.regions[region]), timeout_s=STOP_TIMEOUT_S * 2)

    async def _restart_entry(self, region: RegionRuntime) -> None:
        old, old_runner = region.entry, region.runner
        assert old is not None and old_runner is not None
        await self._start_entry(region, port=old_runner.addresses[0][1])
        assert region.entry is not None
        region.entry.scalers, region.entry.routers = old.scalers, old.routers
        region.entry.canaries, region.entry.accepting = old.canaries, old.accepting
        for site in list(old_runner.sites):
            await site.stop()  # no new connection; requests already held carry on
        await until(lambda: sum(old.in_flight.values()) == 0, timeout_s=STOP_TIMEOUT_S)
        await old_runner.cleanup()

    def stop_region(self, region: str) -> None:
        """Take a region down: its entry answers 503 and every model scales to zero."""
        runtime = self.regions[region]

        async def act() -> None:
            assert runtime.entry is not None
            runtime.entry.accepting = False
            for replica_set in runtime.sets.values():
                replica_set.scale_to(0)

        self.run(act())

    def start_region(self, region: str, *, wait: bool = True) -> None:
        """Bring a region back: its models return to their initial replica counts."""
        runtime = self.regions[region]
        for name, replica_set in runtime.sets.items():
            self.scale(region, name, replica_set.spec.replicas, wait=wait)
        assert runtime.entry is not None
        runtime.entry.accepting = True
