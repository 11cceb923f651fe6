"""A region's state and clock, the parts of `Region` build on: its event heap, policies, pools,
records and samples, and its epoch's observation (region.py puts the parts together)."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from radixfleet.profile import ReplicaProfile, resolve_profile
from radixfleet.replica import Faults, Request, RequestSpec
from radixfleet.twin.interfaces import RegionObservation, UsageMeter, Waiting
from radixfleet.twin.log import DecisionRecord, ReplicaSpan, RequestLog, Sample
from radixfleet.twin.registry import PolicyContext, build
from radixfleet.twin.scenario import (
    CanaryRollout,
    GpuPool,
    PolicySet,
    RegionOutage,
    ReplicaCrash,
    Scenario,
)
from radixfleet.twin.service import Job, Replica, Revision, Service

# The kinds of event on a region's heap.
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


class RegionBase:
    """A region's state and clock, which the other parts of `Region` build on."""

    services: dict[int, Service]  # set once the parts are in place (Region.__init__)

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

    def _context(self, model_index: int | None) -> PolicyContext:
        model = None if model_index is None else self.scenario.models[model_index]
        seed = hash((self.scenario.seed, self.index, model_index)) & 0xFFFFFFFF
        return PolicyContext(scenario=self.scenario, model=model, region=self.name, seed=seed)

    def _revision(self, model_index: int, index: int, faults: Faults) -> Revision:
        ctx = self._context(model_index)
        return Revision(
            index=index,
            router=build("routing", self.policies.routing, ctx),
            scaler=build("autoscale", self.policies.autoscale, ctx),
            faults=faults,
        )

    def _schedule_faults(self) -> None:
        for fault in self.scenario.faults:
            if (isinstance(fault, RegionOutage | ReplicaCrash) and fault.region == self.name) or (
                isinstance(fault, CanaryRollout) and self._rolls_out_here(fault)
            ):
                self._push(fault.at_s, FAULT, fault)

    def _rolls_out_here(self, fault: CanaryRollout) -> bool:
        regions = fault.regions or self.scenario.model_regions(self.scenario.model(fault.model))
        return self.name in regions

    def set_floors(self, floors: dict[tuple[str, str], int]) -> None:
        """Replica floors the traffic policy asks for (pre-scaling ahead of shifted load)."""
        for service in self.services.values():
            wanted = floors.get((self.name, service.model.name), 0)
            service.floor = max(service.model.min_replicas, wanted)

    def _push(self, when: float, kind: int, what: Any) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), kind, what, None))

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

    def _record(self, t: float, kind: str, model: str, detail: str) -> None:
        self.decisions.append(DecisionRecord(t, kind, self.name, model, detail))

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
                    **tier_bytes(service),
                )
            )
        self._push(t + self.scenario.sample_interval_s, SAMPLE, None)


def model_index_of(scenario: Scenario, name: str) -> int:
    """The index of the scenario's model `name`."""
    return next(i for i, m in enumerate(scenario.models) if m.name == name)


_PROFILES: dict[tuple[str, str], ReplicaProfile] = {}


def cached_profile(spec: str, scenario: Scenario) -> ReplicaProfile:
    """A model's replica profile, resolved once per scenario."""
    key = (spec, scenario.name)
    if key not in _PROFILES:
        _PROFILES[key] = resolve_profile(spec)
    return _PROFILES[key]


def tier_bytes(service: Service) -> dict[str, int]:
    """What HiCache's tiers of `service` hold now, in bytes (nothing without tiers)."""
    if service.host_tier is None:
        return {}
    used = total = 0
    for revision in service.revisions:
        for replica in revision.replicas:
            host = None if replica.model is None else replica.model.host
            if host is not None:
                used, total = used + host.used_tokens, total + host.capacity_tokens
    stored = 0 if service.storage is None else service.storage.used_tokens
    per_token = service.profile.kv_bytes_per_token
    return {
        "host_used_bytes": used * per_token,
        "host_total_bytes": total * per_token,
        "storage_used_bytes": stored * per_token,
    }


def waiting_of(revision: Revision, t: float) -> Waiting:
    """Requests held for want of a replica, and queued at the serving ones."""
    queued = sum(r.model.stats(t).num_queue_reqs for r in revision.routable if r.model)
    return Waiting(held=len(revision.buffer), queued=queued)
