"""A replica's LoRA adapters, as sglang 0.5.23 keeps them: loaded in host memory, a few on the GPU.

Two bounds, read in the sglang 0.5.23 wheel:

- **Loaded** (`tokenizer_control_mixin.py`, `lora_registry.py`): `/load_lora_adapter` registers
  an adapter; past `--max-loaded-loras` the least recently *requested* unpinned adapter is
  unloaded (the registry's LRU order, whatever `--lora-eviction-policy` says), and when every
  adapter is pinned the load fails. Loads are serialised by one lock, so a second load waits for
  the first. A name ever loaded is remembered: a request naming it after an unload or an
  eviction loads it again implicitly; a name never loaded is refused.
- **On the GPU** (`lora_manager.py: validate_lora_batch`, `mem_pool.py: prepare_lora_batch`): a
  batch holds at most `--max-loras-per-batch` distinct adapters, the base model counting as one
  (it takes a pool slot); pinned adapters hold their slots for good, so a batch's unpinned
  adapters share what is left. A request whose adapter fits no slot is skipped and waits, as
  SGLang's scheduler skips it. An adapter new to the pool is copied host->GPU before the pass,
  evicting a slot no running request uses, chosen by `--lora-eviction-policy` (LRU or FIFO).

:class:`LoraPool` holds both and answers the scheduler; the times it gives come from the
profile (:mod:`radixfleet.profile`: an adapter's bytes from its rank, the read and copy
bandwidths, the batch cost of mixing adapters). Like the rest of the replica model it does no
I/O and reads no clock.
"""

from __future__ import annotations

import enum
from collections import Counter, OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from radixfleet.profile import ReplicaProfile

#: The rank an adapter has when its load names none (a common fine-tuning choice).
DEFAULT_RANK = 16


class EvictionPolicy(enum.Enum):
    """SGLang's `--lora-eviction-policy`: which GPU pool slot an adapter new to it takes."""

    LRU = "lru"
    FIFO = "fifo"


class LoraError(ValueError):
    """A LoRA load, unload or request SGLang refuses; the message is SGLang's (answered 400)."""


@dataclass(frozen=True, slots=True)
class AdapterSpec:
    """One adapter: its name, where it is read from, its rank (or its size) and whether pinned."""

    name: str
    path: str
    rank: int = DEFAULT_RANK
    size_bytes: int | None = None  # given: overrides the size computed from the rank
    pinned: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an adapter needs a name")
        if self.rank <= 0:
            raise ValueError(f"adapter {self.name!r}: rank must be positive, got {self.rank}")
        if self.size_bytes is not None and self.size_bytes <= 0:
            raise ValueError(f"adapter {self.name!r}: size_bytes must be positive")

    def bytes(self, profile: ReplicaProfile) -> int:
        """The adapter's weights in bytes: given, or its rank times the model's bytes per rank."""
        return self.size_bytes or self.rank * profile.lora_bytes_per_rank


@dataclass(frozen=True, slots=True)
class LoraSpec:
    """A replica's LoRA flags (`--max-loras-per-batch`, `--max-loaded-loras`,
    `--lora-eviction-policy`, `--max-lora-rank`) and the adapters `--lora-paths` preloads."""

    max_loras_per_batch: int = 8
    max_loaded_loras: int | None = None
    eviction_policy: EvictionPolicy = EvictionPolicy.LRU
    max_lora_rank: int | None = None
    preloaded: tuple[AdapterSpec, ...] = ()

    def __post_init__(self) -> None:
        # SGLang's own start-up checks (arg_groups/lora_hook.py), in its words.
        if self.max_loras_per_batch < 1:
            raise ValueError("max_loras_per_batch must be at least 1")
        loaded = self.max_loaded_loras
        if loaded is not None and loaded < self.max_loras_per_batch:
            raise ValueError(
                "max_loaded_loras should be greater than or equal to max_loras_per_batch. "
                f"max_loaded_loras={loaded}, max_loras_per_batch={self.max_loras_per_batch}"
            )
        if loaded is not None and len(self.preloaded) > loaded:
            raise ValueError(
                "The number of LoRA paths should not exceed max_loaded_loras. "
                f"max_loaded_loras={loaded}, lora_paths={len(self.preloaded)}"
            )


@dataclass(frozen=True, slots=True)
class LoadResult:
    """A load accepted: when the adapter can serve, and the adapters unloaded to make room."""

    ready_at: float
    evicted: tuple[str, ...] = ()


