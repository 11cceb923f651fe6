"""A region's faults and canaries: outages, crashes and recoveries as the scenario schedules them,
and canary rollouts judged and finished by the canary policy."""

from __future__ import annotations

from radixfleet.replica import (
    Faults,
)
from radixfleet.twin.interfaces import CanaryObservation
from radixfleet.twin.log import Status
from radixfleet.twin.metrics import CanaryWindow
from radixfleet.twin.region_base import (
    CANARY,
    CHECK,
    DETECT,
    RECOVER,
    SCALE,
    model_index_of,
)
from radixfleet.twin.region_pd import RegionPd
from radixfleet.twin.registry import build
from radixfleet.twin.scenario import (
    CanaryRollout,
    Fault,
    RegionOutage,
    ReplicaCrash,
)
from radixfleet.twin.service import (
    CRASHED,
    READY,
    STARTING,
    Replica,
    Service,
)


class RegionFaults(RegionPd):
    """A region's faults and canary rollouts."""

    def _fault(self, fault: Fault, t: float) -> None:
        if isinstance(fault, RegionOutage):
            self._outage(fault, t)
        elif isinstance(fault, ReplicaCrash):
            self._crash(fault, t)
        elif isinstance(fault, CanaryRollout):
            self._canary_start(fault, t)

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
        service = self.services.get(model_index_of(self.scenario, fault.model))
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

    def _canary_start(self, fault: CanaryRollout, t: float) -> None:
        m = model_index_of(self.scenario, fault.model)
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
