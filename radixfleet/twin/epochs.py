"""A twin run: the regions played epoch by epoch, in worker processes, under one policy set.

Regions depend on each other only through global traffic steering, so the run advances in
epochs (`epoch_s`, 10 s by default). At each epoch boundary the coordinator assigns the next
epoch's arrivals to regions from the traffic policy's weights (each client keeps its cached DNS
answer for part of the TTL, drawn per request), the regions play the epoch, and their
observations feed the traffic policy. Workers own fixed sets of regions; since every input of a
region is a function of the scenario, the seed and the observations at epoch boundaries, the
results do not depend on how many workers run them.
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.connection
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from radixfleet.twin.interfaces import FleetObservation, RegionObservation, TrafficDecision
from radixfleet.twin.log import DecisionRecord, ReplicaSpan, RequestLog, Sample
from radixfleet.twin.region import Region
from radixfleet.twin.registry import PolicyContext, build
from radixfleet.twin.scenario import PolicySet, Scenario
from radixfleet.twin.workload import Workload

Progress = Callable[[float, int], None]  # virtual seconds done, requests done


@dataclass
class RunRecord:
    """Everything one policy set's run recorded."""

    policy: str
    log: RequestLog = field(default_factory=RequestLog)
    spans: list[ReplicaSpan] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    decisions: list[DecisionRecord] = field(default_factory=list)
    traffic: list[tuple[float, dict[str, dict[str, float]]]] = field(default_factory=list)
    wall_s: float = 0.0

    def merge(self, other: RunRecord) -> None:
        """Add another worker's regions."""
        self.log.extend(other.log)
        self.spans.extend(other.spans)
        self.samples.extend(other.samples)
        self.decisions.extend(other.decisions)


class TrafficState:
    """The weights in force and the ones before them, for clients still on a cached answer."""

    def __init__(self, regions: Sequence[str], decision: TrafficDecision, ttl_s: float) -> None:
        self.regions = list(regions)
        self.ttl_s = ttl_s
        self.current = self._matrix(decision)
        self.previous = self.current
        self.changed_at = -1e18
        self.floors: dict[tuple[str, str], int] = dict(decision.min_replicas)

    def _matrix(self, decision: TrafficDecision) -> NDArray[np.float64]:
        names = self.regions
        matrix = np.zeros((len(names), len(names)))
        for i, home in enumerate(names):
            row = decision.weights.get(home, {})
            for j, name in enumerate(names):
                matrix[i, j] = max(0.0, float(row.get(name, 0.0)))
        return matrix

    def apply(self, decision: TrafficDecision, now: float) -> bool:
        """Take a new decision; True when the weights changed."""
        self.floors = dict(decision.min_replicas)
        matrix = self._matrix(decision)
        if np.array_equal(matrix, self.current):
            return False
        self.previous, self.current, self.changed_at = self.current, matrix, now
        return True


def assign(
    workload: Workload, lo: int, hi: int, state: TrafficState, serves: NDArray[np.bool_]
) -> NDArray[np.int64]:
    """The region serving each arrival in [lo, hi): its client's DNS answer, drawn per request.

    `serves[m, r]` says whether region r serves model m. A client whose cached answer is younger
    than the change keeps the old weights; a row with no serving region falls back to home.
    """
    a = workload.arrivals
    t, home, model = a.t[lo:hi], a.home[lo:hi], a.model[lo:hi]
    fresh = (t - state.changed_at) >= a.u_ttl[lo:hi] * state.ttl_s
    weights = np.where(fresh[:, None], state.current[home], state.previous[home])
    weights = weights * serves[model]
    totals = weights.sum(axis=1)
    cumulative = np.cumsum(weights, axis=1)
    target = a.u_route[lo:hi] * totals
    picks = (cumulative <= target[:, None]).sum(axis=1)
    picks = np.minimum(picks, len(state.regions) - 1)
    return np.where(totals > 0, picks, home).astype(np.int64)


class RegionGroup:
    """The regions one process plays."""

    def __init__(
        self, scenario: Scenario, policies: PolicySet, workload: Workload, regions: Sequence[int]
    ) -> None:
        self.workload = workload
        tenants = [t.name for t in scenario.tenants]
        self.regions = [
            Region(
                scenario=scenario,
                index=i,
                policies=policies,
                spec_of=workload.spec,
                tenant_names=tenants,
            )
            for i in regions
        ]

    def epoch(
        self,
        end: float,
        lo: int,
        served: NDArray[np.int64],
        floors: dict[tuple[str, str], int],
    ) -> list[RegionObservation]:
        """Play one epoch of every region in the group."""
        a = self.workload.arrivals
        out = []
        for region in self.regions:
            region.set_floors(floors)
            rows = np.nonzero(served == region.index)[0] + lo
            out.append(
                region.run(
                    end=end,
                    indices=rows.tolist(),
                    times=a.t[rows].tolist(),
                    models=a.model[rows].tolist(),
                    tenants=a.tenant[rows].tolist(),
                    u_revision=a.u_revision[rows].tolist(),
                )
            )
        return out

    def finish(self, end: float, policy: str) -> RunRecord:
        """Close every region and hand back its records."""
        record = RunRecord(policy=policy)
        for region in self.regions:
            region.close(end)
            record.log.extend(region.log)
            record.spans.extend(region.spans)
            record.samples.extend(region.samples)
            record.decisions.extend(region.decisions)
        return record


