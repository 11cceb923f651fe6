"""The replica's scheduler: its waiting queue, the prefill batches and decode runs it plays, and
the requests leaving them, over the replica's KV cache.

:class:`Scheduler` admits waiting requests into prefill batches (chunked at
`chunked_prefill_size`, at most `max_running_requests` at once, memory reserved ahead as SGLang's
PrefillAdder does), runs decode steps between prefills in closed form
(:mod:`radixfleet.replica.timing`), and caches prompts and answers in a
:class:`~radixfleet.replica.radix.RadixCache`. It is the state the replica model
(:mod:`radixfleet.replica.model`) builds its lifecycle, requests and clock on; like it, it does
no I/O and reads no clock.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field

from radixfleet.profile import ReplicaProfile
from radixfleet.replica.faults import HEALTHY
from radixfleet.replica.radix import Node, RadixCache
from radixfleet.replica.request import Event, EventKind, Phase, Request, RequestSpec
from radixfleet.replica.stats import Counters, RecentWindow
from radixfleet.replica.tiers import HostTierSpec, Tiers, TierStore
from radixfleet.replica.timing import DecodeCost, prefill_pass_seconds

#: SGLang falls back from longest-prefix-match to FCFS above this queue length (cost control).
LPM_QUEUE_LIMIT = 128


class SchedulePolicy(enum.Enum):
    """Order in which waiting requests are admitted (SGLang's --schedule-policy)."""

    FCFS = "fcfs"
    LPM = "lpm"


@dataclass(slots=True)
class PrefillPass:
    """A prefill pass in flight: when it ends, and each request's chunk in it."""

    end: float
    items: list[tuple[Request, int]]


@dataclass(slots=True)
class DecodeRun:
    """A run of decode steps in flight, up to the next finish (or a change of batch)."""

    start: float
    steps_left: int
    end: float  # when the last of `steps_left` steps ends; kept in step with the two above


@dataclass(slots=True)
class DecodeSet:
    """The decoding requests, with their context total kept in O(1) per step."""

    requests: dict[Request, None] = field(default_factory=dict)
    context_base: int = 0  # sum of (prompt + 1 - join_step); context = base + n * steps
    finishes: list[tuple[int, int, Request]] = field(default_factory=list)


class Scheduler:
    """A replica's queue, batches and cache; :class:`~radixfleet.replica.model.ReplicaModel`
    adds the process around them. All times are in the caller's clock."""

    def __init__(
        self,
        *,
        profile: ReplicaProfile,
        block_tokens: int,
        schedule_policy: SchedulePolicy,
        host_tier: HostTierSpec | None = None,
        storage: TierStore | None = None,
    ) -> None:
        if storage is not None and host_tier is None:
            raise ValueError("a storage tier needs a host tier: SGLang stages its blocks there")
        self.profile = profile
        self._decode_cost = DecodeCost(profile)
        self.block_tokens = block_tokens
        self.schedule_policy = schedule_policy
        self.host_tier = host_tier
        self.storage = storage
        self._serial = itertools.count()
        self._faults = HEALTHY

    @property
    def host(self) -> TierStore | None:
        """The host tier (SGLang HiCache's), if the replica has one."""
        return None if self.tiers is None else self.tiers.host

    def _reset(self, *, now: float, counters_from: float) -> None:
        """An empty cache and no request: a process just (re)started at `now`. Its host tier
        is process memory and starts empty too; a storage backend outlives the process."""
        self.cache = RadixCache(
            capacity_tokens=self.profile.kv_capacity_tokens, block_tokens=self.block_tokens
        )
        self.counters = Counters(started_at=counters_from)
        self.tiers: Tiers | None = None
        if self.host_tier is not None:
            self.tiers = Tiers(
                spec=self.host_tier, storage=self.storage, gpu=self.cache, counters=self.counters
            )
        self._hits = RecentWindow()
        self._waiting: deque[Request] = deque()
        self._chunked: Request | None = None
        self._prefilling: dict[Request, None] = {}
        self._decode = DecodeSet()
        self._steps = 0
        self._need_total = 0
        self._alloc_total = 0
        self._pass: PrefillPass | DecodeRun | None = None
        self._cursor = now
        self._pending: list[Event] = []
        self._requests: dict[str, Request] = {}

    # -- scheduling --------------------------------------------------------------------------

    def _start_pass(self, now: float) -> None:
        items = self._plan_prefill(now)
        if items:
            self._begin_prefill(items, now=now)
        elif self._decode.requests:
            steps = self._steps_to_next_finish()
            self._pass = DecodeRun(
                start=now, steps_left=steps, end=now + self._decode_seconds(steps)
            )

    def _plan_prefill(self, now: float) -> list[tuple[Request, int]]:
        if self._chunked is None and not self._waiting:
            return []  # the usual case between arrivals: nothing to prefill
        budget = self.profile.chunked_prefill_size
        items: list[tuple[Request, int]] = []
        if self._chunked is not None:
            request = self._chunked
            chunk = min(budget, request.spec.prompt_tokens - request.prefilled_tokens)
            items.append((request, chunk))
            budget -= chunk
            if request.prefilled_tokens + chunk < request.spec.prompt_tokens:
                return items
            self._chunked = None
        self._order_waiting(now)
        while self._waiting and budget > 0 and self._running_count() < self._max_running():
            request = self._waiting[0]
            if not self._admit(request, now=now):
                break  # FCFS: the head waits for memory, as SGLang's adder stops there
            self._waiting.popleft()
            remaining = request.spec.prompt_tokens - request.prefilled_tokens
            chunk = min(remaining, budget)
            items.append((request, chunk))
            budget -= chunk
            if chunk < remaining:
                self._chunked = request
                break
        return items

    def _order_waiting(self, now: float) -> None:
        if self.schedule_policy is not SchedulePolicy.LPM or len(self._waiting) > LPM_QUEUE_LIMIT:
            return
        if len(self._waiting) < 2:
            return
        depth = {
            request: self.cache.match(
                request.spec.prompt_blocks, now=now, limit=self._block_limit(request.spec)
            ).depth
            for request in self._waiting
        }
        self._waiting = deque(sorted(self._waiting, key=lambda request: -depth[request]))

    def _running_count(self) -> int:
        return len(self._prefilling) + len(self._decode.requests)

    def _max_running(self) -> int:
        return self.profile.max_running_requests

    def _block_limit(self, spec: RequestSpec) -> int:
        # SGLang always recomputes the last prompt token, so a hit stops one token short.
        return (spec.prompt_tokens - 1) // self.block_tokens

    def _admit(self, request: Request, *, now: float) -> bool:
        spec = request.spec
        limit = self._block_limit(spec)
        node = self.cache.match(spec.prompt_blocks, now=now, limit=limit)
        self.cache.lock(node)
        hit = node.depth * self.block_tokens
        # Tokens loaded back from a lower tier need GPU room like computed ones.
        need = spec.prompt_tokens - hit + spec.output_tokens - 1
        reserved = self._need_total - self._alloc_total
        if need > self.cache.available_tokens + self.cache.evictable_tokens - reserved:
            self.cache.unlock(node)
            return False
        host, storage = (
            (0, 0)
            if self.tiers is None
            else self.tiers.load(spec.prompt_blocks, gpu=node.depth, limit=limit, now=now)
        )
        loaded = (host + storage) * self.block_tokens
        # KV a prefill peer sent is allocated like KV loaded back from a tier, and computes nothing.
        sent = max(0, min(spec.transferred_tokens, spec.prompt_tokens - hit - loaded))
        request.node, request.cached_tokens = node, hit + loaded
        request.prefilled_tokens, request.load_tokens = hit + loaded + sent, loaded + sent
        request.host_cached_tokens = host * self.block_tokens
        request.storage_cached_tokens = storage * self.block_tokens
        request.need_tokens = need
        request.phase, request.admitted_at = Phase.PREFILL, now
        self._need_total += need
        self._prefilling[request] = None
        self._hits.add(hit=hit + loaded, total=spec.prompt_tokens)
        self.counters.admitted(
            prompt_tokens=spec.prompt_tokens,
            device_tokens=hit,
            host_tokens=request.host_cached_tokens,
            storage_tokens=request.storage_cached_tokens,
        )
        return True

    def _begin_prefill(self, items: list[tuple[Request, int]], *, now: float) -> None:
        chunks = []
        host = storage = 0
        for request, chunk in items:
            if request.load_tokens:  # loaded back in this request's first pass
                host += request.host_cached_tokens
                storage += request.storage_cached_tokens
                chunk_and_load, request.load_tokens = chunk + request.load_tokens, 0
            else:
                chunk_and_load = chunk
            self.cache.allocate(chunk_and_load)
            request.private_tokens += chunk_and_load
            request.allocated_tokens += chunk_and_load
            self._alloc_total += chunk_and_load
            chunks.append((chunk, request.prefilled_tokens))
        slowdown = self._faults.slowdown
        seconds = prefill_pass_seconds(self.profile, chunks=chunks, slowdown=slowdown)
        if host or storage:
            # SGLang loads layer by layer while the previous layer computes: the pass takes
            # the longer of the two.
            load = self.profile.load_seconds(host_tokens=host, storage_tokens=storage)
            seconds = max(seconds, load * slowdown)
        self._pass = PrefillPass(end=now + seconds, items=items)

    def _end_prefill(self, prefill: PrefillPass) -> None:
        now = prefill.end
        for request, chunk in prefill.items:
            if request.phase is not Phase.PREFILL:
                continue  # aborted during the pass
            request.prefilled_tokens += chunk
            if request.prefilled_tokens < request.spec.prompt_tokens:
                continue
            self._cache_prompt(request, now=now)
            del self._prefilling[request]
            request.first_token_at = now
            self._pending.append(Event(EventKind.FIRST_TOKEN, request, now))
            if request.spec.output_tokens <= 1:
                self._finish(request, now=now)
            else:
                self._join_decode(request)

    def _cache_prompt(self, request: Request, *, now: float) -> None:
        """Move the prompt's full blocks from the request's private tokens into the tree."""
        old = request.node
        assert isinstance(old, Node)
        blocks = request.spec.prompt_blocks
        if len(blocks) <= old.depth:
            return
        moved = (len(blocks) - old.depth) * self.block_tokens
        self.cache.free(moved)
        request.private_tokens -= moved
        node = self.cache.insert(blocks, now=now, lock=True)
        self.cache.unlock(old)
        request.node = node
        if self.tiers is not None:
            self.tiers.cached_on_gpu(blocks, now=now)

    def _join_decode(self, request: Request) -> None:
        request.phase = Phase.DECODE
        request.join_step = self._steps
        self._decode.requests[request] = None
        self._decode.context_base += request.spec.prompt_tokens + 1 - self._steps
        finish_step = self._steps + request.spec.output_tokens - 1
        heapq.heappush(self._decode.finishes, (finish_step, next(self._serial), request))

    # -- decode ------------------------------------------------------------------------------

    def _decode_context(self) -> int:
        return self._decode.context_base + len(self._decode.requests) * self._steps

    def _decode_seconds(self, steps: int) -> float:
        return self._decode_cost.run_seconds(
            steps, len(self._decode.requests), self._decode_context(), self._faults.slowdown
        )

    def _steps_to_next_finish(self) -> int:
        finishes = self._decode.finishes
        while finishes and finishes[0][2].phase is not Phase.DECODE:
            heapq.heappop(finishes)  # aborted earlier
        return max(1, finishes[0][0] - self._steps)

    def _cut_decode(self, run: DecodeRun) -> None:
        """End `run` after the step in flight (the batch is about to change)."""
        run.steps_left = 1
        run.end = run.start + self._decode_seconds(1)

    def _play_decode(self, run: DecodeRun, now: float) -> bool:
        """Play the decode steps of `run` that end by `now`; True once the run is over."""
        batch, began = len(self._decode.requests), run.start
        if run.end <= now:  # the usual call: woken at the run's end, no need to solve for it
            steps, run.start = run.steps_left, run.end
        elif now <= run.start:
            return False  # the run starts now (a pass just ended): no step can be over yet
        else:
            context, slowdown = self._decode_context(), self._faults.slowdown
            steps = self._decode_cost.steps_within(
                now - run.start, batch, context, slowdown, run.steps_left
            )
            if steps == 0:
                return False
            run.start += self._decode_seconds(steps)
        run.steps_left -= steps
        self._steps += steps
        self.cache.allocate(batch * steps)
        self._alloc_total += batch * steps
        self.counters.decoded(tokens=batch * steps, steps=steps, start=began, end=run.start)
        if run.steps_left:
            run.end = run.start + self._decode_seconds(run.steps_left)
            return False
        self._finish_due(now=run.start)
        return True

    def _finish_due(self, *, now: float) -> None:
        finishes = self._decode.finishes
        while finishes and finishes[0][0] <= self._steps:
            _, _, request = heapq.heappop(finishes)
            if request.phase is Phase.DECODE:  # not aborted earlier
                self._finish(request, now=now)

    # -- leaving -----------------------------------------------------------------------------

    def _finish(self, request: Request, *, now: float) -> None:
        self._release(request)
        spec = request.spec
        if spec.finish_blocks:
            self.cache.insert(spec.finish_blocks, now=now)
            if self.tiers is not None:
                self.tiers.cached_on_gpu(spec.finish_blocks, now=now)
        self.cache.unlock(request.node)  # type: ignore[arg-type]
        request.phase, request.finished_at = Phase.FINISHED, now
        request.finish_reason = "length" if spec.output_tokens >= spec.max_new_tokens else "stop"
        self.counters.finished(request)
        self._pending.append(Event(EventKind.FINISHED, request, now))

    def _abort(self, request: Request, *, now: float) -> None:
        if request.phase is Phase.WAITING:
            self._waiting.remove(request)
            self._requests.pop(request.rid, None)
        else:
            self._release(request)
            self.cache.unlock(request.node)  # type: ignore[arg-type]
            if self._chunked is request:
                self._chunked = None
            if isinstance(self._pass, DecodeRun):
                self._cut_decode(self._pass)  # the batch changed: re-plan after this step
        request.phase, request.finished_at, request.finish_reason = Phase.ABORTED, now, "abort"
        self.counters.aborted(request)
        self._pending.append(Event(EventKind.ABORTED, request, now))

    def _release(self, request: Request) -> None:
        """Give back an admitted request's private tokens and reservation."""
        steps = 0
        if request.phase is Phase.DECODE:
            steps = self._steps - request.join_step
            request.generated = 1 + steps
            del self._decode.requests[request]
            self._decode.context_base -= request.spec.prompt_tokens + 1 - request.join_step
        else:
            self._prefilling.pop(request, None)
            request.generated = 1 if request.first_token_at is not None else 0
        request.decode_steps = steps
        self.cache.free(request.private_tokens + steps)
        request.private_tokens = 0
        self._need_total -= request.need_tokens
        self._alloc_total -= request.allocated_tokens + steps
        self._requests.pop(request.rid, None)
