"""The emulator's KV events: what a subscriber rebuilds from them is exactly the replica's cache.

A subscriber here plays smg's part: it applies `stored` (placing each page after its parent),
`removed` and `cleared` events to a set of pages, keyed by the hash each event carries. Whatever
the cache does (inserts that split runs, evictions under pressure, flushes, restarts), the pages
the subscriber holds are the cache's pages, each with SGLang's chained SHA-256 hash.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from smg_grpc_proto.generated import common_pb2 as pb

from radixfleet.emulator.kv_events import KvEventLog, as_int64, page_hash
from radixfleet.profile import ReplicaProfile
from radixfleet.replica import ReplicaModel
from radixfleet.replica.radix import RadixCache
from radixfleet.replica.tiers import HostTierSpec, WritePolicy

BLOCK = 4


class Subscriber:
    """smg's side of the stream: the pages it believes the replica holds, by hash."""

    def __init__(self) -> None:
        self.pages: dict[int, tuple[int | None, tuple[int, ...]]] = {}  # hash -> (parent, tokens)
        self.cursor = 0

    def apply(self, batch: pb.KvEventBatch) -> None:
        assert batch.sequence_number == self.cursor + 1 or self.cursor == 0 or batch.snapshot.count
        self.cursor = batch.sequence_number
        for event in batch.events:
            kind = event.WhichOneof("data")
            if kind == "cleared":
                self.pages.clear()
            elif kind == "stored":
                self._store(event.stored)
            else:
                for block_hash in event.removed.block_hashes:
                    del self.pages[block_hash]  # a removal of an unknown page is a bug

    def _store(self, stored: pb.KvBlocksStored) -> None:
        parent = stored.parent_block_hash if stored.HasField("parent_block_hash") else None
        assert parent is None or parent in self.pages, "a page must follow its parent"
        for block in stored.blocks:
            assert block.block_size == len(block.token_ids) == BLOCK
            self.pages[block.block_hash] = (parent, tuple(block.token_ids))
            parent = block.block_hash

    def sequences(self) -> set[tuple[int, ...]]:
        """Every cached prefix, rebuilt by following parents (the index smg keeps)."""
        return {self._prefix(h) for h in self.pages}

    def _prefix(self, block_hash: int) -> tuple[int, ...]:
        parent, tokens = self.pages[block_hash]
        return tokens if parent is None else self._prefix(parent) + tokens


def cache_sequences(cache: RadixCache) -> set[tuple[int, ...]]:
    """Every cached prefix, page by page, read from the tree itself."""
    out: set[tuple[int, ...]] = set()

    def walk(node: object, prefix: tuple[int, ...]) -> Iterator[None]:
        for child in node.children.values():  # type: ignore[attr-defined]
            path = prefix
            for page in child.key:
                path += page
                out.add(path)
            yield from walk(child, path)

    list(walk(cache.root, ()))
    return out


def reference_hashes(tokens: tuple[int, ...]) -> list[int]:
    """SGLang's page hashes, written out again from its definition."""
    hashes, prior = [], b""
    for start in range(0, len(tokens), BLOCK):
        digest = hashlib.sha256(
            prior + b"".join(t.to_bytes(4, "little") for t in tokens[start : start + BLOCK])
        ).digest()
        hashes.append(int.from_bytes(digest[:8], "big", signed=True))
        prior = digest
    return hashes


def pages(tokens: list[int]) -> tuple[tuple[int, ...], ...]:
    end = len(tokens) - len(tokens) % BLOCK
    return tuple(tuple(tokens[i : i + BLOCK]) for i in range(0, end, BLOCK))


def new_log(
    capacity_tokens: int = 64, host: HostTierSpec | None = None
) -> tuple[ReplicaModel, KvEventLog]:
    profile = ReplicaProfile().model_copy(update={"kv_capacity_tokens": capacity_tokens})
    model = ReplicaModel(profile=profile, now=0.0, block_tokens=BLOCK, warm=True, host_tier=host)
    return model, KvEventLog(model)


def drain(log: KvEventLog, subscriber: Subscriber) -> None:
    log.flush()
    for batch in log.history:
        if batch.sequence_number > subscriber.cursor:
            subscriber.apply(batch)


