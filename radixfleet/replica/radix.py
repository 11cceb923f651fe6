"""A block-level radix prefix cache with a KV token budget, in the way SGLang's RadixCache counts.

Prompts are sequences of fixed-size token blocks; a block's key is anything hashable (a tuple of
token ids in the emulator, a trace's block hash in the twin). As in SGLang, the tree is path
compressed: a node holds a run of blocks, is split where two sequences diverge or where a match
ends, and is evicted whole. Running requests *lock* the path they use; unlocked nodes are
*evictable* and go in LRU order (leaves first) when space is needed. Tokens a request holds
outside the tree (a partial last block, decode tokens) are *private*. The counts SGLang reports:

    used = locked tree tokens + private tokens
    evictable = unlocked tree tokens
    available = capacity - used - evictable

Matching and inserting cost O(blocks) plus O(nodes on the path); eviction O(log n) per node.

A `CacheListener` hears what SGLang publishes as KV events: blocks stored (a new leaf under its
parent), blocks removed (an evicted node) and the whole cache cleared (a flush); it is also told
of splits, which change no block but change which node holds it. The twin has no listener.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Protocol


class CacheFullError(RuntimeError):
    """Not enough free plus evictable tokens for an allocation (the scheduler reserves ahead)."""


class CacheListener(Protocol):
    """Hears the changes SGLang reports as KV events, in the order they happen."""

    def stored(self, node: Node) -> None:
        """`node` was cached as a new run under `node.parent` (the root for a first block)."""

    def split(self, head: Node, tail: Node) -> None:
        """A run was cut in two: `head` took its first blocks, `tail` keeps the rest."""

    def removed(self, node: Node) -> None:
        """`node` was evicted (its `parent` still says where it hung)."""

    def cleared(self) -> None:
        """Every cached block was dropped."""


class Node:
    """A run of cached blocks: its keys, place in the tree, lock count, last use and hits."""

    __slots__ = ("alive", "children", "depth", "hits", "key", "last_access", "parent", "ref")

    def __init__(
        self, *, key: tuple[Hashable, ...], parent: Node | None, now: float, ref: int = 0
    ) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[Hashable, Node] = {}
        self.ref = ref
        self.last_access = now
        self.depth: int = len(key) if parent is None else parent.depth + len(key)
        self.alive = True
        self.hits = 0  # matches by a request since it was cached (SGLang's selective write)


def matching_blocks(
    key: tuple[Hashable, ...], blocks: Sequence[Hashable], start: int, end: int
) -> int:
    """How many leading blocks of `key` equal blocks[start:end] (a node's key against a prompt)."""
    stop = min(len(key), end - start)
    window = blocks[start : start + stop]
    mine = key if stop == len(key) else key[:stop]
    if mine == (window if isinstance(window, tuple) else tuple(window)):
        return stop
    count = 0
    for theirs, ours in zip(window, mine, strict=False):
        if theirs != ours:
            break
        count += 1
    return count


class RadixCache:
    """The prefix cache of one replica, counting tokens against `capacity_tokens`."""

    def __init__(self, *, capacity_tokens: int, block_tokens: int) -> None:
        if capacity_tokens <= 0 or block_tokens <= 0:
            raise ValueError("capacity_tokens and block_tokens must be positive")
        self.capacity_tokens = capacity_tokens
        self.block_tokens = block_tokens
        self.root = Node(key=(), parent=None, now=0.0, ref=1)  # the root is never evicted
        self._tree_tokens = 0
        self._locked_tokens = 0
        self._private_tokens = 0
        self.evicted_tokens_total = 0
        self._heap: list[tuple[float, int, Node]] = []
        self._serial = itertools.count()
        self._nodes = 0
        self.listener: CacheListener | None = None
        # Told of each node eviction removes, before it goes (a lower tier keeps a copy).
        self.on_evict: Callable[[Node], None] | None = None

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
        return self.capacity_tokens - self._private_tokens - self._tree_tokens

    @property
    def cached_tokens(self) -> int:
        """All tokens in the tree, locked or not."""
        return self._tree_tokens

    @property
    def node_count(self) -> int:
        """Tree nodes, root excluded."""
        return self._nodes

    def runs(self) -> Iterator[Node]:
        """Every cached node, parents before children (a snapshot of what `stored` reported)."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    # -- lookups and locks -------------------------------------------------------------------

    def match(self, blocks: Sequence[Hashable], *, now: float, limit: int | None = None) -> Node:
        """The node ending where `blocks` (at most `limit` of them) stop matching; touches it.

        A match that ends inside a node splits it there, so the answer always ends exactly at
        the matched depth (`node.depth` blocks), ready to be locked.
        """
        end = len(blocks) if limit is None else min(limit, len(blocks))
        node, index = self.root, 0
        while index < end:
            child = node.children.get(blocks[index])
            if child is None:
                break
            key = child.key
            matched = len(key)
            # The usual case, a whole node matched, is one tuple comparison in C.
            if index + matched > end or blocks[index : index + matched] != key:
                matched = matching_blocks(key, blocks, index, end)
                if matched < len(key):
                    child = self._split(child, matched)
            if now > child.last_access:  # a lower tier stores a GPU block at its own age
                child.last_access = now
            child.hits += 1
            node, index = child, index + matched
        return node

    def cached_prefix(self, blocks: Sequence[Hashable], *, limit: int | None = None) -> int:
        """How many leading `blocks` (at most `limit`) the cache holds now, changing nothing (no
        split, no touch): what a gateway following this replica's KV events knows of it."""
        end = len(blocks) if limit is None else min(limit, len(blocks))
        node, index = self.root, 0
        while index < end:
            child = node.children.get(blocks[index])
            if child is None:
                return index
            matched = matching_blocks(child.key, blocks, index, end)
            index += matched
            if matched < len(child.key):
                return index
            node = child
        return index

    def path(self, node: Node) -> list[Hashable]:
        """The blocks from the root to the end of `node`: the prefix it caches."""
        runs = []
        while node is not self.root:
            runs.append(node.key)
            node = node.parent  # type: ignore[assignment]  # only the root has no parent
        return [block for run in reversed(runs) for block in run]

    def lock(self, node: Node) -> None:
        """Mark the path to `node` as in use by one more request (no longer evictable)."""
        block = self.block_tokens
        while node is not self.root:
            if node.ref == 0:
                self._locked_tokens += len(node.key) * block
            node.ref += 1
            node = node.parent  # type: ignore[assignment]  # only the root has no parent

    def unlock(self, node: Node) -> None:
        """Release one request's hold on the path to `node`; unused nodes become evictable."""
        block = self.block_tokens
        while node is not self.root:
            node.ref -= 1
            if node.ref == 0:
                self._locked_tokens -= len(node.key) * block
                if not node.children:
                    self._push(node)
            node = node.parent  # type: ignore[assignment]  # only the root has no parent

    # -- private tokens ----------------------------------------------------------------------

    def allocate(self, tokens: int) -> None:
        """Take `tokens` private tokens, evicting cached blocks if free space is short."""
        short = tokens - self.available_tokens
        if short > 0:
            self.evict(short)
            if tokens > self.available_tokens:
                raise CacheFullError(f"need {tokens} tokens, {self.available_tokens} available")
        self._private_tokens += tokens

    def free(self, tokens: int) -> None:
        """Give back `tokens` private tokens."""
        if tokens > self._private_tokens:
            raise ValueError(f"freeing {tokens} tokens, only {self._private_tokens} private")
        self._private_tokens -= tokens

    # -- insertion and eviction --------------------------------------------------------------

    def insert(self, blocks: Sequence[Hashable], *, now: float, lock: bool = False) -> Node:
        """Cache `blocks` as a path and return the node ending at its end, locked if `lock`.

        Callers insert tokens they already hold privately and free those right before, so room
        is normally there; if not, cached blocks off this path are evicted first.
        """
        node = self.match(blocks, now=now)
        index = node.depth
        if index < len(blocks):
            tokens = (len(blocks) - index) * self.block_tokens
            self._make_room(node=node, tokens=tokens)
            leaf = Node(key=tuple(blocks[index:]), parent=node, now=now)
            node.children[blocks[index]] = leaf
            self._tree_tokens += tokens
            self._nodes += 1
            if self.listener is not None:
                self.listener.stored(leaf)
            if not lock:
                self._push(leaf)  # evictable now; a locked leaf is queued when it is unlocked
            node = leaf
        if lock:
            self.lock(node)
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
            if self.on_evict is not None:
                self.on_evict(node)
            freed += self._remove(node)
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
        if self.listener is not None:
            self.listener.cleared()
        return True

    def _split(self, node: Node, at: int) -> Node:
        """Cut `node` after `at` blocks; return the new head. `node` keeps its tail and identity
        (its locks, heap entries and the requests pointing at it stay valid)."""
        parent = node.parent
        assert parent is not None
        head = Node(key=node.key[:at], parent=parent, now=node.last_access, ref=node.ref)
        head.hits = node.hits
        parent.children[node.key[0]] = head
        node.key = node.key[at:]
        node.parent = head
        head.children[node.key[0]] = node
        self._nodes += 1
        if self.listener is not None:
            self.listener.split(head, node)
        return head

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

    def _remove(self, node: Node) -> int:
        parent = node.parent
        assert parent is not None
        del parent.children[node.key[0]]
        node.alive = False
        tokens = len(node.key) * self.block_tokens
        self._tree_tokens -= tokens
        self._nodes -= 1
        if self.listener is not None:
            self.listener.removed(node)
        if parent is not self.root and parent.ref == 0 and not parent.children:
            self._push(parent)
        return tokens

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
