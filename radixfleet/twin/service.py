"""One model in one region: its revisions, their replicas, routers, autoscalers and buffer.

A :class:`Service` is what an InferenceService is in one cluster. Each :class:`Revision` (the
stable one, and a canary while one rolls out) has its own replicas, its own router (smg in front
of the predictor pods) and its own autoscaler, as Knative scales revisions apart.
Requests arriving while a revision has no ready replica wait in its buffer (Knative's activator)
and are sent as soon as one is ready. The region (:mod:`radixfleet.twin.region`) owns the clock
and the event queue; the service asks it to schedule and to log.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any, Protocol

from radixfleet.profile import ReplicaProfile
from radixfleet.replica import (
    Faults,
    RejectedError,
    RejectReason,
    ReplicaModel,
    Request,
    RequestSpec,
)
from radixfleet.replica.lora import LoraError
from radixfleet.replica.tiers import HostTierSpec, TierStore, WritePolicy
from radixfleet.revisions import pick_revision
from radixfleet.twin.breaker import BreakerSettings, CircuitBreaker
from radixfleet.twin.interfaces import (
    DrainChooser,
    Prewarmer,
    ReplicaView,
    RoutingPolicy,
    ScalingPolicy,
    ServiceObservation,
)
from radixfleet.twin.log import Status
from radixfleet.twin.lora import AdapterHost, ensure_loaded, replica_lora
from radixfleet.twin.metrics import CanaryWindow
from radixfleet.twin.scenario import Model

GIB = 1 << 30

PROVISIONING, STARTING, READY, CRASHED, DRAINING = (
    "provisioning",
    "starting",
    "ready",
    "crashed",
    "draining",
)


class Job:
    """A client request on its way through the fleet."""

    __slots__ = ("arrival", "cold", "decode", "index", "revision", "spec")

    def __init__(self, index: int, arrival: float, spec: RequestSpec) -> None:
        self.index = index
        self.arrival = arrival
        self.spec = spec
        self.revision = 0
        self.cold = False
        self.decode: Replica | None = None  # a P/D pair's decode replica, picked on arrival


class Replica(AdapterHost):
    """One predictor pod: its GPU, its place in the lifecycle and its replica model (and its
    LoRA adapters, :class:`~radixfleet.twin.lora.AdapterHost`)."""

    __slots__ = (
        "booted_at", "created_at", "id", "initial", "load", "model", "planned", "ready_at",
        "revision", "role", "routable_at", "service", "state", "warming",
    )  # fmt: skip

    def __init__(
        self, *, replica_id: int, service: Service, revision: Revision, created_at: float
    ) -> None:
        self.id = replica_id
        self.service = service
        self.revision = revision
        self.created_at = created_at
        self.state = PROVISIONING
        self.model: ReplicaModel | None = None
        self.load = 0  # the router's in-flight count
        self.planned: float | None = None  # the model's next event time, as queued
        self.initial = False  # one of the replicas the scenario starts with
        self.booted_at = math.inf  # when its node and GPUs were there and it began to start
        self.ready_at = math.inf  # when its health check first passed
        self.routable_at = math.inf  # when the gateway first sent it requests
        self.warming = 0  # warm-up prompts still running before it takes traffic
        self.role: str | None = None  # "prefill" or "decode" in a P/D pair; None: colocated

    def age(self, now: float) -> float:
        """Seconds since it took its first request; the scenario's first replicas count as
        long-running from the start (infinite)."""
        return math.inf if self.initial else now - self.routable_at

    def cached_prefix(self, blocks: Sequence[Hashable]) -> int:
        """Leading `blocks` its cache holds on its GPU or its host tier: what its KV events
        have told the gateway (SGLang publishes host-tier blocks as events of tier HOST, and
        smg 1.13 matches them as it matches the GPU's: tests/test_emulator_hicache_router.py)."""
        model = self.model
        if model is None:
            return 0
        if model.host is None:
            return model.cache.cached_prefix(blocks)
        return sum(self.tiered_prefix(blocks))

    def tiered_prefix(self, blocks: Sequence[Hashable]) -> tuple[int, int]:
        """Leading `blocks` on its GPU, and the ones past them its host tier holds (what
        tiered KV events would tell the gateway)."""
        model = self.model
        if model is None:
            return 0, 0
        gpu = model.cache.cached_prefix(blocks)
        host = model.host
        if host is None:
            return gpu, 0
        return gpu, max(0, host.held_prefix(blocks, limit=len(blocks)) - gpu)


class Revision:
    """The replicas of one revision, with their router, autoscaler and activator buffer."""

    def __init__(
        self, *, index: int, router: RoutingPolicy, scaler: ScalingPolicy, faults: Faults
    ) -> None:
        self.index = index
        self.router = router
        self.scaler = scaler
        self.prewarmer = scaler if isinstance(scaler, Prewarmer) else None
        self.faults = faults
        self.replicas: list[Replica] = []
        self.routable: list[Replica] = []
        self.buffer: deque[Job] = deque()
        self.retired = False  # promoted away from, or rolled back: scaled to zero
        self.in_flight = 0
        self.arrivals = 0
        self.finished = 0
        self._area = 0.0  # integral of in-flight over time since the last tick
        self._area_since = 0.0
        self._area_at = 0.0

    def count(self, delta: int, now: float) -> None:
        """Change the in-flight count, keeping its time integral for the autoscaler."""
        self._area += self.in_flight * (now - self._area_at)
        self._area_at = now
        self.in_flight += delta

    def mean_concurrency(self, now: float) -> float:
        """Time-average in-flight count since the previous call."""
        self.count(0, now)
        span = now - self._area_since
        mean = self._area / span if span > 0 else float(self.in_flight)
        self._area, self._area_since = 0.0, now
        return mean

    def active(self) -> list[Replica]:
        """Replicas that exist and are not being drained."""
        return [r for r in self.replicas if r.state != DRAINING]


class RegionHost(Protocol):
    """What a service asks of the region that owns the clock (radixfleet/twin/region.py's
    `Region`): a port, so this module does not import the region that imports it."""

    name: str

    def scale_now(self, service: Service, revision: Revision, t: float) -> None: ...

    def fail(self, job: Job, status: Status, t: float) -> None: ...

    def track(self, request: Request, job: Job, replica: Replica, service: Service) -> None: ...


class PairDispatch(Protocol):
    """How a prefill/decode pair takes requests (radixfleet/twin/pd.py's `PairRouter`): a port,
    so this module does not import the module that builds on it."""

    def serving(self, revision: Revision) -> bool: ...

    def dispatch(self, service: Service, job: Job, revision: Revision, now: float) -> None: ...


class Service:
    """A model in a region; see the module docstring."""

    def __init__(
        self,
        *,
        region: RegionHost,
        model: Model,
        model_index: int,
        profile: ReplicaProfile,
        stable: Revision,
        max_attempts: int,
        breaker: BreakerSettings | None = None,
    ) -> None:
        self.region = region
        self.model = model
        self.model_index = model_index
        self.profile = profile
        self.revisions = [stable]
        self.max_attempts = max_attempts
        self.breaker = breaker
        self._breakers: dict[int, CircuitBreaker] = {}  # by replica id
        self.canary_weight = 0
        self.canary_policy: Any = None
        self.floor = model.min_replicas  # raised by the traffic policy's pre-scaling
        self.window: CanaryWindow | None = None  # per-revision numbers while a canary runs
        self.canary_started: float | None = None
        self.host_tier, self.storage = kv_tiers(model, profile)
        self.pair: PairDispatch | None = None  # set by the region for a P/D model
        self.lora = replica_lora(model)

    # -- requests ----------------------------------------------------------------------------

    def arrive(self, job: Job, u_revision: float, now: float) -> None:
        """A request reached this service: pick its revision, then a replica or the buffer."""
        revisions = self.revisions
        baseline = len(revisions) > 2 and bool(revisions[2].routable)
        index = pick_revision(
            u_revision, weight=self.canary_weight, canary=len(revisions) > 1, baseline=baseline
        )
        revision = revisions[index]
        job.revision = revision.index
        revision.arrivals += 1
        if revision.prewarmer is not None:
            revision.prewarmer.record(job.spec.prompt_blocks, now)
        if self.serving(revision):
            self.dispatch(job, revision, now)
            return
        job.cold = True
        revision.buffer.append(job)
        if not any(r.state != DRAINING for r in revision.replicas):
            self.region.scale_now(self, revision, now)  # the activator wakes a revision at zero

    def dispatch(self, job: Job, revision: Revision, now: float) -> None:
        """Route and submit as smg does: a refusal (503) is tried again on another pick, a
        worker's 500 is the client's; workers whose circuit is open are not picked, and with
        none left the request fails (smg's 503)."""
        if self.pair is not None:
            self.pair.dispatch(self, job, revision, now)
            return
        spec = job.spec
        for _ in range(self.max_attempts):
            workers = revision.routable
            if self._breakers:  # no worker has failed yet: nothing to filter (the usual case)
                workers = [r for r in workers if self.allows(r, now)]
            if not workers:
                break
            replica = workers[revision.router.select(spec, workers, now)]
            model = replica.model
            assert model is not None
            try:
                if spec.adapter is not None:
                    self._load_adapter(model, spec.adapter, now)
                request = model.submit(spec, now=now)
            except RejectedError as err:
                if err.reason is RejectReason.TOO_LONG:
                    self.region.fail(job, Status.TOO_LONG, now)
                    return
                if self.refused(err, replica, revision, now):
                    break  # smg passes a worker's 500 on, and its 400 for an adapter
                continue
            replica.load += 1
            revision.count(1, now)
            self.region.track(request, job, replica, self)
            return
        self.region.fail(job, Status.SERVER_ERROR, now)

    def refused(self, err: RejectedError, replica: Replica, revision: Revision, now: float) -> bool:
        """Count a refusal against `replica`; True when smg would pass it on (a worker's 500)
        rather than try another pick."""
        self.outcome(replica, ok=False, now=now)
        if self.window is not None:
            self.window.error(revision.index, now)
        return err.reason in (RejectReason.INJECTED_ERROR, RejectReason.LORA)

    def serving(self, revision: Revision) -> bool:
        """Whether `revision` can take a request now (a pair needs both roles routable)."""
        if self.pair is not None:
            return self.pair.serving(revision)
        return bool(revision.routable)

    def _load_adapter(self, model: ReplicaModel, adapter: str, now: float) -> None:
        """Load the request's adapter on the chosen replica if it lacks it; a refused load is
        the replica's refusal of the request (SGLang answers 400). A replica without LoRA
        refuses the request itself."""
        try:
            ensure_loaded(model, adapter, now=now)
        except LoraError as err:
            raise RejectedError(RejectReason.LORA, str(err)) from None

    def allows(self, replica: Replica, now: float) -> bool:
        """Whether the gateway's circuit breaker lets `replica` be picked at `now`."""
        breaker = self._breakers.get(replica.id)
        return breaker is None or breaker.allows(now)

    def outcome(self, replica: Replica, *, ok: bool, now: float) -> None:
        """A request to `replica` succeeded or failed: the circuit breaker counts it."""
        if self.breaker is None:
            return
        breaker = self._breakers.get(replica.id)
        if ok:
            if breaker is not None:  # a worker that never failed has a closed, empty circuit
                breaker.success(now)
            return
        if breaker is None:
            breaker = self._breakers[replica.id] = CircuitBreaker(self.breaker)
        breaker.failure(now)

    def flush(self, revision: Revision, now: float) -> None:
        """Send the buffered requests of `revision` now that a replica is ready."""
        timeout = self.model.request_timeout_s
        while revision.buffer and self.serving(revision):
            job = revision.buffer.popleft()
            if now - job.arrival > timeout:
                self.region.fail(job, Status.TIMEOUT, now)
            else:
                self.dispatch(job, revision, now)

    def expire(self, revision: Revision, now: float) -> None:
        """Fail buffered requests that waited past the request timeout."""
        timeout = self.model.request_timeout_s
        while revision.buffer and now - revision.buffer[0].arrival > timeout:
            self.region.fail(revision.buffer.popleft(), Status.TIMEOUT, now)

    # -- scaling -----------------------------------------------------------------------------

    def observe(self, revision: Revision, now: float) -> ServiceObservation:
        """The autoscaler's view of `revision` at a tick."""
        wants_stats = revision.scaler.needs_replica_stats
        views = [
            ReplicaView(
                id=r.id,
                # Warming up, it takes no traffic yet: to the autoscaler it is still starting
                # (its warm-up prompts are not demand), as a pod behind a readiness gate is.
                state=STARTING if r.warming else r.state,
                created_at=r.created_at,
                in_flight=r.load,
                stats=r.model.stats(now) if wants_stats and r.model is not None else None,
                role=r.role,
            )
            for r in revision.replicas
        ]
        observed = ServiceObservation(
            region=self.region.name,
            model=self.model.name,
            replicas=views,
            concurrency=revision.in_flight,
            mean_concurrency=revision.mean_concurrency(now),
            buffered=len(revision.buffer),
            arrivals=revision.arrivals,
            finished=revision.finished,
            min_replicas=self.floor_of(revision),
            max_replicas=self.model.max_replicas,
        )
        revision.arrivals = revision.finished = 0
        return observed

    def floor_of(self, revision: Revision) -> int:
        """The fewest replicas `revision` may have: none once retired, one for a live canary
        or baseline."""
        if revision.retired:
            return 0
        if revision.index > 0:
            return max(1, self.floor)
        return self.floor

    def target(self, revision: Revision, desired: int) -> int:
        """The policy's answer clamped to the revision's bounds."""
        if revision.retired:
            return 0
        return min(max(desired, self.floor_of(revision)), self.model.max_replicas)

    def victims(self, revision: Revision, observed: ServiceObservation, count: int) -> list[int]:
        """Which replicas to remove: the policy's choice, else not-ready then youngest first."""
        if isinstance(revision.scaler, DrainChooser):
            return revision.scaler.choose_victims(observed, count)
        ranked = sorted(revision.active(), key=lambda r: (r.state == READY, -r.created_at, -r.id))
        return [r.id for r in ranked[:count]]


def kv_tiers(model: Model, profile: ReplicaProfile) -> tuple[HostTierSpec | None, TierStore | None]:
    """A replica's host tier and the storage its model shares in one region, from the
    scenario's `kv_tiers` (None, None without one)."""
    tiers = model.kv_tiers
    if tiers is None:
        return None, None
    per_token = profile.kv_bytes_per_token
    host = HostTierSpec(
        tokens=int(tiers.host_gib * GIB) // per_token,
        write_policy=WritePolicy(tiers.write_policy),
    )
    if tiers.storage_gib is None:
        return host, None
    tokens = int(tiers.storage_gib * GIB) // per_token
    return host, TierStore(capacity_tokens=tokens, block_tokens=model.block_tokens)