def _worker(connection: multiprocessing.connection.Connection, group: RegionGroup) -> None:
    while True:
        message = connection.recv()
        if message[0] == "epoch":
            connection.send(group.epoch(*message[1:]))
        else:
            connection.send(group.finish(*message[1:]))
            return


class _Remote:
    """A RegionGroup in a forked process, driven over a pipe."""

    def __init__(self, group: RegionGroup, context: Any) -> None:
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_worker, args=(child, group), daemon=True)
        self._process.start()
        child.close()

    def send(self, *message: Any) -> None:
        self._conn.send(message)

    def receive(self) -> Any:
        return self._conn.recv()

    def join(self) -> None:
        self._process.join(timeout=30)


def split_regions(scenario: Scenario, workers: int) -> list[list[int]]:
    """Regions dealt to workers, heaviest traffic share first, to the least loaded worker."""
    count = max(1, min(workers, len(scenario.regions)))
    groups: list[list[int]] = [[] for _ in range(count)]
    loads = [0.0] * count
    order = sorted(range(len(scenario.regions)), key=lambda i: -scenario.regions[i].traffic_share)
    for i in order:
        target = loads.index(min(loads))
        groups[target].append(i)
        loads[target] += scenario.regions[i].traffic_share
    return [sorted(g) for g in groups]


def serving_matrix(scenario: Scenario) -> NDArray[np.bool_]:
    """`[m, r]`: whether region r serves model m."""
    names = [r.name for r in scenario.regions]
    matrix = np.zeros((len(scenario.models), len(names)), dtype=bool)
    for m, model in enumerate(scenario.models):
        for name in scenario.model_regions(model):
            matrix[m, names.index(name)] = True
    return matrix


def run_policy(
    scenario: Scenario,
    policies: PolicySet,
    workload: Workload,
    *,
    workers: int = 1,
    progress: Progress | None = None,
) -> RunRecord:
    """Run the whole scenario under `policies`; `workers` processes share the regions."""
    groups = split_regions(scenario, workers)
    with _few_collections():
        if len(groups) == 1:
            local = RegionGroup(scenario, policies, workload, groups[0])
            return _drive(scenario, policies, workload, [local], progress)
        context = multiprocessing.get_context("fork")
        remotes = [_Remote(RegionGroup(scenario, policies, workload, g), context) for g in groups]
        try:
            return _drive(scenario, policies, workload, remotes, progress)
        finally:
            for remote in remotes:
                remote.join()


@contextmanager
def _few_collections() -> Iterator[None]:
    """Rarer cyclic garbage collections while a run lasts (forked workers inherit it).

    A run holds millions of long-lived objects (cache trees, requests in flight); with the
    default thresholds Python walks them over and over, a sixth or more of the run's time.
    What exists before the run is frozen out of the collector's sight altogether.
    """
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _drive(
    scenario: Scenario,
    policies: PolicySet,
    workload: Workload,
    groups: Sequence[RegionGroup | _Remote],
    progress: Progress | None,
) -> RunRecord:
    names = [r.name for r in scenario.regions]
    traffic = build("traffic", policies.traffic, PolicyContext(scenario=scenario))
    state = TrafficState(names, TrafficDecision(_identity(names)), traffic.ttl_s)
    serves = serving_matrix(scenario)
    record = RunRecord(policy=policies.name)
    record.traffic.append((0.0, _identity(names)))
    next_decision, t = traffic.interval_s, 0.0
    while t < scenario.duration_s:
        end = min(t + scenario.epoch_s, scenario.duration_s)
        lo, hi = workload.arrivals.window(t, end)
        served = assign(workload, lo, hi, state, serves)
        observed = _epoch(groups, end, lo, served, state.floors)
        if end >= next_decision - 1e-9:
            decision = traffic.decide(FleetObservation(_ordered(observed, names)), end)
            if state.apply(decision, end):
                record.traffic.append((end, {k: dict(v) for k, v in decision.weights.items()}))
            next_decision += traffic.interval_s
        if progress is not None:
            progress(end, hi)
        t = end
    for group in groups:
        record.merge(_finish(group, scenario.duration_s, policies.name))
    return record


def _identity(names: Sequence[str]) -> dict[str, dict[str, float]]:
    return {home: {home: 1.0} for home in names}


def _ordered(observed: list[RegionObservation], names: list[str]) -> list[RegionObservation]:
    return sorted(observed, key=lambda o: names.index(o.name))


def _epoch(
    groups: Sequence[RegionGroup | _Remote],
    end: float,
    lo: int,
    served: NDArray[np.int64],
    floors: dict[tuple[str, str], int],
) -> list[RegionObservation]:
    out: list[RegionObservation] = []
    for group in groups:  # start every remote first, so they run at the same time
        if isinstance(group, _Remote):
            group.send("epoch", end, lo, served, floors)
    for group in groups:
        if isinstance(group, _Remote):
            out.extend(group.receive())
        else:
            out.extend(group.epoch(end, lo, served, floors))
    return out


def _finish(group: RegionGroup | _Remote, end: float, policy: str) -> RunRecord:
    if isinstance(group, _Remote):
        group.send("finish", end, policy)
        result: RunRecord = group.receive()
        return result
    return group.finish(end, policy)
