"""KV-cache events as SGLang publishes them, streamed to the gateway over `SubscribeKvEvents`.

The replica's radix cache tells a `KvEventLog` (its `CacheListener`) what it stores, evicts and
flushes. The log turns that into smg-grpc-proto's `KvCacheEvent`s the way sglang 0.5.23's radix
cache does: one `stored` event per page with its token ids, the page's hash chained from the
page before it (SHA-256 over the previous hash and each token as 4 little-endian bytes, the first
8 bytes read as a signed int64; a run under the root starts a new chain), one `removed` event per
evicted page, and `cleared` when the cache is flushed. A split in the tree changes no page and
says nothing. Events of one scheduler step go out as one `KvEventBatch`, numbered 1, 2, 3, ...

smg builds its event-driven prefix index from these events: it hashes each page's `token_ids`
itself and uses `block_hash` only to find a page's parent and to remove it, so the hashes need to
be consistent, not secret. A page cached under a namespace (a LoRA adapter, a cache salt) says
so in its event (`lora_name`, `cache_salt`), and its chain starts from the namespace's own seed
(for a salt, SHA-256 of "sglang-cache-salt-v1", a zero byte and the salt, as sglang's events
seed it; for an adapter, the same under "radixfleet-lora-v1"), so equal tokens in two
namespaces never share a hash.

With HiCache (`--enable-hierarchical-cache`) the host tier publishes too, as sglang's
HiRadixCache does: a page written to host memory is a `stored` event of its own, with tier
`HOST` and medium `CPU_PINNED` (SGLang's `StorageMedium.CPU`), once the copy is there (when the
GPU caches it under write-through, when the GPU evicts it under write-back), and a page the host
pool evicts is a `removed` event of that tier. The GPU's own events are unchanged (its eviction
of a page kept on the host is a `removed` of tier `DEVICE`), so a subscriber that keys its
index by hash alone loses a page the GPU evicted after the host stored it; smg's handling is in
tests/test_emulator_hicache_router.py. A storage backend publishes nothing (SGLang's do not).
A subscriber that asks to resume from a sequence number still in the
history gets the batches after it; one that starts at 0, or whose cursor is too old, gets the
cache as it is now (a snapshot: a `cleared`, then every cached page, parents first) and then the
live batches, with no gap and no duplicate. A subscriber that falls `QUEUE_BATCHES` behind is cut
off, and smg resubscribes with its cursor.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import deque
from collections.abc import AsyncIterator, Hashable, Iterable
from dataclasses import dataclass, field

from smg_grpc_proto.generated import common_pb2 as pb

from radixfleet.emulator.protocol import CacheNamespace, NamespacedPage
from radixfleet.replica import ReplicaModel
from radixfleet.replica.radix import Node

#: Batches kept for subscribers that resume with a cursor. smg's own relay keeps 10,000; a
#: replica here keeps fewer (a long prompt's batch holds hundreds of pages), and a subscriber
#: whose cursor is older gets a snapshot instead, which is as exact.
HISTORY_BATCHES = 1024
#: Batches one subscriber may have queued before it is cut off as too slow.
QUEUE_BATCHES = 4096
#: Pages per snapshot batch: a whole default cache (26k pages) in a few messages of < 4 MiB.
SNAPSHOT_PAGES = 8192


class SubscriberTooSlowError(RuntimeError):
    """A subscriber's queue overflowed; it should resubscribe from its cursor."""


def page_hash(tokens: Iterable[int], *, prior: bytes | None) -> bytes:
    """SGLang's page hash: SHA-256 over the previous page's digest and the page's tokens."""
    hasher = hashlib.sha256()
    if prior is not None:
        hasher.update(prior)
    for token in tokens:
        hasher.update(token.to_bytes(4, "little", signed=False))
    return hasher.digest()


def as_int64(digest: bytes) -> int:
    """The digest's first 8 bytes as the signed int64 an event carries."""
    return int.from_bytes(digest[:8], "big", signed=True)


@dataclass(eq=False)  # each subscriber is itself, however alike their queues
class _Subscriber:
    queue: asyncio.Queue[pb.KvEventBatch | None] = field(
        default_factory=lambda: asyncio.Queue(QUEUE_BATCHES)
    )


