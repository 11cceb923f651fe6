"""What the replica model reports: counters, recent rates and a scheduler snapshot.

These are the numbers behind SGLang's `sglang:*` metrics; the emulator turns a
:class:`ReplicaStats` into Prometheus families and the twin reads it directly.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from radixfleet.replica.request import Request

#: Seconds of decode history behind `gen_throughput` (SGLang logs it per decode interval).
THROUGHPUT_WINDOW_S = 5.0
#: Admitted requests behind `cache_hit_rate`.
HIT_WINDOW_REQUESTS = 1000
#: Decode records kept before old ones are dropped without a reader asking.
_TRIM_AT = 1024


@dataclass(frozen=True, slots=True)
class CounterValues:
    """Monotonic totals since the replica (re)started."""

    num_requests_total: int
    num_aborted_requests_total: int
    prompt_tokens_total: int
    cached_tokens_total: int
    generation_tokens_total: int
    evicted_tokens_total: int


class Counters:
    """Running totals, and the decode tokens of the last few seconds for throughput."""

    def __init__(self) -> None:
        self.num_requests_total = 0
        self.num_aborted_requests_total = 0
        self.prompt_tokens_total = 0
        self.cached_tokens_total = 0
        self.generation_tokens_total = 0
        self._decoded: deque[tuple[float, int]] = deque()
        self._decoded_sum = 0

    def admitted(self, *, prompt_tokens: int, cached_tokens: int) -> None:
        """A request entered a prefill batch."""
        self.prompt_tokens_total += prompt_tokens
        self.cached_tokens_total += cached_tokens

    def finished(self, request: Request) -> None:
        """A request completed."""
        self.num_requests_total += 1
        self.generation_tokens_total += request.generated

    def aborted(self, request: Request) -> None:
        """A request was aborted (by the client, or by a crash)."""
        self.num_aborted_requests_total += 1
        self.generation_tokens_total += request.generated

    def decoded(self, *, tokens: int, now: float) -> None:
        """Decode steps ending at `now` produced `tokens` tokens."""
        self._decoded.append((now, tokens))
        self._decoded_sum += tokens
        if len(self._decoded) > _TRIM_AT:  # readers trim first; this only bounds the memory
            self._trim(now)

    def gen_throughput(self, now: float) -> float:
        """Decode tokens per second over the last THROUGHPUT_WINDOW_S seconds."""
        self._trim(now)
        return self._decoded_sum / THROUGHPUT_WINDOW_S

    def snapshot(self, *, evicted_tokens: int) -> CounterValues:
        """The totals as plain values."""
        return CounterValues(
            num_requests_total=self.num_requests_total,
            num_aborted_requests_total=self.num_aborted_requests_total,
            prompt_tokens_total=self.prompt_tokens_total,
            cached_tokens_total=self.cached_tokens_total,
            generation_tokens_total=self.generation_tokens_total,
            evicted_tokens_total=evicted_tokens,
        )

    def _trim(self, now: float) -> None:
        horizon = now - THROUGHPUT_WINDOW_S
        while self._decoded and self._decoded[0][0] < horizon:
            self._decoded_sum -= self._decoded.popleft()[1]


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

    @property
    def token_usage(self) -> float:
        """Used tokens over capacity; evictable cached tokens count as free, as in SGLang."""
        return self.kv_used_tokens / self.max_total_num_tokens
