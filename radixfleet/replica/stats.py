"""What the replica model reports: counters, recent rates and a scheduler snapshot.

These are the numbers behind SGLang's `sglang:*` metrics; the emulator turns a
:class:`ReplicaStats` into Prometheus families and the twin reads it directly.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from radixfleet.replica.request import Request

#: Decode steps between two of SGLang's decode logs (`--decode-log-interval`, default 40). Each
#: log sets `gen_throughput` to the tokens decoded since the previous log over the time since it.
DECODE_LOG_INTERVAL = 40
#: Seconds after its last log at which an idle SGLang scheduler refreshes its gauges, and
#: reports `gen_throughput` 0.
IDLE_REFRESH_S = 30.0
#: Admitted requests behind `cache_hit_rate`.
HIT_WINDOW_REQUESTS = 1000


@dataclass(frozen=True, slots=True)
class CounterValues:
    """Monotonic totals since the replica (re)started."""

    num_requests_total: int
    num_aborted_requests_total: int
    prompt_tokens_total: int
    cached_tokens_total: int
    generation_tokens_total: int
    evicted_tokens_total: int
    # Of `cached_tokens_total` (every tier's), what came from the HiCache tiers below the GPU.
    host_cached_tokens_total: int = 0
    storage_cached_tokens_total: int = 0
    backup_tokens_total: int = 0  # written from the GPU to the host tier

    @property
    def device_cached_tokens_total(self) -> int:
        """Cached prompt tokens found on the GPU itself."""
        return (
            self.cached_tokens_total
            - self.host_cached_tokens_total
            - self.storage_cached_tokens_total
        )


class Counters:
    """Running totals, and decode throughput as SGLang's scheduler logs it.

    SGLang measures `gen_throughput` from one decode log to the next, every
    DECODE_LOG_INTERVAL decode steps, so a reading covers only the last few hundred
    milliseconds of a busy replica. The first log after an idle spell spans the idle time too
    (its clock is not reset while idle) and reads low, until the next log.
    """

    def __init__(self, *, started_at: float) -> None:
        self.num_requests_total = 0
        self.num_aborted_requests_total = 0
        self.prompt_tokens_total = 0
        self.cached_tokens_total = 0
        self.host_cached_tokens_total = 0
        self.storage_cached_tokens_total = 0
        self.backup_tokens_total = 0
        self.generation_tokens_total = 0
        self._last_log_at = started_at
        self._steps_since_log = 0
        self._tokens_since_log = 0.0
        self._logged_throughput = 0.0

    def admitted(
        self,
        *,
        prompt_tokens: int,
        device_tokens: int,
        host_tokens: int = 0,
        storage_tokens: int = 0,
    ) -> None:
        """A request entered a prefill batch with a prefix cached on the GPU, the host and in
        storage."""
        self.prompt_tokens_total += prompt_tokens
        self.cached_tokens_total += device_tokens + host_tokens + storage_tokens
        self.host_cached_tokens_total += host_tokens
        self.storage_cached_tokens_total += storage_tokens

    def backed_up(self, *, tokens: int) -> None:
        """`tokens` were copied from the GPU to the host tier."""
        self.backup_tokens_total += tokens

    def finished(self, request: Request) -> None:
        """A request completed."""
        self.num_requests_total += 1
        self.generation_tokens_total += request.generated

    def aborted(self, request: Request) -> None:
        """A request was aborted (by the client, or by a crash)."""
        self.num_aborted_requests_total += 1
        self.generation_tokens_total += request.generated

    def decoded(self, *, tokens: int, steps: int, start: float, end: float) -> None:
        """`steps` decode steps of one batch ran from `start` to `end` and made `tokens`."""
        pending = self._steps_since_log + steps
        if pending < DECODE_LOG_INTERVAL:
            self._steps_since_log = pending
            self._tokens_since_log += tokens
            return
        step_s, per_step = (end - start) / steps, tokens / steps
        first = DECODE_LOG_INTERVAL - self._steps_since_log  # this run's steps to its first log
        last = first + (steps - first) // DECODE_LOG_INTERVAL * DECODE_LOG_INTERVAL
        logged_at = start + last * step_s
        if last == first:  # one log, whose span began before this run
            made, span = self._tokens_since_log + per_step * first, logged_at - self._last_log_at
        else:  # the last log's span lies inside this run
            made, span = per_step * DECODE_LOG_INTERVAL, step_s * DECODE_LOG_INTERVAL
        self._logged_throughput = made / span if span > 0 else 0.0
        self._last_log_at = logged_at
        self._steps_since_log = steps - last
        self._tokens_since_log = per_step * (steps - last)

    def gen_throughput(self, now: float) -> float:
        """`sglang:gen_throughput`: decode tokens/s at the last log, 0 once idle past a refresh."""
        if now - self._last_log_at > IDLE_REFRESH_S:
            return 0.0
        return self._logged_throughput

    def snapshot(self, *, evicted_tokens: int) -> CounterValues:
        """The totals as plain values."""
        return CounterValues(
            num_requests_total=self.num_requests_total,
            num_aborted_requests_total=self.num_aborted_requests_total,
            prompt_tokens_total=self.prompt_tokens_total,
            cached_tokens_total=self.cached_tokens_total,
            generation_tokens_total=self.generation_tokens_total,
            evicted_tokens_total=evicted_tokens,
            host_cached_tokens_total=self.host_cached_tokens_total,
            storage_cached_tokens_total=self.storage_cached_tokens_total,
            backup_tokens_total=self.backup_tokens_total,
        )


class RecentWindow:
    """Cache hits over the last HIT_WINDOW_REQUESTS admitted requests."""

    def __init__(self) -> None:
        self._items: deque[tuple[int, int]] = deque()
        self._hit = 0
        self._total = 0

    def add(self, *, hit: int, total: int) -> None:
        """One admitted request with `hit` of its `total` prompt tokens cached."""
        self._items.append((hit, total))
        self._hit += hit
        self._total += total
        if len(self._items) > HIT_WINDOW_REQUESTS:
            old_hit, old_total = self._items.popleft()
            self._hit -= old_hit
            self._total -= old_total

    def rate(self) -> float:
        """Hit tokens over prompt tokens in the window; 0 before any request."""
        return self._hit / self._total if self._total else 0.0


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    """A snapshot of the scheduler, named after the `sglang:*` gauges it feeds."""

    num_running_reqs: int
    num_queue_reqs: int
    kv_used_tokens: int
    kv_evictable_tokens: int
    kv_available_tokens: int
    max_total_num_tokens: int
    cache_hit_rate: float
    gen_throughput: float
    decode_sum_seq_lens: int
    counters: CounterValues
    host_used_tokens: int = 0  # the HiCache host tier; 0 of 0 without one
    host_total_tokens: int = 0

    @property
    def token_usage(self) -> float:
        """Used tokens over capacity; evictable cached tokens count as free, as in SGLang."""
        return self.kv_used_tokens / self.max_total_num_tokens
