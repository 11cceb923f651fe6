"""A decode replica's intake of requests prefilled elsewhere (prefill/decode disaggregation).

In SGLang's P/D mode (`--disaggregation-mode decode`) a request reaches the decode server with
its prompt's KV cache sent from a prefill server. The decode server first preallocates KV room
for the prompt and the answer; a request that finds no room waits in its prealloc queue
(`disaggregation/decode.py: DecodePreallocQueue`), in order. Once its KV is in place it joins
the running decode batch at the next step: it needs no prefill pass, so it never stalls the
batch's decode steps as a prefill does on a colocated replica.

:class:`DecodeIntake` adds that queue to the scheduler: `_transferred` holds the requests whose
KV has arrived and which wait for room, and every pass boundary lets in as many as fit before
the scheduler plans its next pass. A transferred request's first token is the one its prefill
server produced; here it is emitted when the request joins the batch, so the caller's TTFT
holds the prefill, the transfer and the wait for room.
"""

from __future__ import annotations

from collections import deque

from radixfleet.replica.request import Event, EventKind, Phase, Request
from radixfleet.replica.scheduler import Scheduler


class DecodeIntake(Scheduler):
    """The scheduler with a decode server's prealloc queue; see the module docstring."""

    def _reset(self, *, now: float, counters_from: float) -> None:
        super()._reset(now=now, counters_from=counters_from)
        self._transferred: deque[Request] = deque()

    def _start_pass(self, now: float) -> None:
        if self._transferred:
            self._take_transferred(now)
        super()._start_pass(now)

    def _take_transferred(self, now: float) -> None:
        """Let in the queue's head requests while KV room and the batch's size allow."""
        queue = self._transferred
        while queue and self._running_count() < self._max_running():
            request = queue[0]
            spec = request.spec
            need = spec.prompt_tokens + spec.output_tokens - 1
            reserved = self._need_total - self._alloc_total
            if need > self.cache.available_tokens + self.cache.evictable_tokens - reserved:
                return  # the head waits for room, and the rest behind it, as SGLang's queue
            queue.popleft()
            self._join_transferred(request, need=need, now=now)

    def _join_transferred(self, request: Request, *, need: int, now: float) -> None:
        prompt = request.spec.prompt_tokens
        self.cache.allocate(prompt)  # the KV received from the prefill server
        request.node = self.cache.root  # nothing of it is shared through the radix tree
        request.private_tokens = request.allocated_tokens = prompt
        request.prefilled_tokens = prompt
        request.need_tokens = need
        self._need_total += need
        self._alloc_total += prompt
        request.admitted_at = request.first_token_at = now
        self._pending.append(Event(EventKind.FIRST_TOKEN, request, now))
        if request.spec.output_tokens <= 1:
            request.phase = Phase.PREFILL  # what _finish releases: no decode step was taken
            self._finish(request, now=now)
        else:
            self._join_decode(request)

    def _abort(self, request: Request, *, now: float) -> None:
        if request.phase is Phase.WAITING and request in self._transferred:
            self._transferred.remove(request)
            self._requests.pop(request.rid, None)
            request.phase, request.finished_at, request.finish_reason = (
                Phase.ABORTED,
                now,
                "abort",
            )
            self.counters.aborted(request)
            self._pending.append(Event(EventKind.ABORTED, request, now))
            return
        super()._abort(request, now=now)

    def transferred_waiting(self) -> int:
        """Requests whose KV has arrived and which wait for room (the prealloc queue)."""
        return len(self._transferred)