@dataclass(slots=True)
class _Slots:
    """The GPU pool: which adapters (None: the base model) hold a slot, in the policy's order."""

    order: OrderedDict[str | None, None] = field(default_factory=OrderedDict)

    def used(self, adapter: str | None, policy: EvictionPolicy) -> None:
        if adapter in self.order and policy is EvictionPolicy.LRU:
            self.order.move_to_end(adapter)
        self.order.setdefault(adapter, None)


class LoraPool:
    """A replica's adapters; see the module docstring. All times are in the caller's clock."""

    def __init__(self, *, spec: LoraSpec, profile: ReplicaProfile, now: float) -> None:
        self.spec = spec
        self.profile = profile
        self._registry: OrderedDict[str, AdapterSpec] = OrderedDict()  # least recent first
        self._ready_at: dict[str, float] = {}
        self._known: dict[str, AdapterSpec] = {}
        self._free_at = now  # when the load lock is next free
        self._slots = _Slots()
        self.loads_total = 0
        self.evictions_total = 0
        for adapter in spec.preloaded:  # part of the cold start, ready with the process
            self._register(adapter, ready_at=now)
            if adapter.pinned:
                self._slots.used(adapter.name, spec.eviction_policy)

    # -- loading and unloading ---------------------------------------------------------------

    def load_seconds(self, adapter: AdapterSpec) -> float:
        """Reading the adapter into host memory; a pinned one is also copied to its GPU slot."""
        size = adapter.bytes(self.profile)
        seconds = self.profile.lora_load_overhead_s + size / (self.profile.lora_load_gb_s * 1e9)
        return seconds + (self.gpu_copy_seconds(adapter) if adapter.pinned else 0.0)

    def gpu_copy_seconds(self, adapter: AdapterSpec) -> float:
        """Copying the adapter host->GPU; each GPU of the replica takes its shard."""
        per_gpu = adapter.bytes(self.profile) / self.profile.gpu_count
        return per_gpu / (self.profile.host_to_device_gb_s * 1e9)

    def load(self, adapter: AdapterSpec, *, now: float) -> LoadResult:
        """Register `adapter` (ready after its load, behind any load in progress), unloading
        the least recently requested unpinned adapters past `max_loaded_loras`."""
        self._check_loadable(adapter)
        start = max(now, self._free_at)
        ready_at = start + self.load_seconds(adapter)
        self._free_at = ready_at
        self._register(adapter, ready_at=ready_at)
        if adapter.pinned:
            self._slots.used(adapter.name, self.spec.eviction_policy)
        self.loads_total += 1
        return LoadResult(ready_at=ready_at, evicted=self._evict_past_bound())

    def _check_loadable(self, adapter: AdapterSpec) -> None:
        if adapter.name in self._registry:
            raise LoraError(
                f"Failed to load LoRA adapter {adapter.name} because it is already loaded"
            )
        limit = self.spec.max_lora_rank
        if limit is not None and adapter.rank > limit:
            raise LoraError(
                f"LoRA adapter {adapter.name} with rank {adapter.rank} is incompatible with the "
                "current LoRA memory pool configuration. Please ensure that the LoRA adapter's "
                "rank is within the configured `--max-lora-rank` and that the target modules "
                "are included in `--lora-target-modules`."
            )
        if adapter.pinned and self.pinned_count >= self.spec.max_loras_per_batch - 1:
            raise LoraError(
                f"Failed to load LoRA adapter {adapter.name} as a pinned adapter. It is not "
                "allowed to pin all slots in the LoRA memory pool to avoid starvation for "
                "unpinned adapters and base models. Please increase your "
                "`--max-loras-per-batch` or load it as unpinned LoRA adapters."
            )

    def _register(self, adapter: AdapterSpec, *, ready_at: float) -> None:
        self._registry[adapter.name] = adapter
        self._ready_at[adapter.name] = ready_at
        self._known[adapter.name] = adapter

    def _evict_past_bound(self) -> tuple[str, ...]:
        limit = self.spec.max_loaded_loras
        evicted: list[str] = []
        while limit is not None and len(self._registry) > limit:
            victim = next((a.name for a in self._registry.values() if not a.pinned), None)
            if victim is None:  # every adapter pinned: SGLang's load fails here
                raise LoraError(
                    "Didn't find any LoRA adapters when trying to evict LRU LoRA adapter."
                )
            self.unload(victim)
            self.evictions_total += 1
            evicted.append(victim)
        return tuple(evicted)

    def unload(self, name: str) -> None:
        """Unregister `name`: new requests may not name it; those already in keep running."""
        if name not in self._registry:
            loaded = self._registry.keys()  # SGLang prints the keys view: odict_keys([...])
            raise LoraError(f"LoRA with name {name} does not exist. Loaded LoRAs: {loaded}")
        del self._registry[name]
        del self._ready_at[name]
        self._slots.order.pop(name, None)

    # -- requests ----------------------------------------------------------------------------

    def resolve(self, name: str, *, now: float) -> float:
        """When a request naming `name` at `now` may run: loaded adapters at once (or when their
        load ends), one unloaded since loads again. Marks it the most recently requested."""
        if name not in self._registry:
            adapter = self._known.get(name)
            if adapter is None:
                raise LoraError(
                    f"Got LoRA adapter that has never been loaded: {name}\n"
                    f"All loaded adapters: {self._known.keys()}."
                )
            self.load(adapter, now=now)  # SGLang's implicit reload of an evicted adapter
        self._registry.move_to_end(name)
        return self._ready_at[name]

    def ready(self, name: str | None, *, now: float) -> bool:
        """Whether a request of `name` (None: the base model) may join a batch at `now`."""
        if name is None:
            return True
        ready_at = self._ready_at.get(name)
        return ready_at is None or ready_at <= now  # unloaded meanwhile: it drains

    def next_ready_after(self, now: float) -> float | None:
        """The next load to end after `now`, if any (a waiting request may then run)."""
        pending = [t for t in self._ready_at.values() if t > now]
        return min(pending) if pending else None

    def fits(self, name: str | None, running: Collection[str | None]) -> bool:
        """Whether a request of `name` may join a batch whose adapters are `running`."""
        if name in running:
            return True
        wanted = {name, *running}
        if len(wanted) > self.spec.max_loras_per_batch:
            return False
        pinned = sum(1 for a in wanted if a is not None and self._is_pinned(a))
        return len(wanted) - pinned <= self.spec.max_loras_per_batch - self.pinned_count

    def fetch(self, batch: Iterable[str | None]) -> float:
        """Give every adapter of `batch` a GPU slot; the seconds to copy those new to the pool.
        Slots of adapters outside `batch` are evicted by the policy (the base model last)."""
        wanted = set(batch)
        seconds = 0.0
        for name in sorted(wanted, key=lambda a: (a is not None, a or "")):
            if name not in self._slots.order:
                self._make_room(keep=wanted)
                if name is not None:
                    seconds += self.gpu_copy_seconds(self._known[name])
            self._slots.used(name, self.spec.eviction_policy)
        return seconds

    def _make_room(self, *, keep: set[str | None]) -> None:
        if len(self._slots.order) < self.spec.max_loras_per_batch:
            return
        candidates = [
            a
            for a in self._slots.order
            if a not in keep and not (a is not None and self._is_pinned(a))
        ]
        adapters = [a for a in candidates if a is not None] or candidates
        if adapters:  # the scheduler's `fits` leaves room; a drained adapter may be gone
            del self._slots.order[adapters[0]]

    # -- observation -------------------------------------------------------------------------

    def _is_pinned(self, name: str) -> bool:
        adapter = self._registry.get(name)
        return adapter is not None and adapter.pinned

    @property
    def pinned_count(self) -> int:
        """Adapters loaded pinned: each holds a GPU slot for good."""
        return sum(1 for a in self._registry.values() if a.pinned)

    def loaded(self, *, now: float) -> list[AdapterSpec]:
        """The adapters requests may name now, least recently requested first."""
        return [a for a in self._registry.values() if self._ready_at[a.name] <= now]

    def registered(self) -> list[str]:
        """Every registered adapter, loads in progress included."""
        return list(self._registry)

    def paths(self) -> dict[str, str]:
        """Every registered adapter's path by name (SGLang's `loaded_adapters`)."""
        return {name: adapter.path for name, adapter in self._registry.items()}

    def on_gpu(self) -> list[str]:
        """The adapters holding a GPU slot (the base model's slot is not listed)."""
        return [a for a in self._slots.order if a is not None]


def distinct_adapters(counts: Counter[str | None]) -> int:
    """How many distinct adapters (not the base model) a batch's requests name."""
    return sum(1 for name, count in counts.items() if name is not None and count > 0)


def decode_extra_seconds(profile: ReplicaProfile, adapters: int) -> float:
    """What `adapters` distinct adapters add to one decode step (S-LoRA's and Punica's
    grouped kernels: one launch for the batch, a little more work per distinct adapter)."""
    if adapters <= 0:
        return 0.0
    return profile.lora_decode_overhead_s + profile.lora_decode_per_adapter_s * (adapters - 1)


def prefill_extra_seconds(profile: ReplicaProfile, adapters: int) -> float:
    """What `adapters` distinct adapters add to one prefill pass."""
    return profile.lora_prefill_per_adapter_s * max(0, adapters)
