"""A region serving requests: arrivals, the replicas they reach, and each replica's life (placed,
booted, checked, warmed, routed, drained, removed, charged)."""

from __future__ import annotations

import heapq

from radixfleet.replica import (
    HEALTHY,
    EventKind,
    Health,
    RejectedError,
    ReplicaModel,
    Request,
    RequestSpec,
    SchedulePolicy,
)
from radixfleet.twin.log import ReplicaSpan, Status
from radixfleet.twin.region_base import (
    BOOT,
    CHECK,
    NAN,
    REMOVED,
    WAKE,
    WARMED,
    RegionBase,
    waiting_of,
)
from radixfleet.twin.service import (
    CRASHED,
    DRAINING,
    PROVISIONING,
    READY,
    STARTING,
    Job,
    Replica,
    Revision,
    Service,
)


class RegionServing(RegionBase):
    """A region's requests and the life of the replicas that serve them."""

    def _arrive(self, index: int, t: float, model: int, tenant: int, u_revision: float) -> None:
        self._epoch[0] += 1
        job = Job(index, t, self.spec_of(index))
        if self.down:
            self.fail(job, Status.REGION_DOWN, t)
            return
        service = self.services.get(model)
        if service is None:
            self.fail(job, Status.NO_SERVICE, t)
            return
        name, spec = self.tenant_names[tenant], job.spec
        if not self.admission.admit(name, spec.prompt_tokens, t, reserve=spec.max_new_tokens):
            self.fail(job, Status.THROTTLED, t)
            return
        if self._meter is not None:
            self._meter.admitted(index)
            self._metered.add(index)
        service.arrive(job, u_revision, t)

    def track(self, request: Request, job: Job, replica: Replica, service: Service) -> None:
        """A request was accepted by `replica`: follow it and re-plan the replica's wake-up."""
        self._jobs[request] = (job, service)
        self._replan(replica)

    def fail(self, job: Job, status: Status, t: float) -> None:
        """Record a request that got no answer."""
        self._epoch[1] += 1
        self._settle(job, 0, ok=False, t=t)
        spec = job.spec
        self.log.add(
            index=job.index,
            region=self.index,
            revision=job.revision,
            status=status,
            cold=job.cold,
            ttft=NAN,
            itl=NAN,
            prompt=spec.prompt_tokens,
            output=spec.output_tokens,
            cached=0,
            ended=t,
        )

    def _settle(self, job: Job, output_tokens: int, *, ok: bool, t: float) -> None:
        # Every admitted request ends once, in `fail` or `_done`: both settle here, so a budget
        # never keeps a prompt charged for a request that is gone.
        if self._meter is not None and job.index in self._metered:
            self._metered.discard(job.index)
            self._meter.settle(job.index, output_tokens, ok=ok, now=t)

    def _advance(self, replica: Replica, t: float) -> None:
        model = replica.model
        assert model is not None
        for event in model.advance(t):
            if event.kind is EventKind.FIRST_TOKEN:
                continue
            if event.request in self._warming:
                self._warmed(event.request, t)
                continue
            self._done(replica, event.request, t, ok=event.kind is EventKind.FINISHED)
        if replica.state == DRAINING and replica.load == 0:
            self._remove(replica, t)
            return
        self._replan(replica)

    def _done(self, replica: Replica, request: Request, t: float, *, ok: bool) -> None:
        job, service = self._jobs.pop(request)
        revision = service.revisions[job.revision]
        replica.load -= 1
        revision.count(-1, t)
        revision.finished += 1
        spec = job.spec
        service.outcome(replica, ok=ok, now=t)
        if not ok:
            self.fail(job, Status.ABORTED, t)
            if service.window is not None:
                service.window.error(job.revision, t)
            return
        first = request.first_token_at
        ttft = NAN if first is None else first - job.arrival
        itl = request.mean_itl
        itl_value = NAN if itl is None else itl
        if ttft <= service.model.slo.ttft_ms / 1000.0:
            self._epoch[2] += 1
        self._settle(job, spec.output_tokens, ok=True, t=t)
        self.log.add(
            index=job.index,
            region=self.index,
            revision=job.revision,
            status=Status.OK,
            cold=job.cold,
            ttft=ttft,
            itl=itl_value,
            prompt=spec.prompt_tokens,
            output=spec.output_tokens,
            cached=request.cached_tokens,
            ended=t,
            replica_age=replica.age(request.arrival),
            host_cached=request.host_cached_tokens,
            storage_cached=request.storage_cached_tokens,
        )
        if service.window is not None:
            service.window.add(job.revision, t, ttft, itl_value, request.cached_tokens, spec)

    def _replan(self, replica: Replica) -> None:
        model = replica.model
        assert model is not None
        when = model.next_event_time()
        if when != replica.planned:
            replica.planned = when
            if when is not None:
                heapq.heappush(self._heap, (when, next(self._seq), WAKE, replica, None))

    def _add_replica(
        self, service: Service, revision: Revision, t: float, *, boot: bool = True
    ) -> tuple[Replica, float] | None:
        delay = self.pools[service.model.pool].take(
            service.profile.gpu_count, service.profile, running=not boot
        )
        if delay is None:
            return None  # the pool is full: the pod stays Pending until a later tick
        replica = Replica(
            replica_id=next(self._ids), service=service, revision=revision, created_at=t
        )
        revision.replicas.append(replica)
        if boot:
            self._push(t + delay, BOOT, replica)
        return replica, delay

    def _boot(self, replica: Replica, t: float, *, warm: bool) -> None:
        if replica.state != PROVISIONING:
            return  # removed while its node was coming up
        service = replica.service
        model = service.model
        replica.model = ReplicaModel(
            profile=service.profile,
            now=t,
            block_tokens=model.block_tokens,
            schedule_policy=SchedulePolicy(model.schedule_policy),
            warm=warm,
            seed=replica.id,
            host_tier=service.host_tier,
            storage=service.storage,
            lora=service.lora,
        )
        if replica.revision.faults != HEALTHY:
            replica.model.set_faults(replica.revision.faults, now=t)
        replica.state, replica.booted_at = STARTING, t
        if self.down:
            replica.model.crash(now=t)
            replica.state = CRASHED
            return
        self._push(replica.model.ready_at, CHECK, replica)

    def _check(self, replica: Replica, t: float) -> None:
        model = replica.model
        if model is None or replica.state not in (STARTING, CRASHED) or self.down:
            return
        health = model.health(t)
        if health is Health.READY:
            replica.state, replica.ready_at = READY, min(replica.ready_at, t)
            self._warm_up(replica, t)
        elif health is Health.STARTING and model.ready_at > t:
            self._push(model.ready_at, CHECK, replica)

    def _warm_up(self, replica: Replica, t: float) -> None:
        """Send a ready replica its revision's hottest prefixes first, when the scaler
        pre-warms and may hold it back (radixfleet/controllers/autoscale/prewarm); else route it
        now."""
        revision, model = replica.revision, replica.model
        prewarmer = revision.prewarmer
        warm = None
        # A pair's replicas are not pre-warmed: a decode replica runs no prompt.
        if prewarmer is not None and model is not None and not replica.initial and not replica.role:
            kv_blocks = model.profile.kv_capacity_tokens // model.block_tokens
            serving, waiting = len(revision.routable), waiting_of(revision, t)
            warm = prewarmer.warmup(kv_blocks=kv_blocks, serving=serving, waiting=waiting, now=t)
        if warm is None or model is None:
            self._route(replica, t)
            return
        for n, prefix in enumerate(warm.prefixes):
            spec = RequestSpec(
                rid=f"warmup-{replica.id}-{n}",
                prompt_tokens=len(prefix) * model.block_tokens,
                output_tokens=1,
                max_new_tokens=1,
                prompt_blocks=prefix,
            )
            try:
                self._warming[model.submit(spec, now=t)] = replica
            except RejectedError:
                continue  # refused (too long for its context, a full queue): one prefix less
            replica.warming += 1
        if not replica.warming:
            self._route(replica, t)
            return
        self._replan(replica)
        self._push(t + warm.deadline_s, WARMED, replica)

    def _warmed(self, request: Request, t: float) -> None:
        replica = self._warming.pop(request)
        if replica.warming > 0:  # zero already when the deadline routed it
            replica.warming -= 1
            if replica.warming == 0:
                self._route(replica, t)

    def _end_warm_ups(self, revision: Revision, t: float) -> None:
        """Warming replicas take traffic as soon as the pre-warmer may hold them back no more
        (requests wait that they could serve)."""
        warming = [r for r in revision.replicas if r.warming and r not in revision.routable]
        prewarmer = revision.prewarmer
        if not warming or prewarmer is None:
            return
        serving = len(revision.routable)
        if not prewarmer.holds_back(serving=serving, waiting=waiting_of(revision, t)):
            for replica in warming:
                self._route(replica, t)

    def _route(self, replica: Replica, t: float) -> None:
        """The gateway takes a ready replica (once; not one that died or left meanwhile)."""
        revision = replica.revision
        if replica.state != READY or replica in revision.routable:
            return
        if replica not in revision.replicas:
            return
        replica.warming = 0
        revision.routable.append(replica)
        replica.routable_at = min(replica.routable_at, t)
        replica.service.flush(revision, t)

    def _detect(self, replica: Replica, t: float) -> None:
        """Kubernetes readiness noticed a dead pod: take it out of the router's pool."""
        if replica.state == CRASHED:
            self._unroute(replica)

    def _unroute(self, replica: Replica) -> None:
        revision = replica.revision
        if replica in revision.routable:
            revision.routable.remove(replica)
            revision.router.forget(replica.id)

    def _remove(self, replica: Replica, t: float) -> None:
        self._unroute(replica)
        if replica.model is not None and replica.load:
            replica.model.crash(now=t)  # terminated with requests in flight
            self._advance_removed(replica, t)
        if replica.warming:  # removed while warming up: its warm-up prompts go with it
            self._warming = {r: owner for r, owner in self._warming.items() if owner is not replica}
        service, revision = replica.service, replica.revision
        revision.replicas.remove(replica)
        replica.state = REMOVED
        replica.planned = None
        self.pools[service.model.pool].release(service.profile.gpu_count)
        self._charge(replica, t)

    def _charge(self, replica: Replica, t: float) -> None:
        """Record the replica's GPU time from its scheduling until `t`."""
        service = replica.service
        self.spans.append(
            ReplicaSpan(
                region=self.name,
                model=service.model.name,
                revision=replica.revision.index,
                created_at=replica.created_at,
                removed_at=t,
                gpus=service.profile.gpu_count,
                initial=replica.initial,
                booted_at=replica.booted_at,
                ready_at=replica.ready_at,
                routable_at=replica.routable_at,
            )
        )

    def _advance_removed(self, replica: Replica, t: float) -> None:
        assert replica.model is not None
        for event in replica.model.advance(t):
            self._warming.pop(event.request, None)
            if event.kind is not EventKind.FIRST_TOKEN and event.request in self._jobs:
                self._done(replica, event.request, t, ok=event.kind is EventKind.FINISHED)

    def _drain(self, replica: Replica, t: float) -> None:
        if replica.state != READY or replica.load == 0:
            self._remove(replica, t)
            return
        replica.state = DRAINING  # no new requests; removed when its last one finishes
        self._unroute(replica)
