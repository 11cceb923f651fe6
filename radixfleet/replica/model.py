"""The replica model: one SGLang replica's scheduler, cache and lifecycle, in explicit time.

:class:`ReplicaModel` is the process around a :class:`~radixfleet.replica.scheduler.Scheduler`
(the waiting queue, prefill batches chunked at `chunked_prefill_size`, decode steps between
them, the prompts and answers cached in a :class:`~radixfleet.replica.radix.RadixCache`): its
lifecycle (cold start, faults, crash and restart), the requests it takes and gives up, its clock
and its stats. It does no I/O and reads no clock: every call takes `now`,
:meth:`ReplicaModel.advance` plays the forward passes that end by `now`, and
:meth:`ReplicaModel.next_event_time` says when the next one ends. The emulator drives it in real
time; the twin drives it in virtual time.

Two simplifications against SGLang, both chosen for speed and determinism: the model knows each
request's true output length, so it reserves exactly the memory a request will need and never
retracts; and runs of decode steps between events are played in closed form
(:mod:`radixfleet.replica.timing`).

With a :class:`~radixfleet.replica.lora.LoraSpec` the replica serves LoRA adapters
(:mod:`radixfleet.replica.lora`): :meth:`ReplicaModel.load_adapter` and
:meth:`ReplicaModel.unload_adapter` change them, and a request naming one waits for its load and
a GPU slot. Without one it is the base model alone, timed exactly as before.
"""

from __future__ import annotations

import enum
import random
from dataclasses import replace

from radixfleet.profile import ReplicaProfile
from radixfleet.replica.faults import HEALTHY, Faults
from radixfleet.replica.lora import AdapterSpec, LoadResult, LoraError, LoraSpec
from radixfleet.replica.radix import CacheListener
from radixfleet.replica.request import (
    Event,
    Phase,
    RejectedError,
    RejectReason,
    Request,
    RequestSpec,
)
from radixfleet.replica.scheduler import DecodeRun, PrefillPass, SchedulePolicy, Scheduler
from radixfleet.replica.stats import ReplicaStats
from radixfleet.replica.tiers import HostTierSpec, TierStore

#: sglang 0.5.23 takes prompts up to this many tokens short of `max_req_len` (`tp_worker.py`:
#: `max_req_input_len = max_req_len - 5`).
INPUT_MARGIN_TOKENS = 5


class Health(enum.Enum):
    """What the replica's health endpoints see."""

    STARTING = "starting"
    READY = "ready"
    HUNG = "hung"
    CRASHED = "crashed"