class KvEventLog:
    """The replica's KV events: hears the radix cache, numbers batches, serves subscribers."""

    def __init__(self, model: ReplicaModel) -> None:
        self.model = model
        self.sequence = 0  # the last batch sent
        self.history: deque[pb.KvEventBatch] = deque(maxlen=HISTORY_BATCHES)
        self._pending: list[pb.KvCacheEvent] = []
        self._digests: dict[Node, list[bytes]] = {}  # per cached node, its pages' digests
        self._subscribers: set[_Subscriber] = set()
        self._flush_scheduled = False
        self._event_ids = 0
        self.host = HostTierEvents(self)
        model.listen(self, host=self.host)  # the first event is the start-up `cleared`

    # -- CacheListener -----------------------------------------------------------------------

    def stored(self, node: Node) -> None:
        """One `stored` event per page of a new run, chained from its parent's last page."""
        prior, parent = self._chain_start(node)
        digests = []
        for page in node.key:
            digest = page_hash(_tokens(page), prior=prior)
            self._queue(pb.KvCacheEvent(stored=_stored(page, digest, parent)))
            digests.append(digest)
            prior = parent = digest
        self._digests[node] = digests

    def split(self, head: Node, tail: Node) -> None:
        """The head takes the first pages' digests; no event (no page changed)."""
        digests = self._digests.pop(tail)
        cut = len(head.key)
        self._digests[head], self._digests[tail] = digests[:cut], digests[cut:]

    def removed(self, node: Node) -> None:
        """One `removed` event for the pages of an evicted run."""
        digests = self._digests.pop(node)
        removed = pb.KvBlocksRemoved(
            block_hashes=[as_int64(d) for d in digests], tier=pb.KV_CACHE_TIER_DEVICE, medium="GPU"
        )
        self._queue(pb.KvCacheEvent(removed=removed))

    def cleared(self) -> None:
        """The cache was flushed: every page is gone."""
        self._digests.clear()
        self._queue(pb.KvCacheEvent(cleared=pb.KvCacheCleared()))

    def _chain_start(self, node: Node) -> tuple[bytes | None, bytes | None]:
        """What `node`'s first page chains from, and its parent page's digest: under the root,
        its namespace's seed (None for the base model) and no parent."""
        if node.parent is None or node.parent is self.model.cache.root:
            return namespace_seed(node.key[0]), None
        last = self._digests[node.parent][-1]
        return last, last

    def queue(self, event: pb.KvCacheEvent) -> None:
        """Send `event` with this step's batch (the host tier's events go through here)."""
        self._queue(event)

    def _queue(self, event: pb.KvCacheEvent) -> None:
        self._event_ids += 1
        event.event_id = self._event_ids
        self._pending.append(event)
        if not self._flush_scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # outside the server's loop (start-up): sent with the next batch
            self._flush_scheduled = True
            # Every change made in this turn of the loop (one scheduler step) is one batch.
            loop.call_soon(self.flush)

    # -- batches -----------------------------------------------------------------------------

    def flush(self) -> None:
        """Send the events of this step as one batch to every subscriber."""
        self._flush_scheduled = False
        if not self._pending:
            return
        self.sequence += 1
        batch = pb.KvEventBatch(
            sequence_number=self.sequence, timestamp=time.time(), events=self._pending
        )
        self._pending = []
        self.history.append(batch)
        for subscriber in list(self._subscribers):
            if subscriber.queue.full():
                self._cut_off(subscriber)
            else:
                subscriber.queue.put_nowait(batch)

    def _cut_off(self, subscriber: _Subscriber) -> None:
        self._subscribers.discard(subscriber)
        subscriber.queue = asyncio.Queue(1)
        subscriber.queue.put_nowait(None)  # its stream ends; smg resubscribes from its cursor

    async def subscribe(self, start_sequence: int) -> AsyncIterator[pb.KvEventBatch]:
        """The batches after `start_sequence` (or a snapshot first), then live ones."""
        self.flush()  # what happened before the subscription belongs to the history
        subscriber = _Subscriber()
        self._subscribers.add(subscriber)
        try:
            for batch in self._catch_up(start_sequence):
                yield batch
            while (live := await subscriber.queue.get()) is not None:
                yield live
        finally:
            self._subscribers.discard(subscriber)

    def _catch_up(self, start_sequence: int) -> list[pb.KvEventBatch]:
        if start_sequence == self.sequence and start_sequence > 0:
            return []
        oldest = self.history[0].sequence_number if self.history else self.sequence + 1
        if 0 < start_sequence < self.sequence and start_sequence >= oldest - 1:
            return [b for b in self.history if b.sequence_number > start_sequence]
        return self.snapshot()

    def snapshot(self) -> list[pb.KvEventBatch]:
        """The cache as it is now: a `cleared`, then every page, parents first, in
        `KvSnapshotChunk` batches numbered up to the current sequence (none for a fresh log)."""
        events = [pb.KvCacheEvent(cleared=pb.KvCacheCleared())]
        for node in self.model.cache.runs():
            _, parent = self._chain_start(node)
            for page, digest in zip(node.key, self._digests[node], strict=True):
                events.append(pb.KvCacheEvent(stored=_stored(page, digest, parent)))
                parent = digest
        events += self.host.snapshot()
        if self.sequence == 0:
            return []  # nothing was ever published: the subscriber starts with the first batch
        # The chunks reuse the sequence numbers up to now, so there can be no more of them.
        size = max(SNAPSHOT_PAGES, -(-len(events) // self.sequence))
        chunks = [events[i : i + size] for i in range(0, len(events), size)]
        first = self.sequence - len(chunks) + 1
        pages = len(events) - 1
        return [
            pb.KvEventBatch(
                sequence_number=first + index, timestamp=time.time(), events=chunk,
                snapshot=pb.KvSnapshotChunk(index=index, count=len(chunks), blocks=pages),
            )
            for index, chunk in enumerate(chunks)
        ]  # fmt: skip


class HostTierEvents:
    """The host tier's events (a `CacheListener` of its `TierStore`): its pages' chained
    hashes, which equal the GPU's for the same tokens, published with tier `HOST`."""

    def __init__(self, log: KvEventLog) -> None:
        self._log = log
        self._digests: dict[Node, list[bytes]] = {}

    def stored(self, node: Node) -> None:
        """One `stored` event per page the host now holds."""
        for page, digest, parent in self._pages(node, fresh=True):
            self._log.queue(pb.KvCacheEvent(stored=_stored(page, digest, parent, host=True)))

    def split(self, head: Node, tail: Node) -> None:
        """As the GPU's: the head takes the first pages' digests; no event."""
        digests = self._digests.pop(tail)
        cut = len(head.key)
        self._digests[head], self._digests[tail] = digests[:cut], digests[cut:]

    def removed(self, node: Node) -> None:
        """The host pool evicted a run: one `removed` event of tier `HOST`."""
        removed = pb.KvBlocksRemoved(
            block_hashes=[as_int64(d) for d in self._digests.pop(node)],
            tier=pb.KV_CACHE_TIER_HOST,
            medium=HOST_MEDIUM,
        )
        self._log.queue(pb.KvCacheEvent(removed=removed))

    def cleared(self) -> None:
        """The host pool was reset with the GPU's cache, whose `cleared` says it for both."""
        self._digests.clear()

    def snapshot(self) -> list[pb.KvCacheEvent]:
        """Every page the host holds, parents first, as `stored` events."""
        host = self._log.model.host
        if host is None:
            return []
        return [
            pb.KvCacheEvent(stored=_stored(page, digest, parent, host=True))
            for node in host.runs()
            for page, digest, parent in self._pages(node, fresh=False)
        ]

    def _pages(self, node: Node, *, fresh: bool) -> list[tuple[Hashable, bytes, bytes | None]]:
        """Each page of `node` with its digest and its parent page's digest."""
        host = self._log.model.host
        assert host is not None
        if node.parent is None or node.parent is host.root:
            prior, parent = namespace_seed(node.key[0]), None
        else:
            prior = parent = self._digests[node.parent][-1]
        if fresh:
            digests = []
            for page in node.key:
                prior = page_hash(_tokens(page), prior=prior)
                digests.append(prior)
            self._digests[node] = digests
        out: list[tuple[Hashable, bytes, bytes | None]] = []
        for page, digest in zip(node.key, self._digests[node], strict=True):
            out.append((page, digest, parent))
            parent = digest
        return out


#: The medium sglang's host pool publishes (`StorageMedium.CPU`; smg-grpc-proto's `KvCacheTier`
#: lists SGLang's media as GPU, CPU_PINNED, DISK and EXTERNAL).
HOST_MEDIUM = "CPU_PINNED"


def namespace_seed(page: Hashable) -> bytes | None:
    """Where a run under the root starts its chain: nothing for the base model, else its
    namespace's seed."""
    namespace = _namespace(page)
    if namespace is None:
        return None
    hasher = hashlib.sha256()
    if namespace.salt is not None:
        hasher.update(b"sglang-cache-salt-v1\0" + namespace.salt.encode())
    if namespace.lora is not None:
        hasher.update(b"radixfleet-lora-v1\0" + namespace.lora.encode())
    return hasher.digest()


def _stored(
    page: Hashable, digest: bytes, parent: bytes | None, *, host: bool = False
) -> pb.KvBlocksStored:
    tokens = _tokens(page)
    stored = pb.KvBlocksStored(
        blocks=[pb.KvBlock(block_hash=as_int64(digest), token_ids=tokens, block_size=len(tokens))],
        tier=pb.KV_CACHE_TIER_HOST if host else pb.KV_CACHE_TIER_DEVICE,
        medium=HOST_MEDIUM if host else "GPU",
        locality=pb.KV_CACHE_LOCALITY_LOCAL,
    )
    if parent is not None:
        stored.parent_block_hash = as_int64(parent)
    namespace = _namespace(page)
    if namespace is not None and namespace.lora is not None:
        stored.lora_name = namespace.lora
    if namespace is not None and namespace.salt is not None:
        stored.cache_salt = namespace.salt
    return stored


def _namespace(page: Hashable) -> CacheNamespace | None:
    return page.namespace if isinstance(page, NamespacedPage) else None


def _tokens(page: Hashable) -> list[int]:
    if isinstance(page, NamespacedPage):
        return list(page.tokens)
    if not isinstance(page, tuple):
        raise TypeError(f"an emulator page is a tuple of token ids, not {type(page).__name__}")
    return list(page)