def test_a_stored_run_is_one_event_per_page_with_sglangs_chained_hash() -> None:
    model, log = new_log()
    tokens = tuple(range(1, 13))
    model.cache.insert(pages(list(tokens)), now=1.0)
    log.flush()
    events = [e for batch in log.history for e in batch.events]
    assert events[0].WhichOneof("data") == "cleared"  # the start-up reset
    stored = [e.stored for e in events[1:]]
    assert [s.blocks[0].block_hash for s in stored] == reference_hashes(tokens)
    assert not stored[0].HasField("parent_block_hash")
    assert [s.parent_block_hash for s in stored[1:]] == reference_hashes(tokens)[:2]
    assert as_int64(page_hash(tokens[:4], prior=None)) == reference_hashes(tokens)[0]


def test_a_split_says_nothing_and_a_branch_chains_from_the_shared_page() -> None:
    model, log = new_log()
    model.cache.insert(pages(list(range(12))), now=1.0)
    log.flush()
    before = log.sequence
    model.cache.insert(pages([0, 1, 2, 3, 9, 9, 9, 9]), now=2.0)  # splits the run after page 1
    log.flush()
    (batch,) = [b for b in log.history if b.sequence_number > before]
    (event,) = batch.events
    assert event.stored.parent_block_hash == reference_hashes(tuple(range(12)))[0]
    assert event.stored.blocks[0].block_hash == reference_hashes((0, 1, 2, 3, 9, 9, 9, 9))[1]


def test_eviction_removes_the_pages_by_the_hashes_they_were_stored_with() -> None:
    model, log = new_log(capacity_tokens=16)
    subscriber = Subscriber()
    model.cache.insert(pages(list(range(8))), now=1.0)
    model.cache.insert(pages(list(range(100, 108))), now=2.0)
    model.cache.insert(pages(list(range(200, 208))), now=3.0)  # evicts the oldest run
    drain(log, subscriber)
    assert subscriber.sequences() == cache_sequences(model.cache)
    assert (0, 1, 2, 3) not in subscriber.sequences()


operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.lists(st.integers(0, 3), min_size=4, max_size=40)),
        st.tuples(st.just("flush"), st.just([])),
        st.tuples(st.just("subscribe"), st.just([])),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(operations)
def test_any_history_rebuilds_the_cache_exactly(ops: list[tuple[str, list[int]]]) -> None:
    """Small alphabet, small cache: many shared prefixes, splits and evictions."""
    model, log = new_log(capacity_tokens=48)
    live = Subscriber()
    late: Subscriber | None = None
    for step, (kind, tokens) in enumerate(ops):
        if kind == "insert":
            model.cache.insert(pages(tokens), now=float(step))
        elif kind == "flush":
            model.cache.flush()
        else:  # a subscriber that joins now gets a snapshot, then what follows
            log.flush()
            late = Subscriber()
            for batch in log.snapshot():
                late.apply(batch)
        drain(log, live)
        if late is not None:
            for batch in log.history:
                if batch.sequence_number > late.cursor:
                    late.apply(batch)
        assert live.sequences() == cache_sequences(model.cache)
        if late is not None:
            assert late.sequences() == cache_sequences(model.cache)


def test_a_restarted_replica_announces_an_empty_cache() -> None:
    model, log = new_log()
    subscriber = Subscriber()
    model.cache.insert(pages(list(range(8))), now=1.0)
    drain(log, subscriber)
    model.crash(now=2.0)
    model.restart(now=3.0)
    drain(log, subscriber)
    assert subscriber.pages == {} and cache_sequences(model.cache) == set()


