"""The KV tiers below the GPU: SGLang HiCache's host memory and its storage backend.

With `--enable-hierarchical-cache` SGLang keeps KV blocks the GPU evicts in a host memory pool
(`--hicache-size` GB, or `--hicache-ratio` times the device pool), and with
`--hicache-storage-backend` also in a storage backend (a file system, Mooncake's store, 3FS...)
that outlives the process and, for a distributed backend, is shared by replicas. A prompt whose
prefix is on the host or in storage is loaded back instead of recomputed; the load costs its
bytes over the link (PCIe for the host, the backend's bandwidth for storage).

Each tier here is a :class:`TierStore`: a radix tree of block paths with its own capacity and
its own LRU (a :class:`~radixfleet.replica.radix.RadixCache` holding no private tokens). How the
replica model moves blocks between tiers:

- **What reaches the host.** Under every write policy a block the GPU evicts is on the host
  afterwards, because SGLang's host pool keeps the copies of device-resident blocks from host
  eviction. The policies differ in *when* the copy is written (`hicache_backup_tokens_total`):
  `write_through` copies a block when the GPU caches it, `write_back` when the GPU evicts it,
  and `write_through_selective` copies only blocks hit again after they were cached (SGLang's
  threshold of two hits), when they are evicted here.
- **What reaches storage.** Whatever is written to the host is written to storage too (SGLang
  backs up from host to storage as it writes the host copy).
- **A hit below the GPU.** The deepest prefix held in any tier is loaded onto the GPU; a
  storage hit passes through the host (SGLang prefetches into the host pool), so it lands there
  as well.

Not modelled: the host-memory mode `buffer_only`, prefetch policies and their timeouts, and
the page layout and I/O backend flags (they change bandwidth, which is a profile number here).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass

from radixfleet.replica.radix import CacheListener, Node, RadixCache
from radixfleet.replica.stats import Counters

#: SGLang's default host pool when neither `--hicache-size` nor `--hicache-ratio` is given, in
#: the `cache` host-memory mode: twice the device pool (`--hicache-ratio`'s help).
DEFAULT_HOST_RATIO = 2.0
#: Bytes in one of `--hicache-size`'s gigabytes (SGLang sizes the host pool in 1e9 bytes).
GB = 1_000_000_000


class WritePolicy(enum.Enum):
    """When a GPU block is copied to the host tier (SGLang's `--hicache-write-policy`)."""

    WRITE_BACK = "write_back"
    WRITE_THROUGH = "write_through"
    WRITE_THROUGH_SELECTIVE = "write_through_selective"


@dataclass(frozen=True, slots=True)
class HostTierSpec:
    """A replica's host tier: its size in tokens and its write policy."""

    tokens: int
    write_policy: WritePolicy = WritePolicy.WRITE_THROUGH

    def __post_init__(self) -> None:
        if self.tokens <= 0:
            raise ValueError(f"a host tier holds a positive number of tokens, not {self.tokens}")


def host_tier_tokens(
    *, size_gb: float, ratio: float | None, device_tokens: int, bytes_per_token: int, ranks: int
) -> int:
    """Tokens a host pool holds, from SGLang's flags: `--hicache-size` (GB per rank) when it is
    given (not 0), else `--hicache-ratio` (default 2.0) times the device pool's tokens."""
    if size_gb > 0:
        return int(size_gb * GB * ranks // bytes_per_token)
    return int((DEFAULT_HOST_RATIO if ratio is None else ratio) * device_tokens)


class TierStore:
    """One tier's blocks: which prefixes it holds, its LRU and its capacity in tokens.

    A storage backend shared by several replicas is one `TierStore` passed to each of them.
    """

    def __init__(self, *, capacity_tokens: int, block_tokens: int) -> None:
        self._tree = RadixCache(capacity_tokens=capacity_tokens, block_tokens=block_tokens)
        self.block_tokens = block_tokens

    @property
    def capacity_tokens(self) -> int:
        """What the tier holds when full."""
        return self._tree.capacity_tokens

    @property
    def used_tokens(self) -> int:
        """What it holds now."""
        return self._tree.cached_tokens

    def held_prefix(self, blocks: Sequence[Hashable], *, limit: int) -> int:
        """How many of the first `limit` `blocks` the tier holds, changing nothing."""
        return self._tree.cached_prefix(blocks, limit=limit)

    def touch(self, blocks: Sequence[Hashable], *, count: int, now: float) -> None:
        """The first `count` blocks were read: they become the most recently used."""
        self._tree.match(blocks, now=now, limit=count)

    def store(self, blocks: Sequence[Hashable], *, now: float) -> int:
        """Hold the path `blocks` (its start, if it is longer than the tier), evicting the least
        recently used blocks off it; return the tokens newly written."""
        fits = min(len(blocks), self.capacity_tokens // self.block_tokens)
        before = self._tree.cached_tokens + self._tree.evicted_tokens_total
        self._tree.insert(blocks[:fits], now=now)
        return self._tree.cached_tokens + self._tree.evicted_tokens_total - before

    def clear(self) -> None:
        """Drop every block (the host pool of a flushed or restarted replica)."""
        self._tree.flush()

    # -- what a KV-event publisher reads (the emulator's; SGLang publishes the host tier's) --

    def listen(self, listener: CacheListener) -> None:
        """Tell `listener` of every block the tier stores, splits and evicts from now on."""
        self._tree.listener = listener

    @property
    def root(self) -> Node:
        """The tree's root, which holds no block."""
        return self._tree.root

    def runs(self) -> Iterator[Node]:
        """Every run of blocks the tier holds, parents first."""
        return self._tree.runs()


class Tiers:
    """A replica's tiers below its GPU cache, and how blocks move between them (the rules in
    the module docstring): the scheduler asks what a prompt loads back when it admits it and
    says what the GPU caches; the GPU cache tells of what it evicts (`on_evict`)."""

    def __init__(
        self, *, spec: HostTierSpec, storage: TierStore | None, gpu: RadixCache, counters: Counters
    ) -> None:
        self.spec = spec
        self.host = TierStore(capacity_tokens=spec.tokens, block_tokens=gpu.block_tokens)
        self.storage = storage
        self._gpu = gpu
        self._counters = counters
        gpu.on_evict = self._evicted

    def load(
        self, blocks: tuple[Hashable, ...], *, gpu: int, limit: int, now: float
    ) -> tuple[int, int]:
        """Blocks past the GPU's `gpu` (of the first `limit`) to load from the host and from
        storage, marked read."""
        host, storage = self.host, self.storage
        host_depth = host.held_prefix(blocks, limit=limit)
        store_depth = 0 if storage is None else storage.held_prefix(blocks, limit=limit)
        from_host = max(0, host_depth - gpu)
        from_storage = max(0, store_depth - max(gpu, host_depth))
        if from_host:
            host.touch(blocks, count=host_depth, now=now)
        if from_storage and storage is not None:
            storage.touch(blocks, count=store_depth, now=now)
            host.store(blocks[:store_depth], now=now)  # prefetched through the host pool
        return from_host, from_storage

    def cached_on_gpu(self, blocks: tuple[Hashable, ...], *, now: float) -> None:
        """`blocks` were just cached on the GPU: write-through copies them to the host now."""
        if self.spec.write_policy is WritePolicy.WRITE_THROUGH:
            self._back_up(list(blocks), now=now, counted=True)

    def _evicted(self, node: Node) -> None:
        """The GPU evicts `node`: its blocks stay on the host, at their last use's age."""
        policy = self.spec.write_policy
        if policy is WritePolicy.WRITE_THROUGH_SELECTIVE and node.hits == 0:
            return  # never hit again after it was cached: SGLang never copied it
        counted = policy is not WritePolicy.WRITE_THROUGH  # write-through counted it at caching
        self._back_up(self._gpu.path(node), now=node.last_access, counted=counted)

    def _back_up(self, blocks: list[Hashable], *, now: float, counted: bool) -> None:
        written = self.host.store(blocks, now=now)
        if self.storage is not None:
            self.storage.store(blocks, now=now)
        if counted:
            self._counters.backed_up(tokens=written)
