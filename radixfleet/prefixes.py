"""Prompt-prefix popularity: which prefixes many recent prompts began with, and which of them a
new replica's KV cache should hold first (pre-warming; the policy is
radixfleet/controllers/autoscale/prewarm).

`PrefixPopularity` counts, for each prompt, its prefixes at a ladder of depths (1, 2, 3, 4, 6,
8, 12, ... cache blocks), each count decaying with a half-life, so the prefixes that many recent
requests began with score highest. `hottest` picks the prefixes worth most (score times depth:
the prefill a future request would skip) that fit a share of the new replica's KV cache,
counting blocks that picks share once. A hot prefix is first lengthened through the blocks the
prompts that went on past it agree on, so a shared prefix is picked whole, wherever between two
depths of the ladder it ends.

Pure: no I/O, no clock. Whoever sees the prompts keeps the counts: the twin's and the local
fleet's pre-warmers, and the region entry in a cluster (radixfleet/dataplane/prefixes.py).

The entries see prompts as text, so a prompt's blocks are slices of `CHUNK_CHARS` characters
(`prompt_blocks`): a prefix of blocks is a prefix of the text, and a pick goes back to a replica
as that text, whose tokens are then a prefix of the real prompts' tokens (all but the last few).
Only text prompts count (`prompt`, `text`): a chat is templated by the replica, and a prefix of
its messages is not a prefix of what the replica caches.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

Prefix = tuple[Hashable, ...]

DEFAULT_HALF_LIFE_S = 300.0
DEFAULT_CAPACITY = 4096  # prefixes remembered; the coldest half goes when it is full
_MAX_EXPONENT = 512.0  # 2^512 x counts stays far from a float's 2^1024

CHUNK_CHARS = 256
# English through a Llama tokenizer; only sizes a replica's KV cache in chunks.
CHARS_PER_TOKEN = 4
# Only a prompt's opening counts (about 32k tokens): the popularity keeps thousands of prefixes,
# and a huge prompt must not make each of them huge.
MAX_BLOCKS = 512


def prompt_blocks(body: Mapping[str, Any]) -> list[str]:
    """A request's text prompt cut into blocks ([] for a chat or token ids)."""
    text = body.get("prompt", body.get("text"))
    if not isinstance(text, str):
        return []
    end = min(len(text), CHUNK_CHARS * MAX_BLOCKS)
    return [text[i : i + CHUNK_CHARS] for i in range(0, end, CHUNK_CHARS)]


def kv_blocks(kv_capacity_tokens: int) -> int:
    """How many blocks a replica's KV cache holds."""
    return kv_capacity_tokens * CHARS_PER_TOKEN // CHUNK_CHARS


@functools.lru_cache(maxsize=4096)
def depths(longest: int) -> tuple[int, ...]:
    """The ladder of prefix depths up to `longest`: 1, 2, 3, 4, 6, 8, 12, 16, ... (x1.5 and
    x4/3 in turn), fine enough that a shared system prompt is caught within a third."""
    ladder, depth = [], 1
    while depth <= longest:
        ladder.append(depth)
        if depth < 2:
            depth += 1
        else:  # a power of two grows by half, the step between by a third
            depth = depth * 3 // 2 if depth & (depth - 1) == 0 else depth * 4 // 3
    return tuple(ladder)


