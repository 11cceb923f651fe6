"""Multi-LoRA in the twin: which adapter each request names, and a replica's adapters as the
gateway's side loads them (the routing policies are in :mod:`radixfleet.twin.lora_routing`).

A model with `lora` (:class:`~radixfleet.twin.scenario.Lora`) has `adapters` adapters on one
base; each of its requests names one, drawn by Zipf popularity from a random stream of its own
(so a scenario without LoRA draws exactly what it drew before). An adapter's KV differs from
another's on the same prompt, so its prompts' cache blocks live in a key space of its own
(SGLang keys its radix cache by adapter too): a shared prefix is shared within an adapter only.

Every policy loads an adapter the chosen replica lacks before sending it the request (what a
gateway or controller does through SGLang's `/load_lora_adapter`: SGLang itself refuses a
request naming an adapter it has not loaded).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from radixfleet.replica import ReplicaModel, RequestSpec
from radixfleet.replica.lora import DEFAULT_RANK, AdapterSpec, LoraSpec
from radixfleet.twin.scenario import Lora, Model, Scenario

Ints = NDArray[np.int64]

NO_ADAPTER = -1
# Adapter k's blocks are its prompt's keys plus (k + 1) * _ADAPTER_SPACE: past any workload key.
_ADAPTER_SPACE = 1 << 64
# The adapters' draws get a stream of their own, apart from the workload's ([seed, 1]).
_ADAPTER_STREAM = 43


def adapter_name(rank: int) -> str:
    """The name of the adapter of popularity rank `rank` (0 is the most popular)."""
    return f"adapter-{rank:04d}"


def zipf_weights(lora: Lora) -> NDArray[np.float64]:
    """Each adapter's share of its model's requests, by popularity rank."""
    weights = np.arange(1, lora.adapters + 1, dtype=np.float64) ** -lora.zipf_alpha
    normalised: NDArray[np.float64] = weights / weights.sum()
    return normalised


def draw_adapters(scenario: Scenario, model: Ints) -> Ints:
    """Per request (its model's index in `model`), the rank of the adapter it names, or
    NO_ADAPTER for a model without LoRA; seeded by the scenario's seed."""
    ranks = np.full(len(model), NO_ADAPTER, dtype=np.int64)
    for index, spec in enumerate(scenario.models):
        if spec.lora is None:
            continue
        rng = np.random.default_rng([scenario.seed, _ADAPTER_STREAM, index])
        mask = model == index
        ranks[mask] = rng.choice(
            spec.lora.adapters, size=int(mask.sum()), p=zipf_weights(spec.lora)
        )
    return ranks


def with_adapter(spec: RequestSpec, rank: int) -> RequestSpec:
    """`spec` naming adapter `rank`, its cache blocks moved into that adapter's key space (the
    workload's keys are ints: radixfleet.twin.workload)."""
    offset = (rank + 1) * _ADAPTER_SPACE
    blocks = tuple(int(key) + offset for key in spec.prompt_blocks)  # type: ignore[call-overload]
    return replace(spec, prompt_blocks=blocks, adapter=adapter_name(rank))


def replica_lora(model: Model) -> LoraSpec | None:
    """A replica's LoRA flags from the scenario's `lora` (None without one): no adapter
    preloaded, SGLang's LRU eviction."""
    lora = model.lora
    if lora is None:
        return None
    return LoraSpec(
        max_loras_per_batch=lora.max_loras_per_batch,
        max_loaded_loras=lora.max_loaded_loras,
        max_lora_rank=lora.rank,
    )


def holds(replica: ReplicaModel, name: str) -> bool:
    """Whether adapter `name` is registered on `replica`: loaded, or its load under way."""
    return replica.lora is not None and name in replica.lora.pool.registered()


def ensure_loaded(replica: ReplicaModel, name: str, *, now: float) -> None:
    """Load adapter `name` on `replica` unless it holds it (or its load is under way): what
    the gateway's side does before sending a request for it (`/load_lora_adapter`). Every
    adapter of the scenario has its `rank`, the replica's `--max-lora-rank`. Raises LoraError
    when the replica refuses the load."""
    if replica.lora is None or holds(replica, name):
        return
    rank = replica.lora.pool.spec.max_lora_rank or DEFAULT_RANK
    adapter = AdapterSpec(name=name, path=f"/adapters/{name}", rank=rank)
    replica.load_adapter(adapter, now=now)


class AdapterHost:
    """The adapter side of the twin's replica (radixfleet/twin/service.py's `Replica`, whose
    `model` is its replica model): what an adapter-aware gateway asks of it
    (radixfleet.twin.lora_routing's `AdapterWorker`)."""

    __slots__ = ()
    model: ReplicaModel | None

    @property
    def max_loaded_adapters(self) -> int:
        """Its `--max-loaded-loras` (0 without LoRA)."""
        model = self.model
        if model is None or model.lora is None:
            return 0
        return model.lora.pool.spec.max_loaded_loras or 0

    def holds_adapter(self, name: str) -> bool:
        """Whether LoRA adapter `name` is loaded on it, or loading (what its `/v1/models` and
        its load answers have told the gateway)."""
        return self.model is not None and holds(self.model, name)

    def adapters_held(self) -> list[str]:
        """The adapters it holds, loads under way included."""
        model = self.model
        return [] if model is None or model.lora is None else model.lora.pool.registered()

    def adapters_running(self) -> Counter[str]:
        """Its requests in a batch, by adapter (base-model requests left out)."""
        model = self.model
        if model is None or model.lora is None:
            return Counter()
        return Counter({a: n for a, n in model.lora.running.items() if a is not None})

    def load_adapter(self, name: str, now: float) -> None:
        """Load `name` unless it holds it."""
        if self.model is not None:
            ensure_loaded(self.model, name, now=now)

    def unload_adapter(self, name: str, now: float) -> None:
        """Unload `name` if it holds it; its running requests finish."""
        if self.model is not None and holds(self.model, name):
            self.model.unload_adapter(name, now=now)
