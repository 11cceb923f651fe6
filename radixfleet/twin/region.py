"""One region in virtual time: its services, GPU pools, event queue, faults and records.

The region runs an epoch at a time (:meth:`Region.run`): it takes the arrivals routed to it,
and between them plays every due event from one heap, ordered by time then by insertion:
replica models finishing passes, replicas booting and becoming ready, autoscaler and canary
ticks, crash detection, faults and samples. Replica models are advanced only when the heap says
one of their passes ends or a request reaches them, so a decode run of many steps costs one
event. Regions share nothing, which lets worker processes run them side by side.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from radixfleet.profile import ReplicaProfile, resolve_profile
from radixfleet.replica import (
    HEALTHY,
    EventKind,
    Faults,
    Health,
    RejectedError,
    ReplicaModel,
    Request,
    RequestSpec,
    SchedulePolicy,
)
from radixfleet.twin.interfaces import CanaryObservation, RegionObservation, UsageMeter, Waiting
from radixfleet.twin.log import DecisionRecord, ReplicaSpan, RequestLog, Sample, Status
from radixfleet.twin.metrics import CanaryWindow
from radixfleet.twin.registry import PolicyContext, build
from radixfleet.twin.scenario import (
    CanaryRollout,
    Fault,
    GpuPool,
    PolicySet,
    RegionOutage,
    ReplicaCrash,
    Scenario,
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

WAKE, BOOT, CHECK, DETECT, SCALE, CANARY, SAMPLE, FAULT, RECOVER, WARMED = range(10)
REMOVED = "removed"
NAN = math.nan


class Pool:
    """A region's GPUs of one type: the ones on running nodes, and room to add nodes."""

    def __init__(self, spec: GpuPool) -> None:
        self.spec = spec
        self.up = spec.warm_gpus
        self.used = 0

    def take(self, gpus: int, profile: ReplicaProfile, *, running: bool = False) -> float | None:
        """Seconds before a new replica can start (a new node pulls weights), None if full.
        A `running` replica (one the scenario starts with) has its weights loaded already."""
        if self.used + gpus > self.spec.gpus:
            return None
        self.used += gpus
        download = profile.cold_start_from_s3_seconds() - profile.cold_start_seconds
        if self.used <= self.up:  # the node's disk has the weights, where the pool caches them
            return 0.0 if self.spec.model_cache or running else download
        # Cluster autoscaler adds a node; its weights come from the model store. Nodes stay up.
        self.up = self.used
        return self.spec.node_provision_s + download

    def release(self, gpus: int) -> None:
        """A replica left its GPUs."""
        self.used -= gpus


