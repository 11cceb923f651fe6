"""Properties of the block radix cache: SGLang's accounting holds under any operation sequence."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from radixfleet.replica.radix import CacheFullError, Node, RadixCache

BLOCK = 4
CAPACITY = 64

prompts = st.lists(st.integers(min_value=0, max_value=3), min_size=0, max_size=12)


class CacheMachine(RuleBasedStateMachine):
    """Requests lock, allocate, insert, unlock and free in random order; evictions interleave."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = RadixCache(capacity_tokens=CAPACITY, block_tokens=BLOCK)
        self.held: list[tuple[Node, int]] = []  # (locked node, private tokens)
        self.now = 0.0

    @rule(blocks=prompts, private=st.integers(min_value=0, max_value=20))
    def start_request(self, blocks: list[int], private: int) -> None:
        self.now += 1
        node = self.cache.match(blocks, now=self.now)
        assert node.depth * BLOCK <= len(blocks) * BLOCK  # hits never exceed the prompt
        self.cache.lock(node)
        try:
            self.cache.allocate(private)
        except CacheFullError:
            self.cache.unlock(node)
            return
        self.held.append((node, private))

    @precondition(lambda self: bool(self.held))
    @rule(index=st.integers(min_value=0), blocks=prompts)
    def finish_request(self, index: int, blocks: list[int]) -> None:
        self.now += 1
        node, private = self.held.pop(index % len(self.held))
        self.cache.free(private)
        # Inserting more than was held privately may not fit; the cache must stay valid.
        with contextlib.suppress(CacheFullError):
            self.cache.insert(blocks, now=self.now)
        self.cache.unlock(node)

    @rule(tokens=st.integers(min_value=0, max_value=CAPACITY))
    def evict(self, tokens: int) -> None:
        self.cache.evict(tokens)

    @rule()
    def flush(self) -> None:
        flushed = self.cache.flush()
        assert flushed == (self.cache.used_tokens == 0)

    @invariant()
    def counts_add_up(self) -> None:
        cache = self.cache
        assert cache.used_tokens + cache.evictable_tokens + cache.available_tokens == CAPACITY
        assert 0 <= cache.available_tokens <= CAPACITY
        assert cache.used_tokens >= 0 and cache.evictable_tokens >= 0

    @invariant()
    def locked_paths_survive(self) -> None:
        for node, _ in self.held:
            walk: Node | None = node
            while walk is not None and walk is not self.cache.root:
                assert walk.alive and walk.ref > 0
                walk = walk.parent

    @invariant()
    def tree_matches_token_count(self) -> None:
        nodes, tokens, stack = 0, 0, list(self.cache.root.children.values())
        while stack:
            node = stack.pop()
            assert node.depth == node.parent.depth + len(node.key)  # type: ignore[union-attr]
            assert node.ref >= sum(child.ref for child in node.children.values())
            nodes, tokens = nodes + 1, tokens + len(node.key) * BLOCK
            stack.extend(node.children.values())
        assert (nodes, tokens) == (self.cache.node_count, self.cache.cached_tokens)


CacheMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestCacheMachine = CacheMachine.TestCase


@given(blocks=prompts, limit=st.integers(min_value=0, max_value=12))
def test_match_never_exceeds_prompt_or_limit(blocks: list[int], limit: int) -> None:
    cache = RadixCache(capacity_tokens=CAPACITY, block_tokens=BLOCK)
    cache.insert(blocks, now=0.0)
    node = cache.match(blocks, now=1.0, limit=limit)
    assert node.depth == min(limit, len(blocks))


def test_lru_evicts_least_recently_used_first() -> None:
    cache = RadixCache(capacity_tokens=8, block_tokens=4)
    cache.insert(["a"], now=1.0)
    cache.insert(["b"], now=2.0)
    cache.match(["a"], now=3.0)  # touching "a" makes "b" the oldest
    cache.allocate(4)
    assert cache.match(["a"], now=4.0).depth == 1
    assert cache.match(["b"], now=4.0).depth == 0


def test_referenced_nodes_are_never_evicted() -> None:
    cache = RadixCache(capacity_tokens=8, block_tokens=4)
    node = cache.insert(["a", "b"], now=0.0)
    cache.lock(node)
    assert cache.evict(8) == 0
    try:
        cache.allocate(4)
    except CacheFullError:
        pass
    else:  # pragma: no cover - the cache is full of locked blocks
        raise AssertionError("allocated over locked blocks")
    assert (cache.used_tokens, cache.evictable_tokens) == (8, 0)


def test_a_path_inserted_locked_is_evictable_once_unlocked() -> None:
    cache = RadixCache(capacity_tokens=16, block_tokens=4)
    node = cache.insert(["a", "b"], now=0.0, lock=True)
    assert (cache.used_tokens, cache.evictable_tokens) == (8, 0)
    assert cache.evict(16) == 0
    cache.unlock(node)
    assert (cache.used_tokens, cache.evictable_tokens) == (0, 8)
    assert cache.evict(16) == 8
    assert cache.match(["a", "b"], now=1.0).depth == 0


def test_parent_becomes_evictable_after_its_children_go() -> None:
    cache = RadixCache(capacity_tokens=16, block_tokens=4)
    cache.insert(["a", "b", "c"], now=0.0)
    cache.insert(["a", "x"], now=1.0)  # splits "a" off as the shared parent
    assert cache.node_count == 3
    assert cache.evict(16) == 16
    assert (cache.cached_tokens, cache.node_count) == (0, 0)


def test_match_splits_a_node_where_the_match_ends() -> None:
    cache = RadixCache(capacity_tokens=64, block_tokens=4)
    cache.insert(["a", "b", "c", "d"], now=0.0)
    node = cache.match(["a", "b", "z"], now=1.0)
    assert (node.depth, node.key, cache.node_count) == (2, ("a", "b"), 2)
    cache.lock(node)
    assert (cache.used_tokens, cache.evictable_tokens) == (8, 8)
    assert cache.evict(64) == 8  # only the unlocked tail ("c", "d") goes
