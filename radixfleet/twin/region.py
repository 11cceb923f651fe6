"""One region in virtual time: its services, GPU pools, event queue, faults and records.

The region runs an epoch at a time (:meth:`Region.run`): it takes the arrivals routed to it,
and between them plays every due event from one heap, ordered by time then by insertion:
replica models finishing passes, replicas booting and becoming ready, autoscaler and canary
ticks, crash detection, faults and samples. Replica models are advanced only when the heap says
one of their passes ends or a request reaches them, so a decode run of many steps costs one
event. Regions share nothing, which lets worker processes run them side by side.

`Region` is put together from its parts: `region_base` (state, clock, samples), `region_serving`
(requests and replicas), `region_pd` (prefill/decode pairs: the hand-over and the pools' sizes)
and `region_faults` (faults and canaries); here are the loop that plays the events, its scaling
and its set-up.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from radixfleet.replica import (
    HEALTHY,
    RequestSpec,
)
from radixfleet.twin.interfaces import RegionObservation
from radixfleet.twin.log import Status
from radixfleet.twin.pd import transfer_time
from radixfleet.twin.region_base import (
    BOOT,
    CANARY,
    CHECK,
    DETECT,
    FAULT,
    RECOVER,
    SAMPLE,
    SCALE,
    WAKE,
    WARMED,
    cached_profile,
)
from radixfleet.twin.region_faults import RegionFaults
from radixfleet.twin.region_pd import TRANSFER
from radixfleet.twin.scenario import (
    PolicySet,
    Scenario,
)
from radixfleet.twin.service import (
    Revision,
    Service,
)


class Region(RegionFaults):
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
        super().__init__(
            scenario=scenario, index=index, policies=policies, spec_of=spec_of,
            tenant_names=tenant_names,
        )  # fmt: skip
        self.services = self._services()
        self._schedule_faults()
        self._push(0.0, SAMPLE, None)

    def _services(self) -> dict[int, Service]:
        services = {}
        for m, model in enumerate(self.scenario.models):
            if self.name not in self.scenario.model_regions(model):
                continue
            profile = cached_profile(model.profile, self.scenario)
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
            self._attach_pair(service, transfer_time(profile))
            self._start(service, service.revisions[0], model.first_replicas, warm=True)
        return services

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
        elif kind == TRANSFER:
            self._transferred(what, when)

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
        if service.pair is not None:
            self._scale_pair(service, revision, observed, t)
            return
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
        self._close_transfers(t)