@pytest.mark.parametrize("cursor", ["current", "in-history", "zero", "ahead"])
def test_a_subscription_resumes_from_its_cursor_or_starts_from_a_snapshot(cursor: str) -> None:
    async def scenario() -> list[pb.KvEventBatch]:
        model, log = new_log(capacity_tokens=1024)
        for i in range(5):
            model.cache.insert(pages([i] * 8), now=float(i))
            log.flush()
        assert log.sequence == 5
        start = {"current": 5, "in-history": 3, "zero": 0, "ahead": 99}[cursor]
        stream = log.subscribe(start)
        first = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0)  # subscribed: what happens next is live
        model.cache.insert(pages([7] * 8), now=9.0)  # batch 6, flushed by the loop
        got = [await asyncio.wait_for(first, 1)]
        while got[-1].sequence_number != 6:
            got.append(await asyncio.wait_for(anext(stream), 1))
        await stream.aclose()
        return got

    got = asyncio.run(scenario())
    numbers = [b.sequence_number for b in got]
    snapshots = [b for b in got if b.snapshot.count]
    if cursor == "current":
        assert numbers == [6] and not snapshots
    elif cursor == "in-history":
        assert numbers == [4, 5, 6] and not snapshots
    else:  # no usable cursor: the cache as it is now, then the live batch
        assert numbers == [5, 6] and snapshots == got[:1]
        rebuilt = Subscriber()
        for batch in got:
            rebuilt.apply(batch)
        assert len(rebuilt.sequences()) == 6 * 2  # six runs of two pages


class TierSubscriber(Subscriber):
    """A subscriber that keeps the events of one tier only (`cleared` resets every tier)."""

    def __init__(self, tier: int) -> None:
        super().__init__()
        self.tier = tier
        self.media: set[str] = set()

    def apply(self, batch: pb.KvEventBatch) -> None:
        kept = [e for e in batch.events if self._ours(e)]
        for event in kept:
            kind = event.WhichOneof("data")
            if kind in ("stored", "removed"):
                self.media.add(getattr(event, kind).medium)
        super().apply(pb.KvEventBatch(sequence_number=batch.sequence_number, events=kept,
                                      snapshot=batch.snapshot))  # fmt: skip

    def _ours(self, event: pb.KvCacheEvent) -> bool:
        kind = event.WhichOneof("data")
        return kind == "cleared" or getattr(event, kind).tier == self.tier


def host_sequences(model: ReplicaModel) -> set[tuple[int, ...]]:
    assert model.host is not None
    out: set[tuple[int, ...]] = set()
    prefixes: dict[object, tuple[int, ...]] = {model.host.root: ()}
    for node in model.host.runs():
        path = prefixes[node.parent]
        for page in node.key:
            path += page
            out.add(path)
        prefixes[node] = path
    return out


@pytest.mark.parametrize(
    "policy", [WritePolicy.WRITE_BACK, WritePolicy.WRITE_THROUGH], ids=lambda p: p.value
)
def test_the_host_tier_publishes_its_pages_with_tier_host_as_hiradix_cache_does(
    policy: WritePolicy,
) -> None:
    model, log = new_log(capacity_tokens=16, host=HostTierSpec(tokens=24, write_policy=policy))
    device, host = TierSubscriber(pb.KV_CACHE_TIER_DEVICE), TierSubscriber(pb.KV_CACHE_TIER_HOST)
    for step, start in enumerate((0, 100, 200, 300, 400, 500)):  # GPU: two runs, host: three
        model.cache.insert(pages(list(range(start, start + 8))), now=float(step))
        drain(log, device)
        drain(log, host)
        assert device.sequences() == cache_sequences(model.cache)
        assert host.sequences() == host_sequences(model)
    assert tuple(range(300, 308)) in host.sequences()  # evicted by the GPU, kept on the host
    assert (0, 1, 2, 3) not in host.sequences()  # evicted by the host pool too: removed
    assert (device.media, host.media) == ({"GPU"}, {"CPU_PINNED"})
    assert set(reference_hashes(tuple(range(300, 308)))) <= host.pages.keys()


def test_a_late_subscriber_gets_the_host_tier_in_its_snapshot() -> None:
    model, log = new_log(capacity_tokens=8, host=HostTierSpec(tokens=64))
    for step, start in enumerate((0, 100, 200)):
        model.cache.insert(pages(list(range(start, start + 8))), now=float(step))
    log.flush()
    late = TierSubscriber(pb.KV_CACHE_TIER_HOST)
    for batch in log.snapshot():
        late.apply(batch)
    assert late.sequences() == host_sequences(model) != set()
