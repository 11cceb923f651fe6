"""A block-level radix prefix cache with a KV token budget, in the way SGLang's RadixCache counts.

Prompts are sequences of fixed-size token blocks; a block's key is anything hashable (a tuple of
token ids in the emulator, a trace's block hash in the twin). Each tree node holds one block.
Running requests *lock* the path they use; unlocked nodes are *evictable* and go in LRU order
when space is needed. Tokens a request holds outside the tree (a partial last block, decode
tokens) are *private*. The three counts SGLang reports follow:

    used = locked tree tokens + private tokens
    evictable = unlocked tree tokens
    available = capacity - used - evictable

Every operation costs O(blocks touched) plus O(log n) per evicted node.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Sequence


class CacheFullError(RuntimeError):
    """Not enough free plus evictable tokens for an allocation (the scheduler reserves ahead)."""


class Node:
    """One cached block: its key, its place in the tree, its lock count and last use."""

    __slots__ = ("alive", "children", "depth", "key", "last_access", "parent", "ref")

    def __init__(self, *, key: Hashable, parent: Node | None, now: float) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[Hashable, Node] = {}
        self.ref = 0
        self.last_access = now
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.alive = True


class RadixCache:
    """The prefix cache of one replica, counting tokens against `capacity_tokens`."""

    def __init__(self, *, capacity_tokens: int, block_tokens: int) -> None:
        if capacity_tokens <= 0 or block_tokens <= 0:
            raise ValueError("capacity_tokens and block_tokens must be positive")
        self.capacity_tokens = capacity_tokens
        self.block_tokens = block_tokens
        self.root = Node(key=None, parent=None, now=0.0)
        self.root.ref = 1  # the root is never evicted
        self._tree_tokens = 0
        self._locked_tokens = 0
        self._private_tokens = 0
        self.evicted_tokens_total = 0
        self._heap: list[tuple[float, int, Node]] = []
        self._serial = itertools.count()
        self._nodes = 0

    # -- the accounting SGLang reports -------------------------------------------------------

    @property
    def used_tokens(self) -> int:
        """Tokens held by running requests: locked tree nodes and private tokens."""
        return self._locked_tokens + self._private_tokens

    @property
    def evictable_tokens(self) -> int:
        """Cached tokens no running request uses; freed in LRU order on demand."""
        return self._tree_tokens - self._locked_tokens

    @property
    def available_tokens(self) -> int:
        """Tokens neither used nor cached."""
        return self.capacity_tokens - self.used_tokens - self.evictable_tokens

    @property
    def cached_tokens(self) -> int:
        """All tokens in the tree, locked or not."""
        return self._tree_tokens

    @property
    def node_count(self) -> int:
        """Cached blocks (tree nodes, root excluded)."""
        return self._nodes

    # -- lookups and locks -------------------------------------------------------------------

    def match(self, blocks: Sequence[Hashable], *, now: float, limit: int | None = None) -> Node:
        """The deepest cached node along `blocks` (at most `limit` blocks); touches the path."""
        node = self.root
        end = len(blocks) if limit is None else min(limit, len(blocks))
        children = node.children
        for index in range(end):
            child = children.get(blocks[index])
            if child is None:
                break
            child.last_access = now
            node = child
            children = node.children
        return node

    def lock(self, node: Node) -> None:
        """Mark the path to `node` as in use by one more request (no longer evictable)."""
        while node is not self.root:
            if node.ref == 0:
                self._locked_tokens += self.block_tokens
            node.ref += 1
            assert node.parent is not None
            node = node.parent

    def unlock(self, node: Node) -> None:
        """Release one request's hold on the path to `node`; unused nodes become evictable."""
        while node is not self.root:
            node.ref -= 1
            if node.ref == 0:
                self._locked_tokens -= self.block_tokens
                if not node.children:
                    self._push(node)
            assert node.parent is not None
            node = node.parent

    # -- private tokens ----------------------------------------------------------------------

    def allocate(self, tokens: int) -> None:
        """Take `tokens` private tokens, evicting cached blocks if free space is short."""
        if tokens > self.available_tokens:
            self.evict(tokens - self.available_tokens)
            if tokens > self.available_tokens:
                raise CacheFullError(f"need {tokens} tokens, {self.available_tokens} available")
        self._private_tokens += tokens

    def free(self, tokens: int) -> None:
        """Give back `tokens` private tokens."""
        if tokens > self._private_tokens:
            raise ValueError(f"freeing {tokens} tokens, only {self._private_tokens} private")
        self._private_tokens -= tokens

    # -- insertion and eviction --------------------------------------------------------------

    def insert(self, blocks: Sequence[Hashable], *, now: float) -> Node:
        """Cache `blocks` as a path and return its last node; new nodes start unlocked.

        Callers insert tokens they already hold privately and free those right before, so room
        is normally there; if not, cached blocks off this path are evicted first.
        """
        node = self.root
        index = 0
        for index in range(len(blocks)):
            child = node.children.get(blocks[index])
            if child is None:
                break
            child.last_access = now
            node = child
        else:
            return node
        self._make_room(node=node, tokens=(len(blocks) - index) * self.block_tokens)
        for key in blocks[index:]:
            child = Node(key=key, parent=node, now=now)
            node.children[key] = child
            node = child
        added = (len(blocks) - index) * self.block_tokens
        self._tree_tokens += added
        self._nodes += len(blocks) - index
        self._push(node)
        return node

    def evict(self, tokens: int) -> int:
        """Free at least `tokens` evictable tokens, least recently used leaves first."""
        freed = 0
        while freed < tokens and self._heap:
            stamp, _, node = heapq.heappop(self._heap)
            if not node.alive or node.ref > 0 or node.children:
                continue  # no longer a candidate; it is pushed again when it becomes one
            if node.last_access > stamp:
                self._push(node)  # touched since it was queued: requeue at its new age
                continue
            self._remove(node)
            freed += self.block_tokens
        self.evicted_tokens_total += freed
        return freed

    def flush(self) -> bool:
        """Drop every cached block if no request holds any; False (and no change) otherwise."""
        if self.used_tokens:
            return False
        self.root.children.clear()
        self._tree_tokens = 0
        self._nodes = 0
        self._heap.clear()
        return True

    def _make_room(self, *, node: Node, tokens: int) -> None:
        if tokens <= self.available_tokens:
            return
        self.lock(node)  # the path being extended must survive the eviction it triggers
        try:
            self.evict(tokens - self.available_tokens)
        finally:
            self.unlock(node)
        if tokens > self.available_tokens:
            raise CacheFullError(f"inserting {tokens} tokens, {self.available_tokens} available")

    def _remove(self, node: Node) -> None:
        parent = node.parent
        assert parent is not None
        del parent.children[node.key]
        node.alive = False
        self._tree_tokens -= self.block_tokens
        self._nodes -= 1
        if parent is not self.root and parent.ref == 0 and not parent.children:
            self._push(parent)

    def _push(self, node: Node) -> None:
        heapq.heappush(self._heap, (node.last_access, next(self._serial), node))
        if len(self._heap) > 4 * self._nodes + 1024:
            self._compact()

    def _compact(self) -> None:
        # Stale heap entries pile up when nodes are locked and unlocked repeatedly.
        fresh = {
            id(node): node
            for _, _, node in self._heap
            if node.alive and node.ref == 0 and not node.children
        }
        self._heap = [(node.last_access, next(self._serial), node) for node in fresh.values()]
        heapq.heapify(self._heap)
