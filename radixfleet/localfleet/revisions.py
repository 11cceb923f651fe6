"""Revisions as KServe's: a canary beside the stable revision at a share of the entry's traffic
(`canaryTrafficPercent`, played by the entry), promotion, a baseline, retirement."""

from __future__ import annotations

import asyncio

from radixfleet.labels import BASELINE_POOL
from radixfleet.localfleet.core import LocalFleetCore
from radixfleet.localfleet.entry import Baseline, Canary
from radixfleet.localfleet.procs import stop_async
from radixfleet.localfleet.replicas import ReplicaSet
from radixfleet.localfleet.runtime import (
    STOP_TIMEOUT_S,
    LocalFleetError,
    RegionRuntime,
    Revision,
    RevisionStatus,
    settle,
    until,
)
from radixfleet.localfleet.spec import revision_name


class LocalFleetRevisions(LocalFleetCore):
    """The fleet's revisions as KServe's: canary, share, promotion, baseline, retirement."""

    def create_revision(
        self,
        region: str,
        model: str,
        *,
        replicas: int | None = None,
        wait: bool = True,
        timeout_s: float = 120.0,
    ) -> str:
        """Start a new revision of `model` beside the stable one, at 0% of its traffic.

        It gets its own router and `replicas` replicas (default: the model's initial count),
        which start cold, as a new Knative revision's pods do. A canary not yet promoted is
        replaced: it is retired. Returns the new revision's name; with `wait`, once its
        replicas are ready.
        """
        work = self._create_revision(region, model, replicas=replicas)
        name, replica_set = self.run(work, timeout_s=60)
        if wait:
            at_least = replica_set.spec.replicas
            ready = self.run(replica_set.wait_ready(at_least=at_least, timeout_s=timeout_s))
            if not ready:
                raise LocalFleetError(f"{name} not ready in {timeout_s:.0f} s; {self._failures()}")
        return name

    async def _create_revision(
        self, region_name: str, model: str, *, replicas: int | None
    ) -> tuple[str, ReplicaSet]:
        assert self._session is not None
        region = self.regions[region_name]
        spec = region.spec.model(model)
        if spec.disaggregation is not None:
            raise LocalFleetError(f"{model} is a prefill/decode pair: it has no canary revisions")
        if replicas is not None:
            spec = spec.model_copy(update={"replicas": replicas})
        region.generations[model] += 1
        # The router starts while the replicas do; they register once it is live.
        router = self._spawn_router(region, revision_name(model, region.generations[model]))
        replica_set = self._replica_set(region, spec, router, warm_start=False)
        previous = region.canaries.pop(model, None)
        if previous is not None:
            self._retire(region, previous)
        region.canaries[model] = Revision(router.revision, router, replica_set)
        entry = self.entry(region_name)
        baseline = entry.canaries[model].baseline if model in entry.canaries else None
        entry.canaries[model] = Canary(
            router.revision, self._pool(region, router), replica_set, baseline=baseline
        )
        self._write_router_targets()
        return router.revision, replica_set

    def set_canary_percent(self, region: str, model: str, percent: int) -> None:
        """Give the canary revision `percent` of the model's requests (0 rolls it back)."""
        if not 0 <= percent <= 100:
            raise ValueError(f"percent must be within 0..100, got {percent}")

        async def act() -> None:
            canary = self.entry(region).canaries.get(model)
            if canary is None:
                raise KeyError(f"{model} in {region} has no canary revision")
            canary.percent = percent

        self.run(act())

    def promote(self, region: str, model: str) -> None:
        """All traffic to the canary, which becomes the stable revision; retire the old one."""

        async def act() -> None:
            runtime = self.regions[region]
            canary = runtime.canaries.pop(model)
            self.entry(region).promote(model)
            router = runtime.routers[model]
            old = Revision(router.revision, router, runtime.sets[model])
            runtime.routers[model], runtime.sets[model] = canary.router, canary.replicas
            self._retire(runtime, old)
            baseline = runtime.baselines.pop(model, None)  # the old revision's too
            if baseline is not None:
                self._retire(runtime, baseline)

        self.run(act())

    def set_baseline(self, region: str, model: str, replicas: int) -> int:
        """Run `replicas` replicas of `model`'s stable revision as its canary's baseline, behind
        a router of their own (0 stops it); returns how many of them are ready.

        The entry sends the baseline as much as the canary once one of them is ready; their
        metrics carry the stable revision's name and `pool="baseline"`. They start cold, as the
        canary's did, so the two are compared at the same load and from the same start.
        """
        if replicas < 0:
            raise ValueError(f"replicas must be at least 0, got {replicas}")
        return self.run(self._set_baseline(region, model, replicas), timeout_s=60)

    async def _set_baseline(self, region_name: str, model: str, replicas: int) -> int:
        region = self.regions[region_name]
        entry = self.entry(region_name)
        running = region.baselines.get(model)
        if replicas == 0:
            if running is not None:
                if model in entry.canaries:
                    entry.canaries[model].baseline = None
                self._retire(region, region.baselines.pop(model))
            return 0
        if model not in entry.canaries:
            raise KeyError(f"{model} in {region_name} has no canary for a baseline to stand beside")
        if running is None:
            running = self._start_baseline(region, model, replicas)
            entry.canaries[model].baseline = Baseline(
                self._pool(region, running.router), running.replicas
            )
        running.replicas.scale_to(replicas)
        return running.replicas.ready_count()

    def _start_baseline(self, region: RegionRuntime, model: str, replicas: int) -> Revision:
        stable = region.sets[model].revision
        spec = region.spec.model(model).model_copy(update={"replicas": replicas})
        # Each baseline's processes are named apart: the last one may still be draining.
        region.baselines_started += 1
        tag = f"{BASELINE_POOL}{region.baselines_started}"
        router = self._spawn_router(region, stable, pool=BASELINE_POOL, tag=tag)
        replica_set = self._replica_set(
            region, spec, router, warm_start=False, pool=BASELINE_POOL, tag=tag
        )
        region.baselines[model] = Revision(stable, router, replica_set)
        self._write_router_targets()
        return region.baselines[model]

    def revisions(self, region: str, model: str) -> RevisionStatus:
        """The model's stable and canary revisions, and the canary's share and readiness."""

        async def read() -> RevisionStatus:
            runtime = self.regions[region]
            canary = runtime.canaries.get(model)
            baseline = runtime.baselines.get(model)
            split = self.entry(region).canaries.get(model)
            return RevisionStatus(
                stable=runtime.sets[model].revision,
                canary=None if canary is None else canary.name,
                canary_percent=0 if split is None else split.percent,
                canary_ready=0 if canary is None else canary.replicas.ready_count(),
                baseline_ready=None if baseline is None else baseline.replicas.ready_count(),
            )

        return self.run(read())

    def _retire(self, region: RegionRuntime, revision: Revision) -> None:
        """Stop a revision the entry no longer routes to, once no request to it is left."""
        region.retiring.append(revision)
        entry = self.entry(region.spec.name)

        async def retire() -> None:
            # Requests already sent to its router must find its replicas there: scaling down
            # first deregisters them, and the router would answer 503 with no worker left.
            await until(lambda: entry.in_flight_by_router[revision.router.url] == 0,
                         timeout_s=STOP_TIMEOUT_S)  # fmt: skip
            revision.replicas.scale_to(0)
            await settle(revision.replicas, 0, timeout_s=STOP_TIMEOUT_S)
            await revision.replicas.close()
            await asyncio.gather(*(stop_async(self.supervisor, member.child, grace_s=3.0)
                                   for member in revision.router.members))  # fmt: skip
            region.retiring.remove(revision)
            self._write_replica_targets()
            self._write_router_targets()

        self._tasks.append(asyncio.get_running_loop().create_task(retire()))
