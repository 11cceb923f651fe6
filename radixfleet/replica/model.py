"""The replica model: one SGLang replica's scheduler, cache and lifecycle, in explicit time.

:class:`ReplicaModel` keeps a waiting queue, admits requests into prefill batches (chunked at
`chunked_prefill_size`, at most `max_running_requests` at once, memory reserved ahead as SGLang's
PrefillAdder does), runs decode steps between prefills, and caches prompts and answers in a
:class:`~radixfleet.replica.radix.RadixCache`. It does no I/O and reads no clock: every call
takes `now`, :meth:`ReplicaModel.advance` plays the forward passes that end by `now`, and
:meth:`ReplicaModel.next_event_time` says when the next one ends. The emulator drives it in real
time; the twin drives it in virtual time.

Two simplifications against SGLang, both chosen for speed and determinism: the model knows each
request's true output length, so it reserves exactly the memory a request will need and never
retracts; and runs of decode steps between events are played in closed form
(:mod:`radixfleet.replica.timing`).
"""

from __future__ import annotations

import enum
import heapq
import itertools
import random
from collections import deque
from dataclasses import dataclass, field

from radixfleet.profile import ReplicaProfile
from radixfleet.replica.faults import HEALTHY, Faults
from radixfleet.replica.radix import CacheListener, Node, RadixCache
from radixfleet.replica.request import (
    Event,
    EventKind,
    Phase,
    RejectedError,
    RejectReason,
    Request,
    RequestSpec,
)
from radixfleet.replica.stats import Counters, RecentWindow, ReplicaStats
from radixfleet.replica.timing import DecodeCost, prefill_pass_seconds

#: SGLang falls back from longest-prefix-match to FCFS above this queue length (cost control).
LPM_QUEUE_LIMIT = 128


class Health(enum.Enum):
    """What the replica's health endpoints see."""

    STARTING = "starting"
    READY = "ready"
    HUNG = "hung"
    CRASHED = "crashed"


class SchedulePolicy(enum.Enum):
    """Order in which waiting requests are admitted (SGLang's --schedule-policy)."""

    FCFS = "fcfs"
    LPM = "lpm"


@dataclass(slots=True)
class _Prefill:
    end: float
    items: list[tuple[Request, int]]


@dataclass(slots=True)
class _Decode:
    start: float
    steps_left: int
    end: float  # when the last of `steps_left` steps ends; kept in step with the two above


@dataclass(slots=True)
class _DecodeSet:
    """The decoding requests, with their context total kept in O(1) per step."""

    requests: dict[Request, None] = field(default_factory=dict)
    context_base: int = 0  # sum of (prompt + 1 - join_step); context = base + n * steps
    finishes: list[tuple[int, int, Request]] = field(default_factory=list)