class PrefixPopularity:
    """Decayed counts of the prefixes prompts began with (see the module docstring).

    Counted with forward decay: a prompt at `now` adds 2^((now - origin) / half-life) to each
    of its prefixes, and a score is read back divided by the same factor, so a record costs one
    power of two however many prefixes it touches (it runs on every routed request). The origin
    moves forward, rescaling every count, before the factor could overflow.
    """

    def __init__(
        self, *, half_life_s: float = DEFAULT_HALF_LIFE_S, capacity: int = DEFAULT_CAPACITY
    ) -> None:
        self.half_life_s = half_life_s
        self.capacity = capacity
        self._counts: dict[Prefix, float] = {}
        self._origin = 0.0

    def __len__(self) -> int:
        return len(self._counts)

    def record(self, blocks: Sequence[Hashable], now: float) -> None:
        """One prompt of `blocks` (its full cache blocks) was routed at `now`."""
        prompt = blocks if isinstance(blocks, tuple) else tuple(blocks)
        weight = self._weight(now)
        counts = self._counts
        for depth in depths(len(prompt)):
            prefix = prompt[:depth]
            counts[prefix] = counts.get(prefix, 0.0) + weight
        if len(counts) > self.capacity:
            coldest = sorted(counts, key=counts.__getitem__)
            for prefix in coldest[: len(coldest) - self.capacity // 2]:
                del counts[prefix]

    def scores(self, now: float) -> dict[Prefix, float]:
        """Every remembered prefix with its score at `now`."""
        scale = math.exp2(-(now - self._origin) / self.half_life_s)
        return {prefix: count * scale for prefix, count in self._counts.items()}

    def _weight(self, now: float) -> float:
        exponent = (now - self._origin) / self.half_life_s
        if exponent > _MAX_EXPONENT:
            scale = math.exp2(-exponent)
            self._counts = {prefix: count * scale for prefix, count in self._counts.items()}
            self._origin, exponent = now, 0.0
        return math.exp2(exponent)


def hottest(
    popularity: PrefixPopularity,
    *,
    kv_blocks: int,
    kv_fraction: float,
    min_hits: float,
    now: float,
) -> list[Prefix]:
    """The prefixes to send a new replica whose KV cache holds `kv_blocks` blocks: the most
    valuable first, none covered by another pick, within `kv_fraction` of the cache, each
    scored at least `min_hits`."""
    budget = int(kv_blocks * kv_fraction)
    scores = popularity.scores(now)
    deeper = _one_step_deeper(scores)
    hot = [(_extend(p, deeper, min_hits), s) for p, s in scores.items() if s >= min_hits]
    hot.sort(key=lambda item: (-item[1] * len(item[0]), len(item[0])))
    picked: list[Prefix] = []
    used = 0
    for prefix, _ in hot:
        if any(p[: len(prefix)] == prefix for p in picked):
            continue  # a deeper pick already holds it
        extra = len(prefix) - max((_common(prefix, p) for p in picked), default=0)
        if used + extra > budget:
            continue
        picked = [p for p in picked if prefix[: len(p)] != p] + [prefix]  # it covers those
        used += extra
    return picked


Scored = list[tuple[Prefix, float]]


def _one_step_deeper(scores: dict[Prefix, float]) -> dict[Prefix, Scored]:
    """Each remembered prefix's records at the next depth of the ladder: one per prompt that
    went on past it, each prompt counted once."""
    deeper: dict[Prefix, Scored] = {}
    for prefix, score in scores.items():
        ladder = depths(len(prefix))
        if len(ladder) > 1:
            deeper.setdefault(prefix[: ladder[-2]], []).append((prefix, score))
    return deeper


def _extend(prefix: Prefix, deeper: dict[Prefix, Scored], min_hits: float) -> Prefix:
    """`prefix` lengthened block by block while the prompts that went on past it, worth at
    least `min_hits`, agree on the next block. The ladder's depths are a third apart and a
    shared prefix (a system prompt) rarely ends on one: without this, up to a third of it went
    unwarmed (a new replica on the local fleet had 75% of its prompts cached, 97% shared)."""
    followers, depth = deeper.get(prefix, []), len(prefix)
    while True:
        by_block: dict[Hashable, float] = {}
        for follower, score in followers:
            if len(follower) > depth:
                by_block[follower[depth]] = by_block.get(follower[depth], 0.0) + score
        block, score = max(by_block.items(), key=lambda item: item[1], default=(None, 0.0))
        if score < min_hits:
            return followers[0][0][:depth] if depth > len(prefix) else prefix
        followers = [(f, s) for f, s in followers if len(f) > depth and f[depth] == block]
        depth += 1


def _common(a: Prefix, b: Prefix) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
