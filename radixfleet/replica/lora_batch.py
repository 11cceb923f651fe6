"""The scheduler's side of LoRA: which adapters its running requests name, and what they cost.

:class:`LoraBatch` counts the adapters of the requests prefilling and decoding (SGLang's
`running_loras`: the running batch's and the new prefill's), says whether a waiting request may
join them (its adapter loaded and a GPU slot for it, :meth:`LoraPool.fits`), and adds to a
prefill pass the host->GPU copies of adapters new to the pool and to both passes the cost of
mixing adapters (:func:`~radixfleet.replica.lora.decode_extra_seconds`). A replica without LoRA
has no :class:`LoraBatch`, and its timings are exactly those of the model without one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from radixfleet.replica.lora import (
    LoraPool,
    decode_extra_seconds,
    distinct_adapters,
    prefill_extra_seconds,
)
from radixfleet.replica.request import Request


class LoraBatch:
    """The adapters of a replica's running requests, over its :class:`LoraPool`."""

    def __init__(self, pool: LoraPool) -> None:
        self.pool = pool
        self.running: Counter[str | None] = Counter()  # prefilling and decoding
        self.decoding: Counter[str | None] = Counter()
        self.wake_at: float | None = None  # a load a skipped request waits for ends then

    def active_adapters(self) -> int:
        """Distinct adapters (not the base model) of the running requests."""
        return sum(1 for adapter in self.running if adapter is not None)

    def may_admit(self, request: Request, *, now: float) -> bool:
        """Whether `request` may join the batch now; if its adapter is still loading, note
        when the load ends so the scheduler wakes then."""
        adapter = request.spec.adapter
        if not self.pool.ready(adapter, now=now):
            ready = self.pool.next_ready_after(now)
            if ready is not None and (self.wake_at is None or ready < self.wake_at):
                self.wake_at = ready
            return False
        return self.pool.fits(adapter, self.running.keys())

    def admitted(self, request: Request) -> None:
        """`request` entered a prefill batch."""
        self.running[request.spec.adapter] += 1

    def joined_decode(self, request: Request) -> None:
        """`request` moved from prefill to decode."""
        self.decoding[request.spec.adapter] += 1

    def left(self, request: Request, *, decoding: bool) -> None:
        """`request` (admitted earlier) finished or was aborted."""
        adapter = request.spec.adapter
        _drop(self.running, adapter)
        if decoding:
            _drop(self.decoding, adapter)

    def prefill_extra_seconds(self, requests: Iterable[Request]) -> float:
        """What a prefill pass over `requests` adds: copying adapters new to the GPU pool
        (before the pass, as SGLang's prepare_lora_batch does) and mixing its adapters."""
        in_pass = Counter(request.spec.adapter for request in requests)
        copy = self.pool.fetch(self.running.keys())
        return copy + prefill_extra_seconds(self.pool.profile, distinct_adapters(in_pass))

    def decode_extra_seconds(self) -> float:
        """What the decoding requests' adapters add to each decode step."""
        return decode_extra_seconds(self.pool.profile, distinct_adapters(self.decoding))


def _drop(counts: Counter[str | None], adapter: str | None) -> None:
    counts[adapter] -= 1
    if counts[adapter] <= 0:
        del counts[adapter]