class Region:
    """A region's fleet under one policy set; see the module docstring."""

    def __init__(
        self,
        *,
        scenario: Scenario,
        index: int,
        policies: PolicySet,
        spec_of: Callable[[int], RequestSpec],
        tenant_names: Sequence[str],
    ) -> None:
        self.scenario = scenario
        self.index = index
        self.name = scenario.regions[index].name
        self.policies = policies
        self.spec_of = spec_of
        self.tenant_names = tenant_names
        self.down = False
        self.log = RequestLog()
        self.spans: list[ReplicaSpan] = []
        self.samples: list[Sample] = []
        self.decisions: list[DecisionRecord] = []
        self._heap: list[tuple[float, int, int, Any, Any]] = []
        self._seq = itertools.count()
        self._ids = itertools.count(index * 10_000_000)
        self._jobs: dict[Request, tuple[Job, Service]] = {}
        self._warming: dict[Request, Replica] = {}  # warm-up prompts, by the replica they warm
        self._epoch = [0, 0, 0]  # requests, failed, met the TTFT SLO
        self.pools = {p.name: Pool(p) for p in scenario.regions[index].gpu_pools}
        self.admission = build("admission", policies.admission, self._context(None))
        self._meter = self.admission if isinstance(self.admission, UsageMeter) else None
        self._metered: set[int] = set()  # admitted requests whose usage the meter awaits
        self.services = self._services()
        self._schedule_faults()
        self._push(0.0, SAMPLE, None)

    # -- set-up ------------------------------------------------------------------------------

    def _context(self, model_index: int | None) -> PolicyContext:
        model = None if model_index is None else self.scenario.models[model_index]
        seed = hash((self.scenario.seed, self.index, model_index)) & 0xFFFFFFFF
        return PolicyContext(scenario=self.scenario, model=model, region=self.name, seed=seed)

    def _services(self) -> dict[int, Service]:
        services = {}
        for m, model in enumerate(self.scenario.models):
            if self.name not in self.scenario.model_regions(model):
                continue
            profile = _profile(model.profile, self.scenario)
            service = Service(
                region=self,
                model=model,
                model_index=m,
                profile=profile,
                stable=self._revision(m, 0, HEALTHY),
                max_attempts=1 + self.scenario.router.max_retries,
                breaker=self.scenario.router.breaker(),
            )
            services[m] = service
            self._start(service, service.revisions[0], model.initial_replicas, warm=True)
        return services

    def _revision(self, model_index: int, index: int, faults: Faults) -> Revision:
        ctx = self._context(model_index)
        return Revision(
            index=index,
            router=build("routing", self.policies.routing, ctx),
            scaler=build("autoscale", self.policies.autoscale, ctx),
            faults=faults,
        )

    def _start(self, service: Service, revision: Revision, count: int, *, warm: bool) -> None:
        for _ in range(count):
            placed = self._add_replica(service, revision, 0.0, boot=not warm)
            if placed is not None:
                placed[0].initial = True
            if placed is not None and warm:
                replica, delay = placed
                if delay == 0:
                    self._boot(replica, 0.0, warm=True)
                else:
                    self._push(delay, BOOT, replica)
        self._push(0.0, SCALE, (service, revision))

    def _schedule_faults(self) -> None:
        for fault in self.scenario.faults:
            if (isinstance(fault, RegionOutage | ReplicaCrash) and fault.region == self.name) or (
                isinstance(fault, CanaryRollout) and self._rolls_out_here(fault)
            ):
                self._push(fault.at_s, FAULT, fault)

    def _rolls_out_here(self, fault: CanaryRollout) -> bool:
        regions = fault.regions or self.scenario.model_regions(self.scenario.model(fault.model))
        return self.name in regions

    # -- the loop ----------------------------------------------------------------------------

    def run(
        self,
        *,
        end: float,
        indices: Sequence[int],
        times: Sequence[float],
        models: Sequence[int],
        tenants: Sequence[int],
        u_revision: Sequence[float],
    ) -> RegionObservation:
        """Play the arrivals routed here (in time order) and every event before `end`."""
        heap = self._heap
        for k, index in enumerate(indices):
            t = times[k]
            while heap and heap[0][0] <= t:
                self._pop()
            self._arrive(index, t, models[k], tenants[k], u_revision[k])
        while heap and heap[0][0] < end:
            self._pop()
        return self._observe()

    def set_floors(self, floors: dict[tuple[str, str], int]) -> None:
        """Replica floors the traffic policy asks for (pre-scaling ahead of shifted load)."""
        for service in self.services.values():
            wanted = floors.get((self.name, service.model.name), 0)
            service.floor = max(service.model.min_replicas, wanted)

    def _push(self, when: float, kind: int, what: Any) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), kind, what, None))

    def _pop(self) -> None:
        when, _, kind, what, _ = heapq.heappop(self._heap)
        if kind == WAKE:
            if what.planned == when:
                what.planned = None
                self._advance(what, when)
        elif kind == BOOT:
            self._boot(what, when, warm=False)
        elif kind == CHECK:
            self._check(what, when)
        elif kind == DETECT:
            self._detect(what, when)
        elif kind == SCALE:
            service, revision = what
            self._scale_tick(service, revision, when)
        elif kind == CANARY:
            self._canary_tick(what, when)
        elif kind == SAMPLE:
            self._sample(when)
        elif kind == FAULT:
            self._fault(what, when)
        elif kind == RECOVER:
            self._recover(when)
        elif kind == WARMED:
            self._route(what, when)  # the warm-up's deadline: it takes traffic now

    def _observe(self) -> RegionObservation:
        requests, failed, ok = self._epoch
        self._epoch = [0, 0, 0]
        revisions = [rev for s in self.services.values() for rev in s.revisions]
        return RegionObservation(
            name=self.name,
            endpoint_up=not self.down,
            requests=requests,
            failed=failed,
            ttft_ok=ok,
            ready_replicas=sum(len(rev.routable) for rev in revisions),
            active_replicas=sum(len(rev.active()) for rev in revisions),
        )

    # -- requests ----------------------------------------------------------------------------

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

    # -- replica lifecycle -------------------------------------------------------------------

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
        model = replica.service.model
        replica.model = ReplicaModel(
            profile=replica.service.profile,
            now=t,
            block_tokens=model.block_tokens,
            schedule_policy=SchedulePolicy(model.schedule_policy),
            warm=warm,
            seed=replica.id,
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
        if prewarmer is not None and model is not None and not replica.initial:
            kv_blocks = model.profile.kv_capacity_tokens // model.block_tokens
            serving, waiting = len(revision.routable), _waiting(revision, t)
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
        if not prewarmer.holds_back(serving=serving, waiting=_waiting(revision, t)):
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

    # -- scaling -----------------------------------------------------------------------------

    def scale_now(self, service: Service, revision: Revision, t: float) -> None:
        """The activator asks for a replica of a revision at zero: tick its autoscaler now."""
        self._scale(service, revision, t)

    def _scale_tick(self, service: Service, revision: Revision, t: float) -> None:
        self._scale(service, revision, t)
        if not (revision.retired and not revision.replicas):
            self._push(t + revision.scaler.tick_s, SCALE, (service, revision))

    def _scale(self, service: Service, revision: Revision, t: float) -> None:
        service.expire(revision, t)
        self._end_warm_ups(revision, t)
        observed = service.observe(revision, t)
        desired = service.target(revision, revision.scaler.desired_replicas(observed, t))
        active = revision.active()
        if desired > len(active):
            for _ in range(desired - len(active)):
                if self._add_replica(service, revision, t) is None:
                    break
        elif desired < len(active):
            chosen = set(service.victims(revision, observed, len(active) - desired))
            for replica in [r for r in active if r.id in chosen]:
                self._drain(replica, t)

    # -- faults ------------------------------------------------------------------------------

    def _fault(self, fault: Fault, t: float) -> None:
        if isinstance(fault, RegionOutage):
            self._outage(fault, t)
        elif isinstance(fault, ReplicaCrash):
            self._crash(fault, t)
        elif isinstance(fault, CanaryRollout):
            self._canary_start(fault, t)

    def _record(self, t: float, kind: str, model: str, detail: str) -> None:
        self.decisions.append(DecisionRecord(t, kind, self.name, model, detail))

    def _outage(self, fault: RegionOutage, t: float) -> None:
        self.down = True
        self._record(t, "fault", "", f"region outage for {fault.duration_s:g} s")
        for service in self.services.values():
            for revision in service.revisions:
                while revision.buffer:
                    self.fail(revision.buffer.popleft(), Status.REGION_DOWN, t)
                for replica in list(revision.replicas):
                    self._unroute(replica)  # the region is unreachable as a whole
                    self._kill(replica, t, restart_after=None)
        self._push(t + fault.duration_s, RECOVER, None)

    def _kill(self, replica: Replica, t: float, *, restart_after: float | None) -> None:
        if replica.model is None:
            return
        replica.model.crash(now=t, restart_after=restart_after)
        replica.state = CRASHED
        self._advance_removed(replica, t)
        replica.planned = None

    def _recover(self, t: float) -> None:
        self.down = False
        self._record(t, "fault", "", "region back")
        for service in self.services.values():
            for revision in service.revisions:
                for replica in revision.replicas:
                    if replica.model is not None and replica.state == CRASHED:
                        replica.model.restart(now=t)
                        replica.state = STARTING
                        self._push(replica.model.ready_at, CHECK, replica)

    def _crash(self, fault: ReplicaCrash, t: float) -> None:
        service = self.services.get(_model_index(self.scenario, fault.model))
        if service is None:
            return
        revision = service.revisions[0]
        ready = sorted((r for r in revision.replicas if r.state == READY), key=lambda r: r.id)
        self._record(t, "fault", fault.model, f"{min(fault.count, len(ready))} replicas crash")
        for replica in ready[: fault.count]:
            self._kill(replica, t, restart_after=fault.restart_after_s)
            self._push(t + self.scenario.router.unhealthy_after_s, DETECT, replica)
            back = t + fault.restart_after_s + service.profile.cold_start_seconds
            self._push(back, CHECK, replica)

    # -- canaries ----------------------------------------------------------------------------

    def _canary_start(self, fault: CanaryRollout, t: float) -> None:
        m = _model_index(self.scenario, fault.model)
        service = self.services.get(m)
        if service is None or len(service.revisions) > 1:
            return
        faults = Faults(slowdown=fault.regression.slowdown, error_rate=fault.regression.error_rate)
        canary = self._revision(m, 1, faults)
        service.revisions.append(canary)
        policy = service.canary_policy = build("canary", self.policies.canary, self._context(m))
        # Kayenta's baseline: the stable model on replicas of its own, sent the canary's share.
        baseline = policy.baseline
        if baseline:
            service.revisions.append(self._revision(m, 2, Faults()))
        service.window = CanaryWindow(float(policy.window_s), baseline=baseline)
        service.canary_started = t
        self._record(t, "canary", fault.model, "new revision created")
        for revision in service.revisions[1:]:
            self._push(t, SCALE, (service, revision))
        self._push(t, CANARY, service)

    def _canary_tick(self, service: Service, t: float) -> None:
        policy = service.canary_policy
        assert service.window is not None
        measured = service.window.measure(t)
        ttft_p99, duration_p99 = service.window.canary_p99(t)
        observed = CanaryObservation(
            service=service.model.name,
            canary_ready=bool(service.revisions[1].routable),
            weight=service.canary_weight,
            measured=measured,
            canary_ttft_p99_s=ttft_p99,
            canary_duration_p99_s=duration_p99,
        )
        step = policy.step(observed, t)
        if step.promote or step.rollback:
            self._finish_rollout(service, promote=step.promote, t=t)
            verb = "promote" if step.promote else "rollback"
            self._record(t, "canary", service.model.name, f"{verb}: {step.reason}")
            return
        if step.weight is not None and step.weight != service.canary_weight:
            service.canary_weight = step.weight
            self._record(t, "canary", service.model.name, f"weight {step.weight}%: {step.reason}")
        self._push(t + policy.tick_s, CANARY, service)

    def _finish_rollout(self, service: Service, *, promote: bool, t: float) -> None:
        """All traffic to the winner; the loser (and a baseline, if one ran) scale to zero,
        and their buffered requests move to the winner."""
        stable, canary, *baseline = service.revisions
        service.canary_weight = 100 if promote else 0
        loser, winner = (stable, canary) if promote else (canary, stable)
        service.window = None
        for retired in (loser, *baseline):
            retired.retired = True
            while retired.buffer:
                job = retired.buffer.popleft()
                job.revision = winner.index
                if winner.routable:
                    service.dispatch(job, winner, t)
                else:
                    winner.buffer.append(job)

    # -- samples -----------------------------------------------------------------------------

    def _sample(self, t: float) -> None:
        for service in self.services.values():
            revisions = service.revisions
            self.samples.append(
                Sample(
                    at=t,
                    region=self.name,
                    model=service.model.name,
                    ready=sum(len(r.routable) for r in revisions),
                    active=sum(len(r.active()) for r in revisions),
                    buffered=sum(len(r.buffer) for r in revisions),
                )
            )
        self._push(t + self.scenario.sample_interval_s, SAMPLE, None)

    def close(self, t: float) -> None:
        """End of the run: every replica still up is charged until `t`."""
        for service in self.services.values():
            for revision in service.revisions:
                for replica in list(revision.replicas):
                    self._charge(replica, t)
                for job in revision.buffer:
                    self.fail(job, Status.UNFINISHED, t)
        for job, _ in list(self._jobs.values()):
            self.fail(job, Status.UNFINISHED, t)


def _model_index(scenario: Scenario, name: str) -> int:
    return next(i for i, m in enumerate(scenario.models) if m.name == name)


_PROFILES: dict[tuple[str, str], ReplicaProfile] = {}


def _profile(spec: str, scenario: Scenario) -> ReplicaProfile:
    key = (spec, scenario.name)
    if key not in _PROFILES:
        _PROFILES[key] = resolve_profile(spec)
    return _PROFILES[key]


def _waiting(revision: Revision, t: float) -> Waiting:
    """Requests held for want of a replica, and queued at the serving ones."""
    queued = sum(r.model.stats(t).num_queue_reqs for r in revision.routable if r.model)
    return Waiting(held=len(revision.buffer), queued=queued)
