"""Routing policies: smg 1.13's cache_aware on its event index or its approximate tree
(`SmgCacheAware`), a tier-aware variant of it no smg release has (`TieredCacheAware`), round
robin, and least load.

smg replaced sglang-router 0.3.2 everywhere radixfleet routes
(radixfleet/controllers/routers/README.md), and the twin routes as smg does. Its approximate tree
(`ApproxTree`, for HTTP workers) is the one smg kept from sglang-router's `tree.rs`: a multi-tenant
radix tree of what was sent to each worker (not of what the worker still caches), cut back every
`eviction_interval_s` to `max_tree_size_chars`, least recently used leaves first. It holds the
workload's cache blocks rather than characters (sizes are converted at `chars_per_token`).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Hashable, Sequence

from radixfleet.profile import ReplicaProfile
from radixfleet.replica import RequestSpec
from radixfleet.replica.radix import matching_blocks
from radixfleet.twin.interfaces import WorkerView
from radixfleet.twin.scenario import RouterSettings


class RoundRobin:
    """The next worker in turn (smg's `round_robin`)."""

    def __init__(self) -> None:
        self._counter = 0

    def select(self, spec: RequestSpec, workers: Sequence[WorkerView], now: float) -> int:
        """Worker `counter mod n`, counter advancing by one per request."""
        index = self._counter % len(workers)
        self._counter += 1
        return index

    def forget(self, worker_id: int) -> None:
        """Nothing is kept per worker."""


class LeastLoad:
    """The worker with the fewest requests in flight (shortest queue); ties to the oldest."""

    def select(self, spec: RequestSpec, workers: Sequence[WorkerView], now: float) -> int:
        """Index of the least loaded worker."""
        best, best_load = 0, workers[0].load
        for index in range(1, len(workers)):
            load = workers[index].load
            if load < best_load:
                best, best_load = index, load
        return best

    def forget(self, worker_id: int) -> None:
        """Nothing is kept per worker."""


class _Node:
    """A run of blocks and, per worker that was sent it, when that worker last used it."""

    __slots__ = ("children", "depth", "key", "parent", "tenants")

    def __init__(self, key: tuple[Hashable, ...], parent: _Node | None) -> None:
        self.key = key
        self.parent = parent
        self.depth: int = len(key) + (parent.depth if parent is not None else 0)
        self.children: dict[Hashable, _Node] = {}
        self.tenants: dict[int, float] = {}


class ApproxTree:
    """smg's multi-tenant approximate radix tree (from sglang-router's), over blocks.

    Same answers as tree.rs, cheaper bookkeeping: each worker's nodes are indexed, so removing
    a worker touches only its own nodes. A parent is touched whenever a child is, so taking a
    worker's nodes by last access, deeper first on ties, visits leaves first. Eviction keeps
    that order in a heap per worker, built on the worker's first eviction, with one entry per
    node: an entry older than its node's last access is put back at that age when it comes up,
    so an eviction costs what it removes and what was touched since, not the tree's size.
    """

    def __init__(self, *, chars_per_block: float) -> None:
        self.root = _Node((), None)
        self.chars_per_block = chars_per_block
        self.size: dict[int, float] = {}  # chars per worker (`tenant_char_count`)
        self._nodes: dict[int, dict[_Node, None]] = {}
        # Per worker, one (access, -depth, serial, node) per node; the access may be older
        # than the node's own, never newer.
        self._lru: dict[int, list[tuple[float, int, int, _Node]]] = {}
        self._serial = itertools.count()

    def add_tenant(self, tenant: int, now: float) -> None:
        """Register a worker with an empty tree (the router's `insert("", url)`)."""
        self.root.tenants[tenant] = now
        self.size.setdefault(tenant, 0.0)
        self._nodes.setdefault(tenant, {})

    def prefix_match(self, blocks: Sequence[Hashable]) -> tuple[int, _Node]:
        """Blocks matched from the start, and the node where matching stopped."""
        node, index, end = self.root, 0, len(blocks)
        while index < end:
            child = node.children.get(blocks[index])
            if child is None:
                break
            key = child.key
            shared = len(key)
            if index + shared > end or blocks[index : index + shared] != key:
                shared = matching_blocks(key, blocks, index, end)
            index += shared
            node = child
            if shared < len(key):
                break  # a partial match ends here, as in tree.rs
        return index, node

    def touch(self, node: _Node, tenant: int, now: float) -> None:
        """Refresh `tenant`'s access time from `node` up to the root (tree.rs prefix_match)."""
        current: _Node | None = node
        while current is not None:
            if tenant in current.tenants:
                self._attach(current, tenant, now)
            current = current.parent

    def insert(self, blocks: Sequence[Hashable], tenant: int, now: float) -> None:
        """Record that `tenant` was sent `blocks`, splitting nodes where paths diverge."""
        node, index, end = self.root, 0, len(blocks)
        self.root.tenants[tenant] = now
        while index < end:
            child = node.children.get(blocks[index])
            if child is None:
                leaf = _Node(tuple(blocks[index:]), node)
                node.children[blocks[index]] = leaf
                self._attach(leaf, tenant, now)
                return
            key = child.key
            shared = len(key)
            if index + shared > end or blocks[index : index + shared] != key:
                shared = matching_blocks(key, blocks, index, end)
                if shared < len(key):
                    child = self._split(child, shared)
            self._attach(child, tenant, now)
            node, index = child, index + shared

    def _attach(self, node: _Node, tenant: int, now: float) -> None:
        if tenant not in node.tenants:
            self.size[tenant] = self.size.get(tenant, 0.0) + len(node.key) * self.chars_per_block
            self._nodes.setdefault(tenant, {})[node] = None
            lru = self._lru.get(tenant)
            if lru is not None:
                heapq.heappush(lru, (now, -node.depth, next(self._serial), node))
        node.tenants[tenant] = now

    def _split(self, node: _Node, at: int) -> _Node:
        parent = node.parent
        assert parent is not None
        head = _Node(node.key[:at], parent)
        head.tenants = dict(node.tenants)
        for tenant, stamp in head.tenants.items():
            self._nodes[tenant][head] = None
            lru = self._lru.get(tenant)
            if lru is not None:
                heapq.heappush(lru, (stamp, -head.depth, next(self._serial), head))
        parent.children[node.key[0]] = head
        node.key = node.key[at:]
        node.parent = head
        head.children[node.key[0]] = node
        return head

    def remove_tenant(self, tenant: int) -> None:
        """Forget a worker everywhere (tree.rs `remove_tenant`)."""
        for node in self._nodes.pop(tenant, {}):
            node.tenants.pop(tenant, None)
            self._unlink_if_empty(node)
        self.root.tenants.pop(tenant, None)
        self.size.pop(tenant, None)
        self._lru.pop(tenant, None)

    def _unlink_if_empty(self, node: _Node) -> None:
        """Drop `node`, and then its ancestors, while they hold no worker and no child."""
        while node is not self.root and not node.tenants and not node.children:
            parent = node.parent
            assert parent is not None
            if parent.children.get(node.key[0]) is node:
                del parent.children[node.key[0]]
            node = parent

    def evict_by_size(self, max_chars: float) -> None:
        """Cut every worker over `max_chars` back to it, least recently used leaves first."""
        for tenant in [t for t, size in self.size.items() if size > max_chars]:
            self._evict_tenant(tenant, max_chars)

    def _evict_tenant(self, tenant: int, max_chars: float) -> None:
        nodes, lru = self._nodes[tenant], self._lru_of(tenant)
        skipped = []
        while lru and self.size[tenant] > max_chars:
            entry = heapq.heappop(lru)
            stamp, depth, _, node = entry
            accessed = node.tenants.get(tenant)
            if accessed is None:
                continue  # no longer this worker's
            if accessed != stamp:
                heapq.heappush(lru, (accessed, depth, next(self._serial), node))
                continue  # accessed since it was queued: back in line at its new age
            if self._has_child_of(node, tenant):
                skipped.append(entry)  # not a leaf of this worker yet: keep it for later
                continue
            del node.tenants[tenant]
            del nodes[node]
            self.size[tenant] -= len(node.key) * self.chars_per_block
            self._unlink_if_empty(node)
        for entry in skipped:
            heapq.heappush(lru, entry)

    def _lru_of(self, tenant: int) -> list[tuple[float, int, int, _Node]]:
        lru = self._lru.get(tenant)
        if lru is None:
            nodes = self._nodes[tenant]
            lru = [(n.tenants[tenant], -n.depth, next(self._serial), n) for n in nodes]
            heapq.heapify(lru)
            self._lru[tenant] = lru
        return lru

    @staticmethod
    def _has_child_of(node: _Node, tenant: int) -> bool:
        return any(tenant in child.tenants for child in node.children.values())


class SmgCacheAware:
    """smg 1.13's `cache_aware` (`model_gateway/src/policies/cache_aware.rs`), on either index.

    `index="event"` is what smg does with gRPC workers: it knows what each replica's cache holds
    from the replica's KV events (here, read from the replica model itself); `index="tree"` is
    its approximate tree of what it sent where, for HTTP workers. Per request:

    1. The deepest prefix any worker holds; if it covers more than `cache_threshold` of the
       prompt, the holders of that depth are the candidates, less any that trip the spill gate
       (load above `balance_rel_threshold` x the mean load *and* above the mean plus a margin:
       `balance_abs_threshold` capped at two standard deviations of the mean, at least 4, see
       `spill_margin`); if every holder trips it, every worker that does not.
    2. Otherwise (a miss) every worker is a candidate.
    3. The candidate with the least expected wait wins, read here as the fewest requests in
       flight, ties broken at random (seeded).

    Every `eviction_interval_s` the tree is cut back to `max_tree_size_chars` in all (smg's
    `--max-tree-size` and `--eviction-interval-secs`; here each worker to an equal share).

    Not modelled: smg's warm-up slice (a young or emptied worker gets one miss in four and one
    hit in eight for its first minute; `--worker-warmup-secs 0` turns it off) and its expected
    wait from the engine's queued tokens and throughput (the in-flight count stands in).
    """

    def __init__(
        self, settings: RouterSettings, *, block_tokens: int, seed: int, index: str = "event"
    ) -> None:
        if index not in ("event", "tree"):
            raise ValueError(f"index is 'event' or 'tree', not {index!r}")
        self.settings = settings
        self.block_tokens = block_tokens
        self.index = index
        self.tree = ApproxTree(chars_per_block=block_tokens * settings.chars_per_token)
        self._known: set[int] = set()
        self._draws = random.Random(seed)
        self._next_eviction = settings.eviction_interval_s

    def select(self, spec: RequestSpec, workers: Sequence[WorkerView], now: float) -> int:
        """The worker for `spec` by the rules in the class docstring."""
        for worker in workers:
            if worker.id not in self._known:
                self._known.add(worker.id)
                self.tree.add_tenant(worker.id, now)
        depth, holders = self._holders(spec.prompt_blocks, workers)
        rate = depth * self.block_tokens / spec.prompt_tokens if spec.prompt_tokens else 0.0
        candidates = list(range(len(workers)))
        if rate > self.settings.cache_threshold and holders:
            candidates = self._unspilled(holders, workers) or self._unspilled(candidates, workers)
            candidates = candidates or list(range(len(workers)))
        chosen = self._least_loaded(candidates, workers)
        if self.index == "tree":
            self.tree.insert(spec.prompt_blocks, workers[chosen].id, now)
            self._evict_when_due(len(workers), now)
        return chosen

    def _least_loaded(self, candidates: Sequence[int], workers: Sequence[WorkerView]) -> int:
        """The candidate with the fewest in flight. Equal expected waits (idle workers, as
        often) are broken at random: a fixed order would send every miss to one worker and
        overfill its cache."""
        draw = self._draws.random
        chosen, best = candidates[0], (workers[candidates[0]].load, draw())
        for i in candidates[1:]:
            key = (workers[i].load, draw())
            if key < best:
                chosen, best = i, key
        return chosen

    def _evict_when_due(self, worker_count: int, now: float) -> None:
        """smg's periodic eviction of its tree (it runs on a timer; here, at the first request
        after each interval)."""
        if now < self._next_eviction:
            return
        self.tree.evict_by_size(self.settings.max_tree_size_chars / worker_count)
        while self._next_eviction <= now:
            self._next_eviction += self.settings.eviction_interval_s

    def forget(self, worker_id: int) -> None:
        """Drop a removed worker."""
        if worker_id in self._known:
            self.tree.remove_tenant(worker_id)
            self._known.discard(worker_id)

    def _holders(
        self, blocks: Sequence[Hashable], workers: Sequence[WorkerView]
    ) -> tuple[int, list[int]]:
        """The deepest match and the workers holding it."""
        if self.index == "tree":
            matched, node = self.tree.prefix_match(blocks)
            if not matched:
                return 0, []  # the root: every worker, and no prefix
            ids = {w.id: i for i, w in enumerate(workers)}
            return matched, [ids[t] for t in node.tenants if t in ids]
        depths = [worker.cached_prefix(blocks) for worker in workers]
        deepest = max(depths, default=0)
        return deepest, [i for i, d in enumerate(depths) if d == deepest and d > 0]

    def _unspilled(self, candidates: list[int], workers: Sequence[WorkerView]) -> list[int]:
        mean = sum(w.load for w in workers) / len(workers)
        # A worker stays unless its load passes both: the ratio and the capped margin.
        ceiling = max(
            mean * self.settings.balance_rel_threshold,
            mean + spill_margin(self.settings.balance_abs_threshold, mean),
        )
        return [i for i in candidates if workers[i].load <= ceiling]  # fmt: skip


def spill_margin(abs_threshold: int, mean_load: float) -> float:
    """smg 1.13's absolute spill margin: `--balance-abs-threshold`, capped at the in-flight
    count's natural swing at the pool's mean (two standard deviations of a Poisson count),
    never under four unless the threshold itself is lower (its `--help`)."""
    swing = max(4.0, 2.0 * math.sqrt(mean_load))
    return min(float(abs_threshold), swing)


class TieredCacheAware(SmgCacheAware):
    """Cache-aware routing that credits the KV tiers: the rule a tier-aware gateway would
    follow. smg 1.13 does not do this: its event index and its tree rank workers by matched
    depth alone, whatever tier holds the match (`smg_cache_aware`, unchanged, is its rule).

    It reads each worker's prefix by tier (`WorkerView.tiered_prefix`: the GPU's, then the
    host tier's past it) and scores the worker by the prefill time the prefix saves, from the
    replica's profile: a GPU block saves its recompute; a host block saves its recompute less
    its transfer to the GPU. At equal depth the GPU beats the host, which beats a miss; a
    deeper host prefix beats a shallower GPU one only when it saves more time. A storage
    backend is shared by every replica of the model, so it ranks none above another: it is
    left out. Per request:

    1. If the deepest prefix any worker holds (in either tier) covers more than
       `cache_threshold` of the prompt, the worker saving the most among those the spill gate
       lets through (smg's, see `SmgCacheAware`) wins; ties go to the fewest in flight, then at
       random; with every worker spilled, the most saving of all.
    2. Otherwise (a miss) the fewest in flight, as smg's.
    """

    def __init__(
        self, settings: RouterSettings, *, block_tokens: int, seed: int, profile: ReplicaProfile
    ) -> None:
        super().__init__(settings, block_tokens=block_tokens, seed=seed, index="event")
        self.profile = profile

    def select(self, spec: RequestSpec, workers: Sequence[WorkerView], now: float) -> int:
        """The worker for `spec` by the rules in the class docstring."""
        tiers = [worker.tiered_prefix(spec.prompt_blocks) for worker in workers]
        deepest = max(gpu + host for gpu, host in tiers)
        rate = deepest * self.block_tokens / spec.prompt_tokens if spec.prompt_tokens else 0.0
        if rate <= self.settings.cache_threshold:
            return self._least_loaded(range(len(workers)), workers)
        savings = [self.saving(spec.prompt_tokens, gpu, host) for gpu, host in tiers]
        candidates = self._unspilled(list(range(len(workers))), workers)
        candidates = candidates or list(range(len(workers)))
        best = max(savings[i] for i in candidates)
        return self._least_loaded([i for i in candidates if savings[i] == best], workers)

    def saving(self, prompt_tokens: int, gpu_blocks: int, host_blocks: int) -> float:
        """Seconds of prefill a prefix of `gpu_blocks` on the GPU then `host_blocks` on the
        host saves a prompt: the recompute of them all, less the host blocks' transfer."""
        profile = self.profile
        cached = min((gpu_blocks + host_blocks) * self.block_tokens, max(prompt_tokens - 1, 0))
        recompute = profile.prefill_seconds(prompt_tokens, 0) - profile.prefill_seconds(
            prompt_tokens - cached, cached
        )
        host_tokens = max(0, cached - gpu_blocks * self.block_tokens)
        return recompute - profile.load_seconds(host_tokens=host_tokens, storage_tokens=0)