class ReplicaModel:
    """One replica; see the module docstring. All times are in the caller's clock."""

    def __init__(
        self,
        *,
        profile: ReplicaProfile,
        now: float,
        block_tokens: int = 16,
        schedule_policy: SchedulePolicy = SchedulePolicy.FCFS,
        warm: bool = False,
        seed: int = 0,
    ) -> None:
        self.profile = profile
        self._decode_cost = DecodeCost(profile)
        self.block_tokens = block_tokens
        self.schedule_policy = schedule_policy
        self._rng = random.Random(seed)
        self._serial = itertools.count()
        self._faults = HEALTHY
        self._hung_since: float | None = None
        self._crashed = False
        self._restart_at: float | None = None
        self._listener: CacheListener | None = None
        self._boot(now=now, warm=warm)

    # -- lifecycle ---------------------------------------------------------------------------

    def _boot(self, *, now: float, warm: bool) -> None:
        self.started_at = now
        self.ready_at = now if warm else now + self.profile.cold_start_seconds
        self.cache = RadixCache(
            capacity_tokens=self.profile.kv_capacity_tokens, block_tokens=self.block_tokens
        )
        if self._listener is not None:
            self.listen(self._listener)  # a restarted process starts with an empty cache
        self.counters = Counters(started_at=self.ready_at)
        self._hits = RecentWindow()
        self._waiting: deque[Request] = deque()
        self._chunked: Request | None = None
        self._prefilling: dict[Request, None] = {}
        self._decode = _DecodeSet()
        self._steps = 0
        self._need_total = 0
        self._alloc_total = 0
        self._pass: _Prefill | _Decode | None = None
        self._cursor = now
        self._pending: list[Event] = []
        self._requests: dict[str, Request] = {}

    def listen(self, listener: CacheListener) -> None:
        """Tell `listener` of every cache change from now on, across restarts; a (re)start
        begins with a `cleared`, as SGLang's cache reset at start-up publishes."""
        self._listener = listener
        self.cache.listener = listener
        listener.cleared()

    def health(self, now: float) -> Health:
        """STARTING until the cold start is over, then READY unless hung or crashed."""
        if self._crashed and self._restart_at is not None and now >= self._restart_at:
            self._sync(now)  # the restart is due: boot the new process
        if self._crashed:
            return Health.CRASHED
        if now < self.ready_at:
            return Health.STARTING
        return Health.HUNG if self._faults.hung else Health.READY

    def crash(self, *, now: float, restart_after: float | None = None) -> None:
        """Lose every request and the cache; restart after `restart_after` s, or on restart()."""
        self._sync(now)
        for request in list(self._requests.values()):
            self._abort(request, now=now)
        self._crashed = True
        self._restart_at = None if restart_after is None else now + restart_after

    def restart(self, *, now: float) -> None:
        """Start the process again: a fresh, empty replica behind a new cold start."""
        self._crashed = False
        self._faults = HEALTHY
        self._hung_since = None
        self._boot(now=now, warm=False)

    @property
    def faults(self) -> Faults:
        """The faults in force."""
        return self._faults

    def set_faults(self, faults: Faults, *, now: float) -> None:
        """Put `faults` in force from `now`; a hang freezes time for every pass in flight."""
        self._sync(now)
        if faults.hung and self._hung_since is None:
            self._hung_since = now
        elif not faults.hung and self._hung_since is not None:
            self._shift_pass(now - self._hung_since)
            self._hung_since = None
        self._faults = faults
        if isinstance(self._pass, _Decode):  # the steps still to come run at the new speed
            self._pass.end = self._pass.start + self._decode_seconds(self._pass.steps_left)
        if self._pass is None and self._hung_since is None and self._waiting:
            self._start_pass(now)  # requests that arrived during a hang

    def _shift_pass(self, delay: float) -> None:
        if isinstance(self._pass, _Decode):
            self._pass.start += delay
        if self._pass is not None:
            self._pass.end += delay

    # -- requests ----------------------------------------------------------------------------

    def submit(self, spec: RequestSpec, *, now: float) -> Request:
        """Queue a request, or raise RejectedError with SGLang's reason."""
        self._sync(now)
        self._check_admissible(spec, now=now)
        request = Request(spec=spec, arrival=now)
        self._waiting.append(request)
        self._requests[spec.rid] = request
        if self._pass is None and self._hung_since is None:
            self._start_pass(now)
        elif isinstance(self._pass, _Decode):
            self._cut_decode(self._pass)  # let the step in flight end, then schedule the prefill
        return request

    def _check_admissible(self, spec: RequestSpec, *, now: float) -> None:
        if self.health(now) in (Health.STARTING, Health.CRASHED):
            raise RejectedError(RejectReason.NOT_READY, "The server is not ready.")
        total = spec.prompt_tokens + spec.max_new_tokens
        if spec.prompt_tokens >= self.profile.context_length or (
            total > self.profile.context_length
        ):
            raise RejectedError(
                RejectReason.TOO_LONG,
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.profile.context_length} tokens. You requested a total of {total} "
                f"tokens: {spec.prompt_tokens} tokens from the input messages and "
                f"{spec.max_new_tokens} tokens for the completion.",
            )
        limit = self.profile.max_queued_requests
        if limit is not None and len(self._waiting) >= limit:
            raise RejectedError(RejectReason.QUEUE_FULL, "The request queue is full.")
        if self._faults.error_rate and self._rng.random() < self._faults.error_rate:
            raise RejectedError(RejectReason.INJECTED_ERROR, "Internal server error (injected).")

    def abort(self, rid: str, *, now: float) -> bool:
        """Abort the request `rid` if it is still in the replica; True if it was."""
        self._sync(now)
        request = self._requests.get(rid)
        if request is None:
            return False
        self._abort(request, now=now)
        return True

    def get(self, rid: str) -> Request | None:
        """The live (not yet finished) request with id `rid`."""
        return self._requests.get(rid)

    def generated_tokens(self, request: Request) -> int:
        """Output tokens `request` has produced as of the last advance."""
        if request.first_token_at is None:
            return 0
        if request.phase is Phase.DECODE:
            return 1 + self._steps - request.join_step
        return request.generated

    def flush_cache(self, *, now: float) -> bool:
        """Drop the prefix cache when no request is queued or running; False otherwise."""
        self._sync(now)
        if self._requests:
            return False
        return self.cache.flush()

    # -- time --------------------------------------------------------------------------------

    def advance(self, now: float) -> list[Event]:
        """Play every forward pass that ends by `now`; return what happened since last time."""
        self._sync(now)
        events, self._pending = self._pending, []
        return events

    def next_event_time(self) -> float | None:
        """When the pass in flight ends (the next decode finish): call advance() then."""
        if self._crashed or self._hung_since is not None or self._pass is None:
            return None
        return self._pass.end

    def _sync(self, now: float) -> None:
        now = max(now, self._cursor)
        if self._crashed and self._restart_at is not None and now >= self._restart_at:
            self.restart(now=self._restart_at)
        if not self._crashed and self._hung_since is None:
            self._play_until(now)
        self._cursor = now

    def _play_until(self, now: float) -> None:
        while self._pass is not None:
            if isinstance(self._pass, _Prefill):
                if self._pass.end > now:
                    return
                ended = self._pass.end
                self._end_prefill(self._pass)
            else:
                if not self._play_decode(self._pass, now):
                    return
                ended = self._pass.start
            self._pass = None
            self._start_pass(ended)

    # -- scheduling --------------------------------------------------------------------------

    def _start_pass(self, now: float) -> None:
        items = self._plan_prefill(now)
        if items:
            self._begin_prefill(items, now=now)
        elif self._decode.requests:
            steps = self._steps_to_next_finish()
            self._pass = _Decode(start=now, steps_left=steps, end=now + self._decode_seconds(steps))

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
        node = self.cache.match(spec.prompt_blocks, now=now, limit=self._block_limit(spec))
        self.cache.lock(node)
        hit = node.depth * self.block_tokens
        need = spec.prompt_tokens - hit + spec.output_tokens - 1
        reserved = self._need_total - self._alloc_total
        if need > self.cache.available_tokens + self.cache.evictable_tokens - reserved:
            self.cache.unlock(node)
            return False
        request.node, request.cached_tokens, request.prefilled_tokens = node, hit, hit
        request.need_tokens = need
        request.phase, request.admitted_at = Phase.PREFILL, now
        self._need_total += need
        self._prefilling[request] = None
        self._hits.add(hit=hit, total=spec.prompt_tokens)
        self.counters.admitted(prompt_tokens=spec.prompt_tokens, cached_tokens=hit)
        return True

    def _begin_prefill(self, items: list[tuple[Request, int]], *, now: float) -> None:
        chunks = []
        for request, chunk in items:
            self.cache.allocate(chunk)
            request.private_tokens += chunk
            request.allocated_tokens += chunk
            self._alloc_total += chunk
            chunks.append((chunk, request.prefilled_tokens))
        seconds = prefill_pass_seconds(self.profile, chunks=chunks, slowdown=self._faults.slowdown)
        self._pass = _Prefill(end=now + seconds, items=items)

    def _end_prefill(self, prefill: _Prefill) -> None:
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

    def _cut_decode(self, run: _Decode) -> None:
        """End `run` after the step in flight (the batch is about to change)."""
        run.steps_left = 1
        run.end = run.start + self._decode_seconds(1)

    def _play_decode(self, run: _Decode, now: float) -> bool:
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
            if isinstance(self._pass, _Decode):
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

    # -- observation -------------------------------------------------------------------------

    def stats(self, now: float) -> ReplicaStats:
        """A snapshot of what SGLang's scheduler reports, as of `now`."""
        self._sync(now)
        cache = self.cache
        return ReplicaStats(
            num_running_reqs=self._running_count(),
            num_queue_reqs=len(self._waiting),
            kv_used_tokens=cache.used_tokens,
            kv_evictable_tokens=cache.evictable_tokens,
            kv_available_tokens=cache.available_tokens,
            max_total_num_tokens=cache.capacity_tokens,
            cache_hit_rate=self._hits.rate(),
            gen_throughput=self.counters.gen_throughput(now),
            decode_sum_seq_lens=self._decode_context(),
            counters=self.counters.snapshot(evicted_tokens=cache.evicted_tokens_total),
        )