class ReplicaModel(Scheduler):
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
        host_tier: HostTierSpec | None = None,
        storage: TierStore | None = None,
        lora: LoraSpec | None = None,
    ) -> None:
        super().__init__(
            profile=profile,
            block_tokens=block_tokens,
            schedule_policy=schedule_policy,
            host_tier=host_tier,
            storage=storage,
            lora=lora,
        )
        self._rng = random.Random(seed)
        self._hung_since: float | None = None
        self._crashed = False
        self._restart_at: float | None = None
        self._listener: CacheListener | None = None
        self._host_listener: CacheListener | None = None
        self._boot(now=now, warm=warm)

    # -- lifecycle ---------------------------------------------------------------------------

    def _boot(self, *, now: float, warm: bool) -> None:
        self.started_at = now
        self.ready_at = now if warm else now + self.profile.cold_start_seconds
        self._reset(now=now, counters_from=self.ready_at)
        if self._listener is not None:
            # A restarted process starts with an empty cache (and an empty host tier).
            self.listen(self._listener, host=self._host_listener)

    def listen(self, listener: CacheListener, *, host: CacheListener | None = None) -> None:
        """Tell `listener` of every cache change from now on, across restarts, and `host` of
        the host tier's (if the replica has one); a (re)start begins with a `cleared` to each,
        as SGLang's cache reset at start-up publishes."""
        self._listener, self._host_listener = listener, host
        self.cache.listener = listener
        listener.cleared()
        if host is not None and self.host is not None:
            self.host.listen(host)
            host.cleared()

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
        if isinstance(self._pass, DecodeRun):  # the steps still to come run at the new speed
            self._pass.end = self._pass.start + self._decode_seconds(self._pass.steps_left)
        if self._pass is None and self._hung_since is None and self._waiting:
            self._start_pass(now)  # requests that arrived during a hang

    def _shift_pass(self, delay: float) -> None:
        if isinstance(self._pass, DecodeRun):
            self._pass.start += delay
        if self._pass is not None:
            self._pass.end += delay

    # -- requests ----------------------------------------------------------------------------

    @property
    def max_request_tokens(self) -> int:
        """SGLang's `max_req_len`: a request's prompt and answer fit the context and the KV
        pool (sglang 0.5.23 `tp_worker.py`), one token short of each."""
        return min(self.profile.context_length, self.profile.kv_capacity_tokens) - 1

    def submit(self, spec: RequestSpec, *, now: float) -> Request:
        """Queue a request, or raise RejectedError with SGLang's reason. Its answer is cut to
        what the KV pool holds beside its prompt, as SGLang clips `max_new_tokens`."""
        self._sync(now)
        self._check_admissible(spec, now=now)
        spec = self._clip_output(spec)
        request = Request(spec=spec, arrival=now)
        self._waiting.append(request)
        self._requests[spec.rid] = request
        if self._pass is None and self._hung_since is None:
            self._start_pass(now)
        elif isinstance(self._pass, DecodeRun):
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
        longest = self.max_request_tokens - INPUT_MARGIN_TOKENS
        if spec.prompt_tokens >= longest:
            raise RejectedError(
                RejectReason.TOO_LONG,
                f"Input length ({spec.prompt_tokens} tokens) exceeds the maximum allowed length "
                f"({longest} tokens). Use a shorter input or enable --allow-auto-truncate.",
            )
        limit = self.profile.max_queued_requests
        if limit is not None and len(self._waiting) >= limit:
            raise RejectedError(RejectReason.QUEUE_FULL, "The request queue is full.")
        if self._faults.error_rate and self._rng.random() < self._faults.error_rate:
            raise RejectedError(RejectReason.INJECTED_ERROR, "Internal server error (injected).")
        if spec.adapter is not None:
            self._resolve_adapter(spec.adapter, now=now)

    def _resolve_adapter(self, name: str, *, now: float) -> None:
        if self.lora is None:
            raise RejectedError(
                RejectReason.LORA,
                f"LoRA adapter '{name}' was requested, but LoRA is not enabled. Please launch "
                "the server with --enable-lora flag and preload adapters using --lora-paths or "
                "/load_lora_adapter endpoint.",
            )
        try:
            self.lora.pool.resolve(name, now=now)
        except LoraError as err:
            raise RejectedError(RejectReason.LORA, str(err)) from None

    # -- adapters ----------------------------------------------------------------------------

    def load_adapter(self, adapter: AdapterSpec, *, now: float) -> LoadResult:
        """Load `adapter` (SGLang's /load_lora_adapter); raises LoraError with SGLang's text."""
        self._sync(now)
        if self.lora is None:
            raise LoraError("LoRA is not enabled. Please set `--enable-lora` to enable LoRA.")
        return self.lora.pool.load(adapter, now=now)

    def unload_adapter(self, name: str, *, now: float) -> None:
        """Unload `name` (SGLang's /unload_lora_adapter); its requests in flight finish."""
        self._sync(now)
        if self.lora is None:
            raise LoraError("LoRA is not enabled. Please set `--enable-lora` to enable LoRA.")
        self.lora.pool.unload(name)

    def adapters(self, *, now: float) -> list[AdapterSpec]:
        """The adapters requests may name at `now` (what SGLang's /v1/models lists)."""
        self._sync(now)
        return [] if self.lora is None else self.lora.pool.loaded(now=now)

    def adapter_in_use(self, name: str) -> bool:
        """Whether a request in the replica (waiting or running) names the adapter `name`."""
        return any(request.spec.adapter == name for request in self._requests.values())

    def _clip_output(self, spec: RequestSpec) -> RequestSpec:
        room = self.max_request_tokens - spec.prompt_tokens - 1
        if spec.output_tokens <= room:
            return spec  # every request of a full-size pool
        finish = spec.finish_blocks
        if finish is not None:
            finish = finish[: (spec.prompt_tokens + room) // self.block_tokens]
        return replace(spec, output_tokens=room, max_new_tokens=room, finish_blocks=finish)

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
        flushed = self.cache.flush()
        if flushed and self.host is not None:
            self.host.clear()  # SGLang's flush resets the host pool with the device's
        return flushed

    # -- time --------------------------------------------------------------------------------

    def advance(self, now: float) -> list[Event]:
        """Play every forward pass that ends by `now`; return what happened since last time."""
        self._sync(now)
        events, self._pending = self._pending, []
        return events

    def next_event_time(self) -> float | None:
        """When the pass in flight ends (the next decode finish): call advance() then."""
        if self._crashed or self._hung_since is not None:
            return None
        if self._pass is None:
            return None if self.lora is None else self.lora.wake_at
        return self._pass.end

    def _sync(self, now: float) -> None:
        now = max(now, self._cursor)
        if self._crashed and self._restart_at is not None and now >= self._restart_at:
            self.restart(now=self._restart_at)
        if not self._crashed and self._hung_since is None:
            self._play_until(now)
        self._cursor = now

    def _play_until(self, now: float) -> None:
        self._wake_for_adapters(now)
        while self._pass is not None:
            if isinstance(self._pass, PrefillPass):
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
            self._wake_for_adapters(now)

    def _wake_for_adapters(self, now: float) -> None:
        """Idle with requests waiting for an adapter's load: schedule them when it ends."""
        lora = self.lora
        if lora is None or self._pass is not None or lora.wake_at is None:
            return
        if lora.wake_at <= now:
            wake, lora.wake_at = lora.wake_at, None
            self._start_pass(wake)

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
            host_used_tokens=0 if self.host is None else self.host.used_tokens,
            host_total_tokens=0 if self.host is None else self.host.capacity_tokens,
        )
