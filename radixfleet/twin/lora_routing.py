"""Routing to LoRA adapters in the twin: which replicas a request for an adapter may go to, and
the hook through which a controller keeps adapters loaded by demand.

The policies wrap smg's cache-aware routing (on its HTTP tree, as the cluster's routers reach
their replicas) and differ in which replicas they let it choose from:

- `adapter_aware` (:class:`Holders`): the replicas holding the adapter (loaded, or loading),
  unless every holder is past smg's spill gate; otherwise (no holder, or all spilled) every
  replica, and the chosen one loads it on demand. `adapter_dynamic` is the same rule with the
  LoRA controller keeping adapters by demand on its tick (an :class:`AdapterKeeper`:
  radixfleet/controllers/lora/twin.py; the twin imports no controller).
- `adapter_partitioned` (:class:`Partitioned`): the adapters split statically into sets of
  equal expected demand (greedy by Zipf weight), one replica group per set; a request goes to
  its adapter's group only, whatever the load elsewhere.
- `adapter_blind` (:class:`Blind`): every replica, as smg routes a model with no adapter; a
  replica without the adapter loads it on a miss (the replica model's load time and eviction).

A request naming no adapter goes to smg's rule over every replica under all three.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from radixfleet.replica import RequestSpec
from radixfleet.twin.interfaces import RoutingPolicy, WorkerView
from radixfleet.twin.lora import adapter_name, zipf_weights
from radixfleet.twin.routing import spill_margin
from radixfleet.twin.scenario import Lora, RouterSettings


class AdapterWorker(WorkerView, Protocol):
    """A replica as an adapter-aware gateway sees it: also the adapters it holds, and the
    load and unload calls (SGLang's `/load_lora_adapter`, `/unload_lora_adapter`)."""

    @property
    def max_loaded_adapters(self) -> int:
        """Its `--max-loaded-loras`."""
        ...

    def holds_adapter(self, name: str) -> bool:
        """Whether the adapter is loaded on the replica (or its load is under way)."""
        ...

    def adapters_held(self) -> list[str]:
        """The adapters it holds, loads under way included."""
        ...

    def adapters_running(self) -> Mapping[str, int]:
        """Its requests in a batch (prefilling or decoding), by adapter."""
        ...

    def load_adapter(self, name: str, now: float) -> None:
        """Load `name` (nothing if it holds it)."""
        ...

    def unload_adapter(self, name: str, now: float) -> None:
        """Unload `name` (nothing if it does not hold it); its running requests finish."""
        ...


# -- placements --------------------------------------------------------------------------------


class Placement(Protocol):
    """Which workers a request for an adapter may go to (indices into `workers`, never empty)."""

    def candidates(self, adapter: str, workers: Sequence[AdapterWorker]) -> list[int]: ...


class Blind:
    """Every worker: the adapter plays no part in the choice."""

    def candidates(self, adapter: str, workers: Sequence[AdapterWorker]) -> list[int]:
        """All of them."""
        return list(range(len(workers)))


def partition(lora: Lora, groups: int) -> list[int]:
    """Per adapter rank, its group: adapters dealt, most popular first, to the group with the
    least expected demand so far (longest-processing-time first), so the sets' expected
    demand is as even as a static split can make it."""
    heap = [(0.0, group) for group in range(groups)]
    owner = [0] * lora.adapters
    for rank, weight in enumerate(zipf_weights(lora).tolist()):
        demand, group = heapq.heappop(heap)
        owner[rank] = group
        heapq.heappush(heap, (demand + weight, group))
    return owner


class Partitioned:
    """The adapter's replica group: the worker at position i (by id) is in group i mod
    `groups` (fewer groups while fewer workers are up)."""

    def __init__(self, lora: Lora, groups: int) -> None:
        self.groups = groups
        self.owner = {adapter_name(r): g for r, g in enumerate(partition(lora, groups))}

    def candidates(self, adapter: str, workers: Sequence[AdapterWorker]) -> list[int]:
        """The workers of the adapter's group."""
        groups = min(self.groups, len(workers))
        group = self.owner[adapter] % groups
        by_id = sorted(range(len(workers)), key=lambda i: workers[i].id)
        return sorted(i for position, i in enumerate(by_id) if position % groups == group)


class Holders:
    """The holders of the adapter, unless every one is past smg's spill gate; else all."""

    def __init__(self, settings: RouterSettings) -> None:
        self.settings = settings

    def candidates(self, adapter: str, workers: Sequence[AdapterWorker]) -> list[int]:
        """Holders under the spill ceiling, or every worker when there are none."""
        mean = sum(w.load for w in workers) / len(workers)
        ceiling = max(
            mean * self.settings.balance_rel_threshold,
            mean + spill_margin(self.settings.balance_abs_threshold, mean),
        )
        holders = [
            i for i, w in enumerate(workers) if w.load <= ceiling and w.holds_adapter(adapter)
        ]
        return holders or list(range(len(workers)))


# -- the controller's hook -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeldAdapters:
    """One replica's adapters at a keeper's tick: its bound, what it holds (with when the
    keeper first saw each there) and its requests running by adapter."""

    worker: int
    max_loaded: int
    loaded: Mapping[str, float]
    running: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class AdapterDemand:
    """One adapter's requests per second since the previous tick, and its last request."""

    adapter: str
    rps: float
    last_request_at: float


@dataclass(frozen=True, slots=True)
class AdapterAction:
    """Load or unload one adapter on one replica."""

    verb: Literal["load", "unload"]
    worker: int
    adapter: str


class AdapterKeeper(Protocol):
    """Decides every `tick_s` which adapters each replica keeps, from their demand."""

    tick_s: float

    def keep(
        self, held: Sequence[HeldAdapters], demand: Sequence[AdapterDemand], now: float
    ) -> Sequence[AdapterAction]: ...


# -- the routing policy --------------------------------------------------------------------------


class AdapterRouting:
    """A routing policy choosing among the workers its placement allows, by `inner`'s rules,
    with an optional keeper run at the first request after each of its ticks (as smg's tree
    eviction is: the twin's router has no timer of its own)."""

    def __init__(
        self, inner: RoutingPolicy, placement: Placement, keeper: AdapterKeeper | None = None
    ) -> None:
        self.inner = inner
        self.placement = placement
        self.keeper = keeper
        self._counts: Counter[str] = Counter()
        self._last_request: dict[str, float] = {}
        self._seen: dict[tuple[int, str], float] = {}  # (worker, adapter) -> first seen held
        self._window_start = 0.0
        self._next_tick = 0.0 if keeper is None else keeper.tick_s

    def select(self, spec: RequestSpec, workers: Sequence[WorkerView], now: float) -> int:
        """The worker for `spec`: `inner`'s pick among the placement's candidates."""
        adapter = spec.adapter
        if adapter is None:
            return self.inner.select(spec, workers, now)
        adapter_workers = _adapter_workers(workers)
        if self.keeper is not None:
            self._count(adapter, now)
            if now >= self._next_tick:
                self._tick(self.keeper, adapter_workers, now)
        allowed = self.placement.candidates(adapter, adapter_workers)
        chosen = self.inner.select(spec, [workers[i] for i in allowed], now)
        return allowed[chosen]

    def forget(self, worker_id: int) -> None:
        """Drop a removed worker from `inner` and from what the keeper saw."""
        self.inner.forget(worker_id)
        self._seen = {key: t for key, t in self._seen.items() if key[0] != worker_id}

    def _count(self, adapter: str, now: float) -> None:
        self._counts[adapter] += 1
        self._last_request[adapter] = now

    def _tick(self, keeper: AdapterKeeper, workers: Sequence[AdapterWorker], now: float) -> None:
        span = max(now - self._window_start, 1e-9)
        demand = [
            AdapterDemand(adapter, self._counts[adapter] / span, last)
            for adapter, last in sorted(self._last_request.items())
        ]
        by_id = {w.id: w for w in workers}
        for action in keeper.keep([self._held(w, now) for w in workers], demand, now):
            worker = by_id[action.worker]
            if action.verb == "load":
                worker.load_adapter(action.adapter, now)
            else:
                worker.unload_adapter(action.adapter, now)
        self._counts.clear()
        self._window_start = now
        while self._next_tick <= now:
            self._next_tick += keeper.tick_s

    def _held(self, worker: AdapterWorker, now: float) -> HeldAdapters:
        held = worker.adapters_held()
        for key in [k for k in self._seen if k[0] == worker.id and k[1] not in held]:
            del self._seen[key]  # unloaded or evicted since: a reload is a new copy
        loaded = {a: self._seen.setdefault((worker.id, a), now) for a in held}
        return HeldAdapters(
            worker=worker.id,
            max_loaded=worker.max_loaded_adapters,
            loaded=loaded,
            running=dict(worker.adapters_running()),
        )


def _adapter_workers(workers: Sequence[WorkerView]) -> Sequence[AdapterWorker]:
    # The twin's replicas are adapter workers (radixfleet/twin/service.py's Replica); a view
    # without `holds_adapter` is a caller's mistake, named here rather than deep in a policy.
    for worker in workers:
        if not hasattr(worker, "holds_adapter"):
            raise TypeError(f"worker {worker.id} does not say which adapters it holds")
    return workers  # type: ignore[return-value]
